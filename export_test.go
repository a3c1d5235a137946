package capgate

// Fault hooks for the external tests (package capgate_test), which can use
// the real stores without an import cycle.

// SetRetryAfterHook makes Retry-After's computation fail with fn's error.
func SetRetryAfterHook(g *Gate, fn func() error) { g.hooksFor().retryAfter = fn }

// SetStartRenewerHook replaces how a call is handed to the renewer: fn
// gets the function that does it.
func SetStartRenewerHook(g *Gate, fn func(func()) error) { g.hooksFor().startRenewer = fn }

// SetEmitHook replaces the sink's Emit.
func SetEmitHook(g *Gate, fn func([]byte) error) { g.hooksFor().emit = fn }

func (g *Gate) hooksFor() *gateHooks {
	if g.hooks == nil {
		g.hooks = &gateHooks{}
	}
	return g.hooks
}

// WaitPumpEvery is how often a waiting call pumps the waitlist.
const WaitPumpEvery = waitPumpEvery

// WaitLimitsEvery is how often a waiting call reads the limits in force.
const WaitLimitsEvery = waitLimitsEvery

// ErrTicketLost is the error of a waiter whose ticket the store lost.
var ErrTicketLost = errTicketLost

// TuneKey returns the store key of the adaptive state of g's lane name.
func TuneKey(g *Gate, name LaneName) string { return g.keys().tuneKey(name) }

// Skipping reports whether the gate's skip window is open.
func (g *Gate) Skipping() bool { return g.skipping() }

// FailStore opens the skip window, as a store error does.
func (g *Gate) FailStore() { g.failStore() }

// ResetSkip closes the skip window, as if the store had never failed.
func (g *Gate) ResetSkip() { g.window().reset() }

// Record is the log line of one gated call (record).
type Record = record

// Record returns the call's log record.
func (a *Admission) Record() Record { return a.record() }
