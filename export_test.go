package capgate

import (
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
)

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

// FailStore opens the skip window, as a store error does.
func (g *Gate) FailStore() { g.failStore() }

// ResetSkip closes the skip window, as if the store had never failed.
func (g *Gate) ResetSkip() { g.window().reset() }

// Record is the log line of one gated call (record).
type Record = record

// Record returns the call's log record.
func (a *Admission) Record() Record { return a.record() }

// AddLane adds lane name's count (nil: not known) and limit to r, under
// its log keys in p (logKeys), after the lanes r has; a lane p does not
// have is left out, as the gate leaves it out.
func (r *record) AddLane(p *policy.Policy, name LaneName, inFlight, limit *int) {
	in, lim := logKeys(p, name)
	if in == "" {
		return
	}
	l := logLane{InFlightKey: in, LimitKey: lim}
	if inFlight != nil {
		l.InFlight, l.Known = *inFlight, true
	}
	if limit != nil {
		l.Limit = *limit
	}
	r.Lanes = append(r.Lanes, l)
}

// CallRecord returns the record the gate writes for call under cfg
// before it decides anything: the event, the route, the call's fields and
// classes, its tier, user, attribution and metadata, no lanes.
func CallRecord(cfg settings.Config, call Call) Record {
	a := &Admission{out: Outcome{Call: call}, cfg: cfg, scope: -1}
	return a.record()
}

// AppendLine appends the call's log line to b, as Release writes it.
func (a *Admission) AppendLine(b []byte) []byte { return a.appendLine(b) }

// LogKeys is logKeys, for the tests of the record.
var LogKeys = logKeys
