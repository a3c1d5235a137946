package capgate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/capgate/capgate/settings"
)

// DefaultStoreDeadline bounds the gate's waits on a store that reports no
// deadline of its own (see Gate.storeDeadline).
const DefaultStoreDeadline = time.Second

// Gate admits heavy calls. Admit decides one call and, unless it is
// refused or the limiter could not count, takes a lease in each of its lanes
// and renews it in the background; Release ends it and writes its log line.
// In enforce, an enforced call that finds a lane full waits in Admit for a
// slot, up to Config.Wait.MaxSeconds, when the store is a Waitlist (see
// wait.go); every other call is decided at once.
//
// The gate never refuses a call because of its own failure: a store error,
// a bug or a bad input makes the call "unavailable" and lets it go ahead.
// Only store errors open the skip window. A Gate is safe for concurrent use.
//
// A Gate is configured through its fields, as client.Transport is; set
// them before first use. Each field's comment says what its zero value
// does. NewGate fills in the required ones, SkipFor, the hold history and,
// when the store is a tune.Store, the state of the adaptive limits (which
// package adaptive steps, through Tune); a Gate built by hand without them never skips the
// store, uses the prior Retry-After spacing and keeps the static limits.
// ForTask derives the gate of another API task in the same process.
type Gate struct {
	Store  LaneStore       // required; its Deadline method, if any, bounds the gate's waits on it
	Source settings.Source // required: the config in force (a config.Service, a settings.Fixed)
	Sink   Sink            // receives one line per gated call; nil: no lines

	// TaskID names this API task's lane (api_heavy_task:<TaskID>);
	// required, and each gateway's own (NewGate refuses "").
	TaskID string
	// KeyPrefix prefixes every lane key; "": the key prefix of the policy
	// in force (policy.Names.KeyPrefix). NewGate sets the store's own when
	// it has one (StoreCaps.KeyPrefix: a Redis Cluster's is hash-tagged).
	KeyPrefix string
	// SkipFor is how long the store is skipped after it failed (the skip
	// window, by the gate's clock); 0: the store is never skipped. NewGate
	// sets DefaultSkipDuration. The window is per process: gates derived
	// with ForTask share this gate's.
	SkipFor time.Duration
	// Now is the gateway's clock (for held_ms and not-after); nil: time.Now.
	Now func() time.Time
	// Logger gets the gate's own warnings; nil: slog.Default().
	Logger *slog.Logger
	// Observer is told about decisions and store failures (metrics);
	// nil: nobody.
	Observer Observer
	// Local, if set, holds this gateway's own lanes: an in-process store
	// (a memory.Store) in which every call it counts also takes a lease. A
	// call these lanes already find full is refused without asking Store,
	// and while Store is unavailable they decide alone, with degraded
	// limits (degraded.go). nil: none.
	Local LaneStore
	// tuner keeps the adaptive limits (lanes.go; package adaptive steps
	// them through Tune): the calls the gate releases feed it, and the
	// lanes in mode apply take its limits. nil (a Gate built without NewGate, or a store that is no
	// tune.Store): the static limits.
	tuner *tuner
	// holds keeps the lanes' recent hold times for the adaptive
	// Retry-After (decision.go); nil (a Gate built without NewGate): no
	// history, the prior applies.
	holds *holdTimes
	// skip is the skip window shared with the gate this one was derived
	// from (ForTask); nil: ownSkip (gate.go).
	skip    *skipWindow
	ownSkip skipWindow

	bg    background // release retries and the gateway count (lease.go)
	hooks *gateHooks // fault injection for tests; nil in production

	rn       renewer  // renews the leases of the calls in flight (lease.go)
	keyCache keyCache // the lane keys that are the same for every call (plan.go)
}

// gateHooks let white-box tests inject faults where Go code has no natural
// way to fail.
type gateHooks struct {
	retryAfter   func() error            // before Retry-After is computed
	startRenewer func(func()) error      // replaces calling f, which hands a call to the renewer
	emit         func(line []byte) error // replaces Sink.Emit
}

// NewGate returns a gate over store and cfg with the defaults set. It
// refuses an empty taskID: every gateway would then share one
// api_heavy_task lane, so the per-task limit would act cluster-wide and the
// degraded limits would not count this gateway.
func NewGate(store LaneStore, cfg settings.Source, sink Sink, taskID string) (*Gate, error) {
	if taskID == "" {
		return nil, errors.New("new gate: no task id: each API task (gateway) needs its own, e.g. its hostname")
	}
	if store == nil || cfg == nil {
		// Every call would be unavailable: refused here instead.
		return nil, fmt.Errorf("new gate: a lane store (%v) and a config source (%v) are both required, e.g. memory.New(nil) and settings.NewFixed(settings.Default(nil, settings.ModeShadow))",
			store != nil, cfg != nil)
	}
	prefix := capsOf(store).KeyPrefix // the store's own layout (a Redis Cluster's hash tag)
	return &Gate{
		Store:     store,
		Source:    cfg,
		Sink:      sink,
		TaskID:    taskID,
		KeyPrefix: prefix,
		SkipFor:   DefaultSkipDuration,
		Now:       time.Now,
		Logger:    slog.Default(),
		holds:     &holdTimes{},
		tuner:     newTuner(store),
	}, nil
}

// ForTask returns a gate for API task taskID that shares g's process
// state: the store, config, sink, key prefix, clock, logger, observer,
// local lanes and skip window (a store failure seen by one skips it for
// all) and the adaptive limits (g's adaptive.Runner steps them for both).
// Its renewals, background releases and hold history are its own. Close
// it as any gate. It refuses an empty taskID, as NewGate does.
func (g *Gate) ForTask(taskID string) (*Gate, error) {
	t, err := NewGate(g.Store, g.Source, g.Sink, taskID)
	if err != nil {
		return nil, err
	}
	t.KeyPrefix, t.SkipFor, t.skip = g.KeyPrefix, g.SkipFor, g.window()
	t.Now, t.Logger, t.Observer, t.Local = g.Now, g.Logger, g.Observer, g.Local
	// One adaptive state per process, as one skip window: the task's calls
	// feed g's windows and take g's advised limits (the task lane's is g's
	// task's, a per-gateway limit), and g's adaptive.Runner steps them all.
	t.tuner = g.tuner
	return t, nil
}

// Observer is told what the gate does, for metrics. Its methods must be
// fast and must not block.
type Observer interface {
	// Admitted is called once per admission when its decision is made.
	Admitted(a *Admission)
	// Released is called once per admission, after its log line.
	Released(a *Admission)
	// StoreError is called when a store operation fails.
	StoreError(op string, err error)
	// StoreSkipped is called when an operation skips the store because
	// it failed recently.
	StoreSkipped(op string)
	// WaitStarted is called when a call's ticket is queued.
	WaitStarted(a *Admission)
	// WaitEnded is called once for each WaitStarted, when the wait ends
	// however it ends, with the time waited.
	WaitEnded(a *Admission, waited time.Duration)
}

func (g *Gate) now() time.Time {
	if g.Now != nil {
		return g.Now()
	}
	return time.Now()
}

// storeBound says how the store bounds its operations. The store owns
// this setting, since it is the one that enforces it
// (redis.Options.Deadline): a store that bounds its own operations
// declares it (StoreCaps.Bounded), with a Deadline of 0 when its
// operations never wait (memory). bounded is false for a store that
// declares no bound.
func (g *Gate) storeBound() (d time.Duration, bounded bool) {
	c := capsOf(g.Store)
	return c.Deadline, c.Bounded
}

// storeDeadline is the longest one store operation may take: an acquire
// the store runs later than now+deadline+2s takes no lease. It is the
// store's own bound, or DefaultStoreDeadline when it states none.
func (g *Gate) storeDeadline() time.Duration {
	if d, _ := g.storeBound(); d > 0 {
		return d
	}
	return DefaultStoreDeadline
}

// keys returns the gate's lane keys under cfg's policy.
func (g *Gate) keys(cfg settings.Config) Keys {
	prefix := g.KeyPrefix
	if prefix == "" {
		prefix = cfg.Policy().Names.KeyPrefix
	}
	return Keys{Prefix: prefix, TaskID: g.TaskID, cache: &g.keyCache}
}

// storeFailed opens the skip window after a store error. A store that
// is merely busy (its bounded queue is full) fails that one call at once
// but does not open the window: that is back-pressure from this process's
// own load, not a sign the store is down, and a window would switch the
// gate off for every call for 15 s. A store that is really stuck opens it
// through the deadlines of the operations in flight.
func (g *Gate) storeFailed(op string, err error) {
	if !errors.Is(err, ErrBusy) {
		g.failStore()
	}
	if g.Observer != nil {
		g.Observer.StoreError(op, err)
	}
	g.logger().Warn("capacity lane store failed", "op", op, "error", err)
}

func (g *Gate) storeSkipped(op string) {
	if g.Observer != nil {
		g.Observer.StoreSkipped(op)
	}
}

func (g *Gate) logger() *slog.Logger {
	if g.Logger != nil {
		return g.Logger
	}
	return slog.Default()
}

// Admit decides call. The caller must call Release when the call ends,
// however it ends, and must not send a refused call (its Outcome's
// Decision DecisionRefused) on. In mode
// off the call passes untouched: Admit returns an admission with no
// decision (DecisionNone) whose Release does nothing, and nobody is told
// (Observer). An enforced call that may wait blocks until it gets a slot,
// its wait runs out, or ctx is done (it then leaves the waitlist at once).
// Admit never returns nil.
func (g *Gate) Admit(ctx context.Context, call Call) *Admission {
	return g.AdmitWith(ctx, call, AdmitOptions{})
}

// AdmitOptions say what a caller of AdmitWith knows of the call beyond
// the Call itself: how it may wait (the decision service), that it runs
// already, that its caller could not be identified, that another call
// answered it. The zero value is Admit.
type AdmitOptions struct {
	// MayWait, if set, is asked before a call that may wait (enforced,
	// waiting on, the store a Waitlist, no lane paused) joins the
	// waitlist: false means no room to wait, and the call is decided at
	// once as with waiting off (refused, with the usual hints, when a lane
	// is full). With true, done is called when the call stops waiting.
	MayWait func() (done func(), ok bool)
	// Queued, if set, is called when the call's ticket is queued, with the
	// longest it may wait (wait.max_seconds of the config it arrived under).
	Queued func(maxWait time.Duration)
	// Resumed marks a call that already runs (its client re-registers it
	// after the decision service lost it): it takes its leases forced, as
	// an unenforced call, never waits nor is refused, and its log line
	// says "resumed":true.
	Resumed bool
	// Unidentified, if set, is why who calls could not be told (a failed
	// identity lookup): the call is gated as UnidentifiedUser under the
	// config's unidentified limit, in this gateway's own lanes, never
	// passed uncounted nor sent to the store (degraded.go).
	Unidentified error
	// Repeated marks a call answered by the call it repeats (package
	// idempotency) instead of run: it holds no lane place, and its line
	// says decision joined (replayed with Replayed: a finished call's kept
	// answer was its answer) and dedup_of DedupOf, the request id of the
	// call it repeated.
	Repeated, Replayed bool
	DedupOf            string
	// DedupErr is why the call could not be checked for repeats (the
	// idempotency store failed): it runs as it would without idempotency,
	// and its line says why (dedup_error).
	DedupErr error
}

// AdmitWith is Admit with opts.
func (g *Gate) AdmitWith(ctx context.Context, call Call, opts AdmitOptions) *Admission {
	cfg, cerr := g.config(ctx)
	if opts.Unidentified != nil {
		return g.unidentified(ctx, cfg, call, opts)
	}
	a := g.newAdmission(cfg, call)
	if a.off {
		return a
	}
	a.setOptions(opts)
	if opts.Repeated {
		a.out.Decision, a.repeatOf = DecisionJoined, opts.DedupOf
		if opts.Replayed {
			a.out.Decision = DecisionReplayed
		}
		g.admitted(a)
		return a
	}
	if opts.Resumed {
		a.out.Enforced = false
	}
	if cerr != nil {
		a.fail(cerr)
		g.admitted(a)
		return a
	}
	func() {
		defer func() {
			if r := recover(); r != nil {
				a.fail(fmt.Errorf("internal error: %v", r))
			}
		}()
		if err := a.acquire(ctx); err != nil {
			a.fail(err)
		}
	}()
	g.admitted(a)
	return a
}

// newAdmission returns the admission of call under cfg, with no
// decision yet; in mode off, one that passes untouched.
func (g *Gate) newAdmission(cfg settings.Config, call Call) *Admission {
	if cfg.Mode == settings.ModeOff {
		a := &Admission{g: g, out: Outcome{Call: call}, cfg: cfg, scope: -1, off: true}
		a.decided()
		return a
	}
	return &Admission{g: g, out: Outcome{Call: call, Enforced: cfg.Enforces(call.Aware)}, cfg: cfg, scope: -1, start: g.now()}
}

func (g *Gate) admitted(a *Admission) {
	a.decided()
	if g.Observer != nil {
		g.Observer.Admitted(a)
	}
}

// Config returns the config in force, as the gate reads it for each call
// (config): the source's, with the adaptive limits applied; for a config
// that settings.Config.Check refuses, or a source that panics, the
// defaults in shadow and the error. Package idempotency reads its
// settings through it.
func (g *Gate) Config(ctx context.Context) (settings.Config, error) { return g.config(ctx) }

// config reads the config in force. A settings.Source must not fail; if one
// panics anyway, the call is gated in shadow with the defaults, and
// counted as unavailable. A config settings.Config.Check refuses (the
// zero Config of a zero settings.Fixed) is that error, with the defaults
// in shadow: the call is unavailable, and the store is never asked (its
// skip window stays shut: the config's fault is not the store's).
func (g *Gate) config(ctx context.Context) (c settings.Config, err error) {
	defer func() {
		if r := recover(); r != nil {
			c, err = settings.Default(nil, settings.ModeShadow), fmt.Errorf("internal error: read config: %v", r)
		}
	}()
	c = g.Source.Config(ctx)
	if err := c.Check(); err != nil {
		return settings.Default(c.Policy(), settings.ModeShadow), err
	}
	return g.tuner.apply(c), nil
}

// ReleaseLeft releases the leases a killed incarnation of a gateway or
// decision service left in the store (token → the keys it holds leases
// in, as its journal recorded them) and returns how many calls it
// released. It stops at the first failure: the store is failing, each
// further release would wait out its deadline, and the leases left expire
// by themselves after lease_seconds.
func (g *Gate) ReleaseLeft(ctx context.Context, left map[string][]string) (int, error) {
	n := 0
	for token, keys := range left {
		if err := g.Store.Release(ctx, token, keys); err != nil {
			return n, fmt.Errorf("release the previous incarnation's calls: %d of %d released, the rest expire by themselves: %w",
				n, len(left), err)
		}
		n++
	}
	return n, nil
}

// DefaultSkipDuration is how long the gate skips the store after a store
// error (Gate.SkipFor; CAPACITY_REDIS_RETRY_SECONDS). It is shorter than
// lease − 2×renew with the default config, so one error can't cost a long
// call its lease.
const DefaultSkipDuration = 15 * time.Second

// skipWindow is the per-process memory that the lane store failed
// recently: the one piece of per-process state the spec asks for. A gate
// owns one; the gates ForTask derives share it. Safe for concurrent use.
// The zero value is closed.
type skipWindow struct {
	mu    sync.Mutex
	until time.Time // the store is skipped before it; requires mu held
}

// fail opens the window until t, unless it is already open longer.
func (w *skipWindow) fail(t time.Time) {
	w.mu.Lock()
	if t.After(w.until) {
		w.until = t
	}
	w.mu.Unlock()
}

// open reports whether the window is open at now.
func (w *skipWindow) open(now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return now.Before(w.until)
}

// reset closes the window, as if the store had never failed.
func (w *skipWindow) reset() {
	w.mu.Lock()
	w.until = time.Time{}
	w.mu.Unlock()
}

// window returns the skip window the gate uses: the one it shares with
// the gate it was derived from (ForTask), else its own.
func (g *Gate) window() *skipWindow {
	if g.skip != nil {
		return g.skip
	}
	return &g.ownSkip
}

// skipping reports whether the store failed within the last SkipFor, by
// the gate's clock.
func (g *Gate) skipping() bool { return g.SkipFor > 0 && g.window().open(g.now()) }

// Skipping reports whether the gate skips its store now: the store failed
// within the last SkipFor, by the gate's clock (the skip window, shared
// by the gates ForTask derives). Work beside the calls that uses the
// store waits for it to close: the adaptive limits' steps, and package
// idempotency skips the store then too.
func (g *Gate) Skipping() bool { return g.skipping() }

// failStore opens the skip window for SkipFor from now.
func (g *Gate) failStore() {
	if g.SkipFor > 0 {
		g.window().fail(g.now().Add(g.SkipFor))
	}
}
