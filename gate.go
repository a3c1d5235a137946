package capgate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// DefaultKeyPrefix is the prefix of every lane key; the layout matches the
// original implementation's.
const DefaultKeyPrefix = "ocl:capacity"

// The errors recorded on a call when the gate skips the store.
const (
	ErrTextSkipped        = "skipped: Redis failed recently"
	ErrTextReleaseSkipped = "release skipped: Redis failed recently; retried until the leases expire"
)

// maxErrorLen bounds the error text a log line carries.
const maxErrorLen = 300

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
// Create one with NewGate; its fields may be set before first use.
type Gate struct {
	Store  LaneStore    // required
	Config ConfigSource // required
	Sink   Sink         // receives one line per gated call; nil: no lines

	// TaskID names this API task's lane (api_heavy_task:<TaskID>).
	TaskID string
	// KeyPrefix prefixes every lane key. Default DefaultKeyPrefix.
	KeyPrefix string
	// Skip is the per-process window during which the store is not used
	// after it failed. NewGate sets one of DefaultSkipDuration.
	Skip *SkipWindow
	// StoreDeadline is the longest one store operation may take; an acquire
	// the store runs later than now+StoreDeadline+2s takes no lease.
	// Default DefaultStoreDeadline.
	StoreDeadline time.Duration
	// Now is the gateway's clock (for held_ms and not-after). Default time.Now.
	Now func() time.Time
	// Logger gets the gate's own warnings. Default slog.Default().
	Logger *slog.Logger
	// Observer is told about decisions and store failures (metrics).
	// Default: nobody.
	Observer Observer
	// Local, if set, holds this gateway's own lanes: an in-process store
	// (a memory.Store) in which every call it counts also takes a lease. A
	// call these lanes already find full is refused without asking Store,
	// and while Store is unavailable they decide alone, with degraded
	// limits (degraded.go). Default nil: none.
	Local LaneStore
	// Holds keeps the lanes' recent hold times for the adaptive
	// Retry-After (hints.go). NewGate sets one; nil: no history, the prior
	// applies.
	Holds *HoldTimes

	bg    background // release retries and the gateway count (background.go)
	hooks *gateHooks // fault injection for tests; nil in production

	rn       renewer  // renews the leases of the calls in flight (renew.go)
	keyCache keyCache // the lane keys that are the same for every call (lane.go)
}

// gateHooks let white-box tests inject faults where Go code has no natural
// way to fail.
type gateHooks struct {
	retryAfter   func() error            // before Retry-After is computed
	startRenewer func(func()) error      // replaces calling f, which hands a call to the renewer
	emit         func(line []byte) error // replaces Sink.Emit
}

// NewGate returns a gate over store and cfg with the defaults set.
func NewGate(store LaneStore, cfg ConfigSource, sink Sink, taskID string) *Gate {
	return &Gate{
		Store:         store,
		Config:        cfg,
		Sink:          sink,
		TaskID:        taskID,
		KeyPrefix:     DefaultKeyPrefix,
		Skip:          NewSkipWindow(DefaultSkipDuration, nil),
		StoreDeadline: DefaultStoreDeadline,
		Now:           time.Now,
		Logger:        slog.Default(),
		Holds:         &HoldTimes{},
	}
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
}

func (g *Gate) now() time.Time {
	if g.Now != nil {
		return g.Now()
	}
	return time.Now()
}

func (g *Gate) keys() Keys { return Keys{Prefix: g.KeyPrefix, TaskID: g.TaskID, cache: &g.keyCache} }

func (g *Gate) skipping() bool { return g.Skip != nil && g.Skip.Skipping() }

// storeFailed opens the skip window after a store error. A store that
// is merely busy (its bounded queue is full) fails that one call at once
// but does not open the window: that is back-pressure from this process's
// own load, not a sign the store is down, and a window would switch the
// gate off for every call for 15 s. A store that is really stuck opens it
// through the deadlines of the operations in flight.
func (g *Gate) storeFailed(op string, err error) {
	if g.Skip != nil && !errors.Is(err, ErrBusy) {
		g.Skip.Fail()
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

// Admission is one heavy call's passage through the gate, from Admit to
// Release. Its methods are safe for concurrent use; its decision and counts
// are fixed when Admit returns.
type Admission struct {
	g         *Gate
	call      Call
	cfg       Config
	enforced  bool
	lanes     []Lane
	keys      []string // the lanes' keys, once a store call was planned
	counts    []int    // per lane: count before, +1 if taken; nil when unknown
	taken     bool     // holds leases
	local     bool     // holds leases in the gate's local lanes (degraded.go)
	degraded  bool     // decided by the local lanes alone (degraded.go)
	localAt   []int    // per lane: the local lanes' count before this call
	decision  Decision
	full      laneSet
	scope     int           // lane index, -1 none
	retry     int           // Retry-After seconds, 0 none
	spacing   time.Duration // how often the scope lane frees a slot, 0 unknown
	leased    time.Time     // when the leases were taken
	token     string
	start     time.Time
	granted   bool          // took a slot it waited for
	waited    bool          // its ticket was queued
	waitedFor time.Duration // how long it waited

	mu        sync.Mutex
	err       string // requires mu held
	leaseLost bool   // requires mu held
	released  bool   // requires mu held
	heldMS    int64  // requires mu held; -1 when no lease was held
	finished  time.Time

	// The renewer's (renew.go). Renewing never revives or adds a lease,
	// so Release need not wait for a renewal in flight.
	renewCtx   context.Context // the request's values; nil until renewed
	renewBegan time.Time       // when renewals began; requires g.rn.mu held
	renewAt    time.Time       // the next renewal; requires g.rn.mu held
	renewSlot  int             // 1 + index in g.rn.live; 0 when not renewed; requires g.rn.mu held
}

// Admit decides call. It returns nil when the mode is off: the call passes
// untouched. Otherwise the caller must call Release when the call ends,
// however it ends, and must not send a refused call (Refused) on. An
// enforced call that may wait blocks until it gets a slot, its wait runs
// out, or ctx is done (it then leaves the waitlist at once).
func (g *Gate) Admit(ctx context.Context, call Call) *Admission {
	cfg, cerr := g.config(ctx)
	if cfg.Mode == ModeOff {
		return nil
	}
	a := &Admission{g: g, call: call, cfg: cfg, scope: -1, start: g.now()}
	if cerr != nil {
		a.enforced = false
		a.fail(cerr)
		if g.Observer != nil {
			g.Observer.Admitted(a)
		}
		return a
	}
	a.enforced = cfg.Mode == ModeEnforce && (cfg.EnforceFor == EnforceAll || call.Aware)
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
	if g.Observer != nil {
		g.Observer.Admitted(a)
	}
	return a
}

// config reads the config in force. A ConfigSource must not fail; if one
// panics anyway, the call is gated in shadow with the defaults, and
// counted as unavailable.
func (g *Gate) config(ctx context.Context) (c Config, err error) {
	defer func() {
		if r := recover(); r != nil {
			c, err = DefaultConfig(ModeShadow), fmt.Errorf("internal error: read config: %v", r)
		}
	}()
	return g.Config.Config(ctx), nil
}

// Unavailable returns an admission for a call the gate could not decide
// because of cause (an identity lookup that failed, say): the call goes
// ahead uncounted and its log line says why. It returns nil when the mode
// is off. The store's skip window is not touched.
func (g *Gate) Unavailable(ctx context.Context, call Call, cause error) *Admission {
	cfg, _ := g.config(ctx)
	if cfg.Mode == ModeOff {
		return nil
	}
	a := &Admission{g: g, call: call, cfg: cfg, scope: -1, start: g.now()}
	a.enforced = cfg.Mode == ModeEnforce && (cfg.EnforceFor == EnforceAll || call.Aware)
	a.fail(cause)
	if g.Observer != nil {
		g.Observer.Admitted(a)
	}
	return a
}

// acquire plans the lanes, takes the leases and decides. An error it
// returns is not the store's (those are handled here); the caller turns it
// into "unavailable".
func (a *Admission) acquire(ctx context.Context) error {
	g := a.g
	switch a.call.Tier {
	case TierStaff, TierCore, TierEarlyAccess, TierPreview:
	default:
		return fmt.Errorf("unknown tier %q", a.call.Tier)
	}
	if a.call.UserID == "" {
		return errors.New("no user id")
	}
	a.lanes = g.keys().Plan(a.cfg, a.call)
	if err := ctx.Err(); err != nil {
		// The client left before we asked the store: nothing to count,
		// and no sign the store failed.
		a.decision = DecisionUnavailable
		a.setErr("caller gone before acquire: " + err.Error())
		return nil
	}
	a.keys = make([]string, len(a.lanes))
	limits := make([]int, len(a.lanes))
	for i, l := range a.lanes {
		a.keys[i], limits[i] = l.Key, l.Limit
	}
	a.token = newToken()
	deadline := g.StoreDeadline
	if deadline <= 0 {
		deadline = DefaultStoreDeadline
	}
	req := AcquireRequest{
		Token:    a.token,
		Keys:     a.keys,
		Limits:   limits,
		Lease:    time.Duration(a.cfg.LeaseSeconds) * time.Second,
		Force:    !a.enforced,
		NotAfter: g.now().Add(deadline + 2*time.Second),
	}
	// A call that may wait (wait.go) skips the local pre-check: finding
	// this gateway's share of a lane full is a reason to queue, not to
	// refuse. It counts in the local lanes once it holds a slot, or when
	// the local lanes must decide for it.
	wl := a.waitlist(limits)
	if wl == nil && a.acquireLocal(ctx, req) {
		return nil // refused: this gateway alone already fills a lane
	}
	if g.skipping() {
		g.storeSkipped("acquire")
		a.setErr(ErrTextSkipped)
		return a.degradeLate(ctx, wl, req, false)
	}
	before := make([]int, len(a.lanes))
	var taken bool
	var err error
	if wl != nil {
		taken, err = a.join(ctx, wl, req, before) // may wait (wait.go)
	} else {
		// ctx bounds only the wait before the store sends the acquire;
		// once sent, the store reports its answer whatever the client
		// does, so a lease it took is never left behind.
		taken, err = g.Store.Acquire(ctx, req, before)
	}
	if errors.Is(err, errCallerGone) || errors.Is(err, errTicketLost) {
		// Not the store failing: no skip window. The call goes ahead
		// uncounted (a client that left never reaches the API).
		a.dropLocal(ctx)
		a.decision = DecisionUnavailable
		a.setErr(err.Error())
		return nil
	}
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			a.dropLocal(ctx)
			a.decision = DecisionUnavailable
			a.setErr("caller gone before acquire: " + ctx.Err().Error())
			return nil
		}
		g.storeFailed("acquire", err)
		a.setErr(err.Error())
		return a.degradeLate(ctx, wl, req, errors.Is(err, ErrBusy) && !g.skipping())
	}
	g.storeWorked(ctx)
	a.taken = taken
	if taken {
		a.leased = g.now() // the hold estimates count from here (hints.go)
	}
	switch {
	case !taken:
		a.dropLocal(ctx)
	case wl != nil:
		a.countLocal(ctx, req)
	}
	a.full = fullLanes(a.lanes, before)
	switch {
	case a.full.empty() && !taken:
		return errors.New("the store took no lease though no lane was full")
	case a.full.empty():
		a.decision = DecisionAdmitted
	case taken:
		a.decision = DecisionShadowRefused
	default:
		a.decision = DecisionRefused
	}
	var ruleErr error
	if !a.full.empty() {
		if h := g.hooks; h != nil && h.retryAfter != nil {
			ruleErr = h.retryAfter()
		}
		if ruleErr == nil {
			a.scope = scopeOf(a.lanes, a.full)
			a.retry, a.spacing = refusalHints(a.cfg.RetryAfter, a.lanes, before, a.full, a.scope, g.Holds)
		}
	}
	// From here on the counts include this call when it took the lease.
	a.counts = before
	if taken {
		for i := range a.counts {
			a.counts[i]++
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
		a.setErr(fmt.Sprintf("start renewer: %v", err))
	}
}

// fail turns the call unavailable because of err, unless it already holds
// a lease with a decision: the limiter's own failure never refuses.
func (a *Admission) fail(err error) {
	a.setErr(err.Error())
	if a.taken && a.decision != DecisionNone {
		return
	}
	a.decision = DecisionUnavailable
	a.retry, a.spacing = 0, 0
}

func (a *Admission) setErr(s string) {
	s = Truncate(s, maxErrorLen)
	a.mu.Lock()
	a.err = s
	a.mu.Unlock()
}

// newToken returns 32 random hex characters.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}
