package capgate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/capgate/capgate/internal/randhex"
	"github.com/capgate/capgate/settings"
)

// ErrSkipped is the error of a call decided without the lane store
// because the store failed recently (the skip window, Gate.SkipFor). Its
// text, and that of errReleaseSkipped, is what the log line has always
// said, whatever the lane store; log readers match it.
var ErrSkipped = errors.New("skipped: Redis failed recently")

// errReleaseSkipped is the error of a call whose release skipped the store.
var errReleaseSkipped = errors.New("release skipped: Redis failed recently; retried until the leases expire")

// maxErrorLen bounds the error text a log line carries.
const maxErrorLen = 300

// Admission is one heavy call's passage through the gate, from Admit to
// Release: its plan, its Outcome (fixed when Admit returns) and the lease
// it holds until Release. Its methods are safe for concurrent use. In
// mode off it has no decision (DecisionNone), no lanes and no error, and
// Release does nothing: the call passes untouched. The zero Admission is
// such an ungated call too (what capgatehttp.AdmissionFrom gives for a
// call nobody gated): every method is safe on it.
//
// (The fields are laid out to keep the struct, allocated once per call,
// within its allocation size class: the small ones side by side.)
type Admission struct {
	g    *Gate
	cfg  settings.Config
	plan // the call laid out over cfg: its lanes and the store request's keys
	// out is what was decided, as it is decided (its Call, Enforced,
	// Decision, Counts, Queued, Waited, Degraded, hints); the rest of it
	// is set once the decision is made (Gate.admitted: decided), and
	// Outcome returns it.
	out Outcome

	off       bool // mode off: passes untouched, every method a no-op
	taken     bool // holds leases
	local     bool // holds leases in the gate's local lanes (degraded.go)
	granted   bool // took a slot it waited for
	dropped   bool // its ticket was dropped from a full waitlist
	resumed   bool // AdmitOptions.Resumed
	leaseLost bool // requires mu held
	released  bool // requires mu held
	full      laneSet
	scope     int8 // lane index, -1 none
	// stored: a call counted in the local lanes alone was written into
	// the store later (lease.go); its leases there are renewed and
	// released as a taken call's. Set under mu.
	stored    atomic.Bool
	localAt   []int     // per lane: the local lanes' count before this call
	leased    time.Time // when the leases were taken
	token     string
	start     time.Time
	predicted time.Duration // its predicted wait, when refused for it at once (wait.go)
	repeatOf  string        // the cid of the call it repeated (DecisionJoined, DecisionReplayed)
	// Of its AdmitOptions, what it needs while it may wait.
	mayWait func() (done func(), ok bool)
	queued  func(maxWait time.Duration)

	mu        sync.Mutex
	err       error // requires mu held
	heldMS    int64 // requires mu held; -1 when no lease was held
	repeatErr error // why it was not checked for repeats; requires mu held
	finished  time.Time

	// The renewer's (lease.go). Renewing never revives or adds a lease,
	// so Release need not wait for a renewal in flight.
	renewCtx   context.Context // the request's values; nil until renewed
	renewBegan time.Time       // when renewals began; requires g.rn.mu held
	renewAt    time.Time       // the next renewal; requires g.rn.mu held
	renewSlot  int             // 1 + index in g.rn.live; 0 when not renewed; requires g.rn.mu held

	usage atomic.Int64 // what SetUsage recorded, +1; 0: nothing (admission.go)
}

// acquire plans the lanes, takes the leases and decides. An error it
// returns is not the store's (those are handled here); the caller turns it
// into "unavailable".
func (a *Admission) acquire(ctx context.Context) error {
	g := a.g
	if err := g.keys(a.cfg).plan(&a.plan, a.cfg, &a.out.Call); err != nil {
		return err
	}
	a.out.Lanes = a.lanes // for the Observer, told of a wait before the decision
	if err := ctx.Err(); err != nil {
		// The client left before we asked the store: nothing to count,
		// and no sign the store failed.
		a.out.Decision = DecisionUnavailable
		a.setErr(fmt.Errorf("caller gone before acquire: %w", err))
		return nil
	}
	limits, before := a.planRequest()
	a.token = newToken()
	deadline := g.storeDeadline()
	req := AcquireRequest{
		Token:    a.token,
		Keys:     a.keys,
		Limits:   limits,
		Lease:    time.Duration(a.cfg.LeaseSeconds) * time.Second,
		Force:    !a.out.Enforced,
		NotAfter: g.now().Add(deadline + 2*time.Second),
		Seats:    a.seats(),
		Borrow:   a.borrow(),
	}
	// A call that may wait (wait.go) skips the local pre-check: finding
	// this gateway's share of a lane full is a reason to queue, not to
	// refuse. It counts in the local lanes once it holds a slot, or when
	// the local lanes must decide for it.
	wl := a.waitlist()
	if wl != nil && a.mayWait != nil {
		done, ok := a.mayWait()
		if !ok {
			wl = nil // no room to wait: decided at once
		} else {
			defer done()
		}
	}
	if wl == nil && a.acquireLocal(ctx, req) {
		return nil // refused: this gateway alone already fills a lane
	}
	// The calls the store never counted (admitted while it was out) are
	// written into it before it decides anything again.
	g.flushUnstored(ctx)
	if g.skipping() {
		g.storeSkipped("acquire")
		a.setErr(ErrSkipped)
		return a.degradeLate(ctx, wl, req, false)
	}
	var taken bool
	var err error
	if wl != nil {
		taken, err = a.join(ctx, wl, req, before) // may wait (wait.go)
		// The config in force may have stopped enforcing the call while
		// it waited: from here on it is decided as an unenforced call.
		req.Force = !a.out.Enforced
		if errors.Is(err, errNotEnforced) {
			// It left the waitlist ungranted, the store answering: it
			// goes ahead as such a call arriving now would, counted.
			req.NotAfter = g.now().Add(deadline + 2*time.Second)
			taken, err = g.Store.Acquire(ctx, req, before)
		}
	} else {
		// ctx bounds only the wait before the store sends the acquire;
		// once sent, the store reports its answer whatever the client
		// does, so a lease it took is never left behind.
		taken, err = g.Store.Acquire(ctx, req, before)
	}
	if errors.Is(err, errCallerGone) {
		// Not the store failing: no skip window. A client that left never
		// reaches the API: nothing to count.
		a.dropLocal(ctx)
		a.out.Decision = DecisionUnavailable
		a.setErr(err)
		return nil
	}
	if errors.Is(err, errTicketLost) {
		// The store answers but lost the ticket (a restart, a failover):
		// not its failure, no skip window, but never "go uncounted" either.
		// The local lanes decide, with degraded limits, and the call is
		// written into the store (lease.go).
		a.setErr(err)
		return a.degradeLate(ctx, wl, req, true)
	}
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			a.dropLocal(ctx)
			a.out.Decision = DecisionUnavailable
			a.setErr(fmt.Errorf("caller gone before acquire: %w", ctx.Err()))
			return nil
		}
		g.storeFailed("acquire", err)
		a.setErr(err)
		derr := a.degradeLate(ctx, wl, req, errors.Is(err, ErrBusy) && !g.skipping())
		a.releaseLost(wl, req, err)
		return derr
	}
	g.storeWorked(ctx)
	before = lend(a.lanes, before, len(a.keys))
	a.taken = taken
	if taken {
		a.leased = g.now() // the hold estimates count from here (decision.go)
	}
	switch {
	case !taken:
		a.dropLocal(ctx)
	case wl != nil:
		if !a.countLocal(ctx, req, before) {
			// The store lost calls this gateway still runs: its answer
			// would put the user past its limit. Give the slot back.
			if err := a.releaseStore(context.WithoutCancel(ctx)); err != nil {
				g.retryRelease(a.token, a.keys, req.Lease)
			}
			taken, a.taken, a.granted = false, false, false
		}
	}
	a.full = fullLanes(a.lanes, before)
	if taken {
		a.predicted = 0 // a grant raced the prediction: it runs
	}
	if (a.dropped || a.predicted > 0) && a.full.empty() {
		// It queued behind others, not on a full lane: the lane every
		// ticket shares (api_heavy) is the one it could not get.
		a.full = 1
	}
	d, err := decide(a.out.Enforced, a.full, taken)
	if err != nil {
		return err
	}
	a.out.Decision = d
	var ruleErr error
	if !a.full.empty() {
		if h := g.hooks; h != nil && h.retryAfter != nil {
			ruleErr = h.retryAfter()
		}
		if ruleErr == nil {
			a.scope = int8(scopeOf(a.lanes, a.full))
			a.setHints(before)
			if secs, ok := a.predictedRetry(); ok {
				a.out.RetryAfter = secs // refused for its predicted wait: that is when to retry
			}
		}
	}
	// From here on the counts include this call when it took the lease.
	a.out.Counts = before
	if taken {
		for i, l := range a.lanes {
			a.out.Counts[i] += l.seats()
		}
	}
	if ruleErr != nil {
		return ruleErr
	}
	a.startRenewing(ctx)
	return nil
}

// startRenewing starts the renewer of a call that holds leases, in the
// store or in the local lanes.
func (a *Admission) startRenewing(ctx context.Context) {
	if !a.taken && !a.local {
		return
	}
	if err := a.startRenewer(ctx); err != nil {
		a.setErr(fmt.Errorf("start renewer: %w", err))
	}
}

// fail turns the call unavailable because of err, unless it already holds
// a lease with a decision: the limiter's own failure never refuses.
func (a *Admission) fail(err error) {
	a.setErr(err)
	if a.taken && a.out.Decision != DecisionNone {
		return
	}
	a.out.Decision = DecisionUnavailable
	a.out.RetryAfter, a.out.Spacing = 0, 0
}

// Interrupt records err as the call's error when something outside the
// call cut it short (the gateway shutting down past its timeout): its
// line then says why. The decision stands. Call it before Release.
func (a *Admission) Interrupt(err error) {
	if a == nil || a.off {
		return
	}
	a.setErr(err)
}

// setErr records err as the call's error; the last one wins.
func (a *Admission) setErr(err error) {
	a.mu.Lock()
	a.err = err
	a.mu.Unlock()
}

// newToken returns 32 random hex characters.
func newToken() string { return randhex.String(16) }

// Release stops renewing, gives back the leases and writes the log line.
// It is idempotent and never fails; cleanup runs even when ctx is done
// (bounded by the store's deadline).
func (a *Admission) Release(ctx context.Context) {
	if a == nil || a.off || a.g == nil { // nil gate: the zero Admission
		return
	}
	a.mu.Lock()
	if a.released {
		a.mu.Unlock()
		return
	}
	a.released = true
	a.finished = a.g.now()
	a.heldMS = -1
	if a.taken || a.local {
		a.heldMS = a.finished.Sub(a.start).Milliseconds()
	}
	stored := a.stored.Load()
	a.mu.Unlock()

	g := a.g
	// Each step runs whatever happened in the one before it.
	if a.renewCtx != nil {
		g.rn.remove(a)
	}
	// The local lanes first: a waiter of this gateway that the store's
	// release lets in checks them (countLocal), and must not find this
	// call still counted there.
	if a.local {
		g.dropUnstored(a)
		a.releaseLocal(ctx)
	}
	if a.taken || stored {
		a.releaseLeases(ctx)
	}
	if a.taken {
		a.observeHold()
		a.observeService()
	}
	if a.out.Decision != DecisionNone {
		a.emit()
	}
	if g.Observer != nil {
		g.Observer.Released(a)
	}
}

func (a *Admission) releaseLeases(ctx context.Context) {
	g := a.g
	defer func() {
		if r := recover(); r != nil {
			a.setErr(errors.New("release: internal error"))
		}
	}()
	// A release that can't be done now is retried in the background until
	// done or the leases expire, lease_seconds from now at the latest.
	lease := time.Duration(a.cfg.LeaseSeconds) * time.Second
	if g.skipping() {
		g.storeSkipped("release")
		a.mu.Lock()
		if a.err == nil {
			a.err = errReleaseSkipped
		}
		a.mu.Unlock()
		g.retryRelease(a.token, a.keys, lease)
		return
	}
	// The client may be gone; the leases must still be given back, under
	// a context the request's cancellation does not reach.
	rctx := context.Background() // a store whose operations never wait needs nothing from it
	switch d, bounded := g.storeBound(); {
	case !bounded:
		// The gate bounds what the store does not.
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), DefaultStoreDeadline)
		defer cancel()
	case d > 0:
		rctx = context.WithoutCancel(ctx) // the store's own deadline bounds it
	}
	if err := a.releaseStore(rctx); err != nil {
		g.storeFailed("release", err)
		a.setErr(err)
		g.retryRelease(a.token, a.keys, lease)
	}
}

func (a *Admission) emit() {
	defer func() { _ = recover() }()           // a failing log line never fails the call
	line := a.appendLine(make([]byte, 0, 768)) // a gateway's usual line is 450–600 bytes
	if h := a.g.hooks; h != nil && h.emit != nil {
		_ = h.emit(line)
		return
	}
	if a.g.Sink != nil {
		_ = a.g.Sink.Emit(line)
	}
}

// Outcome returns what the gate decided for the call, fixed when Admit
// returned; the zero Outcome (with the built-in policy) for the zero
// Admission.
func (a *Admission) Outcome() Outcome {
	if a == nil {
		return Outcome{}
	}
	if a.out.Policy == nil { // the zero Admission
		o := a.out
		o.Policy = a.cfg.Policy()
		return o
	}
	return a.out
}

// setOptions keeps what a needs of opts.
func (a *Admission) setOptions(opts AdmitOptions) {
	a.mayWait, a.queued, a.resumed, a.repeatErr = opts.MayWait, opts.Queued, opts.Resumed, opts.DedupErr
}

// decided completes a's outcome once its decision is made: what follows
// from the decision, read by everyone who reads the Outcome. Nothing of it
// changes after.
func (a *Admission) decided() {
	o := &a.out
	o.Mode, o.Policy, o.Lanes = a.cfg.Mode, a.cfg.Policy(), a.lanes
	if a.off {
		o.Mode = settings.ModeOff
	}
	o.Scope = a.scopeName()
	o.Full = uint32(a.full)
	if o.Decision != DecisionRefused && o.Decision != DecisionShadowRefused {
		o.RetryAfter, o.Spacing = 0, 0 // hints only of a refusal
	}
	o.Suggested, _ = suggestedConcurrency(a.lanes, o.Counts)
	o.Holding, o.Counted = a.taken, a.taken || a.local
	o.MaxHold = time.Duration(a.cfg.MaxHoldSeconds) * time.Second
}

// scopeName returns the lane reported for a refusal; "" when no lane was
// full.
func (a *Admission) scopeName() LaneName {
	if a.scope < 0 || int(a.scope) >= len(a.lanes) { // none, or the zero Admission
		return ""
	}
	return a.lanes[a.scope].Name
}

// Err returns the error recorded on the call (the last one: a failed
// renewal's, say), nil when none. The log line carries its text.
func (a *Admission) Err() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// Held returns how long the call held its leases; ok is false until it
// is released, and for a call that held none.
func (a *Admission) Held() (d time.Duration, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.released || a.heldMS < 0 {
		return 0, false
	}
	return time.Duration(a.heldMS) * time.Millisecond, true
}

// StoreLease returns the call's lease token and the keys it holds leases
// in, in the lane store; ok is false when the store holds none for it (not
// taken, mode off, or counted in the local lanes alone). The decision
// service journals them, so its next incarnation can release a killed
// one's leases.
func (a *Admission) StoreLease() (token string, keys []string, ok bool) {
	if a == nil || a.off || !a.taken {
		return "", nil, false
	}
	return a.token, slices.Clone(a.keys), true
}

// LeaseLost reports whether a renewal found a lease gone.
func (a *Admission) LeaseLost() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.leaseLost
}

// lane returns the index of the call's lane named name; -1 when it has
// none.
func (a *Admission) lane(name LaneName) int {
	for i, l := range a.lanes {
		if l.Name == name {
			return i
		}
	}
	return -1
}

// SetUsage records what the upstream reported the call used (the reading
// of the route's usage in the policy: tokens, say), before the call is
// released; a negative n is ignored. Fair queuing by usage charges it.
func (a *Admission) SetUsage(n int64) {
	if a == nil || n < 0 {
		return
	}
	a.usage.Store(n + 1)
}

// Usage returns what SetUsage recorded; ok is false when nothing was.
func (a *Admission) Usage() (n int64, ok bool) {
	if a == nil {
		return 0, false
	}
	v := a.usage.Load()
	return v - 1, v > 0
}
