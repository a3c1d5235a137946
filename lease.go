package capgate

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// The gate's renewer: one timer for all the calls of a gateway that hold
// leases, instead of a goroutine per call. Each call is renewed every
// renew_seconds from when it took its leases, until Release, a lost lease,
// or max_hold_seconds; the timer is set for the earliest renewal due, and
// each time it fires the calls that are due are renewed, side by side when
// there are several (at most renewWorkers at once). Admitting and
// releasing a call only adds it to and removes it from a list: nothing is
// started or waited for.

// renewer is the gate's set of calls to renew. The zero value is ready.
type renewer struct {
	mu     sync.Mutex
	live   []*Admission // the calls renewed; each one's renewSlot is 1 + its index; requires mu held
	timer  *time.Timer  // nil until the first call; requires mu held
	armed  time.Time    // when timer fires; zero when stopped; requires mu held
	closed bool         // requires mu held
	rounds sync.WaitGroup
}

// startRenewer hands the call to the gate's renewer, which renews its
// leases every renew_seconds until Release, a lost lease, or
// max_hold_seconds.
func (a *Admission) startRenewer(ctx context.Context) error {
	// Kept for its values: the renewals outlive the request's
	// cancellation (renew detaches it), each bounded by the store's own
	// deadline.
	a.renewCtx = ctx
	every := time.Duration(a.cfg.RenewSeconds) * time.Second
	if h := a.g.hooks; h != nil && h.startRenewer != nil {
		return h.startRenewer(func() { a.g.rn.add(a, every) })
	}
	a.g.rn.add(a, every)
	return nil
}

// add puts a in the set, its first renewal every from now.
func (r *renewer) add(a *Admission, every time.Duration) {
	now := time.Now() // the renewer's own clock: it sleeps on real timers
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || a.renewSlot != 0 {
		return
	}
	a.renewBegan, a.renewAt = now, now.Add(every)
	r.live = append(r.live, a)
	a.renewSlot = len(r.live)
	r.armLocked(a.g, a.renewAt)
}

// remove takes a out of the set; a renewal of it in flight may still end.
func (r *renewer) remove(a *Admission) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.removeLocked(a)
}

// removeLocked requires r.mu held.
func (r *renewer) removeLocked(a *Admission) {
	i := a.renewSlot - 1
	if i < 0 {
		return
	}
	last := len(r.live) - 1
	r.live[i] = r.live[last]
	r.live[i].renewSlot = i + 1
	r.live[last] = nil
	r.live = r.live[:last]
	a.renewSlot = 0
	// The timer stays set: when it fires with nothing due, it only sets
	// itself again.
}

// armLocked sets the timer to fire at at, unless it fires before then
// already. Requires r.mu held.
func (r *renewer) armLocked(g *Gate, at time.Time) {
	if r.closed || (!r.armed.IsZero() && !at.Before(r.armed)) {
		return
	}
	d := max(time.Until(at), 0)
	if r.timer == nil {
		r.timer = time.AfterFunc(d, g.renewDue)
	} else {
		r.timer.Reset(d)
	}
	r.armed = at
}

// close stops the renewer: no call is renewed after it returns, or after
// the round in progress ends (wait).
func (r *renewer) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	if r.timer != nil {
		r.timer.Stop()
	}
	for _, a := range r.live {
		a.renewSlot = 0
	}
	r.live = nil
}

// renewDue renews the calls that are due, on the timer's goroutine, and
// sets the timer for the next one.
func (g *Gate) renewDue() {
	r := &g.rn
	now := time.Now()
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.armed = time.Time{}
	var due []*Admission
	var next time.Time
	for i := 0; i < len(r.live); {
		a := r.live[i]
		if !now.Before(a.renewAt) {
			if now.Sub(a.renewBegan) >= time.Duration(a.cfg.MaxHoldSeconds)*time.Second {
				r.removeLocked(a) // the leases expire lease_seconds later
				continue
			}
			a.renewAt = now.Add(time.Duration(a.cfg.RenewSeconds) * time.Second)
			due = append(due, a)
		}
		if next.IsZero() || a.renewAt.Before(next) {
			next = a.renewAt
		}
		i++
	}
	if !next.IsZero() {
		r.armLocked(g, next)
	}
	r.rounds.Add(1) // before closed can be set: Close waits for this round
	r.mu.Unlock()
	defer r.rounds.Done()
	if len(due) == 1 {
		g.renewSafely(due[0])
		return
	}
	// Side by side, a few at a time: one slow renewal must not hold back
	// the others until their leases expire, and a round must not flood the
	// store. The workers end with the round; none is started per call.
	var taken atomic.Int64
	var wg sync.WaitGroup
	for range min(len(due), renewWorkers) {
		wg.Go(func() {
			for {
				i := int(taken.Add(1)) - 1
				if i >= len(due) || r.stopped() {
					return
				}
				g.renewSafely(due[i])
			}
		})
	}
	wg.Wait()
}

// renewSafely renews a's leases once; a panic (a bug) is logged, and the
// other calls' renewals go on.
func (g *Gate) renewSafely(a *Admission) {
	defer func() {
		if p := recover(); p != nil {
			g.logger().Error("capacity gate: renewer panicked", "panic", fmt.Sprint(p))
		}
	}()
	a.renew()
}

// renewWorkers bounds the renewals of one round that run at once.
const renewWorkers = 8

func (r *renewer) stopped() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

// renew renews the call's leases once. A lease found lost marks the call
// and ends its renewals; nothing is recorded on a call released meanwhile.
func (a *Admission) renew() {
	g := a.g
	ctx := context.WithoutCancel(a.renewCtx)
	lease := time.Duration(a.cfg.LeaseSeconds) * time.Second
	if a.local {
		// In process: never fails, and a local lease lost is no news.
		_, _ = g.Local.Renew(ctx, a.token, a.keys, lease)
	}
	if !a.taken && !a.stored.Load() {
		return
	}
	if g.skipping() {
		g.storeSkipped("renew")
		return
	}
	held, err := g.Store.Renew(ctx, a.token, a.keys, lease)
	if err != nil {
		g.storeFailed("renew", err)
	}
	a.mu.Lock()
	lost := false
	switch {
	case a.released:
		// Its log line is written; a lease it gave back is no loss.
	case err != nil:
		a.err = err
	case held < len(a.keys):
		a.leaseLost, lost = true, true
	}
	a.mu.Unlock()
	if lost {
		g.rn.remove(a)
	}
}

// The gate's background work: releases retried after they failed, and the
// count of gateways the degraded limits divide by. Each runs on a goroutine
// the gate owns, started only when there is work, and Close waits for it.

// releaseRetryEvery is how often failed releases are tried again.
const releaseRetryEvery = 500 * time.Millisecond

// maxPendingReleases bounds the releases kept for retrying; past it a
// release is left to expire, as its lease does anyway.
const maxPendingReleases = 10000

// gatewayRecount is how often the gateways are counted again from the
// task lanes' keys, at most, while the store works.
const gatewayRecount = 30 * time.Second

// background is the state of the gate's background work. The zero value
// is ready.
type background struct {
	mu       sync.Mutex
	closed   bool               // requires mu held
	ctx      context.Context    // ends at Close; nil until first needed; requires mu held
	cancel   context.CancelFunc // requires mu held
	stop     chan struct{}      // closed by Close: finish up; requires mu held
	wg       sync.WaitGroup
	pending  []pendingRelease // requires mu held
	retrying bool             // the retry goroutine runs; requires mu held
	counting bool             // a count of the gateways runs; requires mu held
	gateways int              // the gateways last seen; 0 unknown; requires mu held
	// countAfter is when the gateways may be counted again (Unix ns), read
	// without the lock on every acquire.
	countAfter atomic.Int64

	unstored  map[*Admission]struct{} // calls the store never counted; requires mu held
	flushing  bool                    // the flush loop runs; requires mu held
	unstoredN atomic.Int64            // len(unstored), read without the lock on every acquire
	flushMu   sync.Mutex              // one flush at a time; new calls wait for it
}

// pendingRelease is a release to try again until until, when its leases
// have expired anyway.
type pendingRelease struct {
	token  string
	keys   []string
	until  time.Time
	ticket bool // a join's: its waiting ticket leaves the waitlist first
	// lost: the release of an answer that was lost (a lease that may not
	// exist); best effort, so its failure opens no skip window.
	lost bool
}

// goLocked runs fn on a goroutine the gate owns; false once the gate is
// closed. Requires g.bg.mu held.
func (g *Gate) goLocked(fn func(ctx context.Context, stop <-chan struct{})) bool {
	b := &g.bg
	if b.closed {
		return false
	}
	if b.ctx == nil {
		b.ctx, b.cancel = context.WithCancel(context.Background())
		b.stop = make(chan struct{})
	}
	ctx, stop := b.ctx, b.stop
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		defer func() {
			if r := recover(); r != nil {
				g.logger().Error("capacity gate: background work panicked", "panic", fmt.Sprint(r))
			}
		}()
		fn(ctx, stop)
	}()
	return true
}

// retryRelease keeps a release that failed (or was skipped) to try again
// in the background until it succeeds or the leases expire, lease from
// now.
func (g *Gate) retryRelease(token string, keys []string, lease time.Duration) {
	g.addPending(pendingRelease{token: token, keys: keys, until: g.now().Add(lease)})
}

// retryLost is retryRelease for an acquire or join (ticket) whose answer
// was lost: a join's ticket leaves the waitlist first, then the leases are
// released. Its failures open no skip window.
func (g *Gate) retryLost(token string, keys []string, lease time.Duration, ticket bool) {
	g.addPending(pendingRelease{token: token, keys: keys, until: g.now().Add(lease), ticket: ticket, lost: true})
}

func (g *Gate) addPending(p pendingRelease) {
	b := &g.bg
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.pending) >= maxPendingReleases || b.closed {
		return // the leases expire
	}
	b.pending = append(b.pending, p)
	if !b.retrying {
		b.retrying = g.goLocked(g.retryReleases)
	}
}

// retryReleases tries the pending releases every releaseRetryEvery, but
// not while the store is skipped, until none is left; at stop it makes a
// last try and ends.
func (g *Gate) retryReleases(ctx context.Context, stop <-chan struct{}) {
	t := time.NewTimer(releaseRetryEvery)
	defer t.Stop()
	for {
		last := false
		select {
		case <-t.C:
		case <-stop:
			last = true
		case <-ctx.Done():
			return
		}
		if !g.skipping() {
			g.releasePending(ctx)
		}
		g.bg.mu.Lock()
		if last || len(g.bg.pending) == 0 {
			if n := len(g.bg.pending); n > 0 {
				g.logger().Warn("capacity gate closed with releases undone; their leases will expire", "releases", n)
			}
			g.bg.retrying = false
			g.bg.mu.Unlock()
			return
		}
		g.bg.mu.Unlock()
		t.Reset(releaseRetryEvery)
	}
}

// releasePending tries each pending release once, each bounded by the
// store's deadline, and keeps those that failed and have not expired. It
// stops at the first failure that opens the skip window.
func (g *Gate) releasePending(ctx context.Context) {
	b := &g.bg
	b.mu.Lock()
	batch := b.pending
	b.pending = nil
	b.mu.Unlock()
	deadline := g.storeDeadline()
	now := g.now()
	var keep []pendingRelease
	for i, p := range batch {
		if !now.Before(p.until) {
			continue // the leases have expired
		}
		if ctx.Err() != nil || g.skipping() {
			keep = append(keep, batch[i:]...)
			break
		}
		rctx, cancel := context.WithTimeout(ctx, deadline)
		var err error
		if wl := capsOf(g.Store).Waitlist; wl != nil {
			prefix := g.keys(g.Source.Config(rctx)).prefix()
			if p.ticket {
				_, err = wl.Leave(rctx, Ticket{Prefix: prefix, Token: p.token, Keys: p.keys})
			}
			// Tickets may wait for these slots: hand them over.
			if err == nil {
				err = wl.ReleaseWait(rctx, prefix, p.token, p.keys, Charge{})
			}
		} else {
			err = g.Store.Release(rctx, p.token, p.keys)
		}
		cancel()
		if err != nil {
			switch {
			case ctx.Err() != nil:
			case p.lost:
				g.logger().Debug("capacity lane store: release of a lost answer failed", "error", err)
			default:
				g.storeFailed("release", err)
			}
			keep = append(keep, p)
		}
	}
	b.mu.Lock()
	b.pending = append(keep, b.pending...)
	b.mu.Unlock()
}

// storeWorked is told that the store answered an acquire: the time to
// count the gateways again if the last count is older than
// gatewayRecount. Only a gate with local lanes needs the count.
func (g *Gate) storeWorked(ctx context.Context) {
	if g.Local == nil {
		return
	}
	b := &g.bg
	now := g.now()
	if now.UnixNano() < b.countAfter.Load() {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.counting {
		return
	}
	b.countAfter.Store(now.Add(gatewayRecount).UnixNano())
	b.counting = g.goLocked(g.countGateways)
}

// countGateways counts the gateways from the task lanes' keys in the
// store (one per gateway with calls in flight lately), this one included.
func (g *Gate) countGateways(ctx context.Context, _ <-chan struct{}) {
	deadline := g.storeDeadline()
	kctx, cancel := context.WithTimeout(ctx, deadline)
	cfg := g.Source.Config(kctx)
	k := g.keys(cfg)
	task := cfg.Policy().TaskLane()
	if task < 0 {
		// No task lane: the gateways can't be counted, and each keeps
		// the whole of a shared lane's limit while the store is out.
		cancel()
		b := &g.bg
		b.mu.Lock()
		b.counting = false
		b.mu.Unlock()
		return
	}
	name := LaneName(cfg.Policy().Lanes[task].Name)
	prefix := k.Lane(name, "") + ":"
	own := k.Lane(name, g.TaskID)
	keys, err := g.Store.Keys(kctx, prefix)
	cancel()
	b := &g.bg
	b.mu.Lock()
	defer b.mu.Unlock()
	b.counting = false
	if err != nil {
		b.countAfter.Store(0) // counted again after the next acquire the store answers
		return
	}
	n := len(keys)
	if !slices.Contains(keys, own) {
		n++
	}
	b.gateways = n
}

// gatewaysSeen returns the number of gateways last counted, at least 1.
func (g *Gate) gatewaysSeen() int {
	g.bg.mu.Lock()
	defer g.bg.mu.Unlock()
	return max(1, g.bg.gateways)
}

// Close stops the gate's background work: it stops renewing the leases of
// the calls still in flight (they expire lease_seconds after their last
// renewal unless released), makes a last try at the
// releases still pending (each bounded by the store's deadline), waits for
// its goroutines and returns. If ctx ends first it stops them at once and
// returns an error wrapping ctx.Err(); pending releases are then left to
// expire with their leases. Admissions still open may be released after
// Close, but their failed releases are no longer retried. Close does not
// close the stores.
func (g *Gate) Close(ctx context.Context) error {
	b := &g.bg
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	if b.stop != nil {
		close(b.stop)
	}
	cancel := b.cancel
	b.mu.Unlock()
	g.rn.close()

	done := make(chan struct{})
	go func() {
		b.wg.Wait()
		g.rn.rounds.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("close gate: %w", ctx.Err())
	}
	if cancel != nil {
		cancel()
	}
	<-done // bounded: every operation has the store's deadline, and ctx is cancelled
	return err
}

// Calls the store never counted. A call the local lanes admitted while the
// store was unavailable (degraded.go), or whose waiting ticket the store
// lost, is kept here until it is written into the store: each is taken
// there with Force, under its own token, as soon as the store is used
// again, before any new call is decided by it, and by a background loop
// every releaseRetryEvery once the skip window closes. So after an outage
// the store counts the calls that ran through it, and a user with limit 1
// never has two running.

// addUnstored keeps a, which holds local leases only, to be written into
// the store. A gate that is closed writes nothing more.
func (g *Gate) addUnstored(a *Admission) {
	b := &g.bg
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	if b.unstored == nil {
		b.unstored = make(map[*Admission]struct{})
	}
	b.unstored[a] = struct{}{}
	b.unstoredN.Store(int64(len(b.unstored)))
	if !b.flushing {
		b.flushing = g.goLocked(g.flushLoop)
	}
}

// dropUnstored forgets a (it was released or written).
func (g *Gate) dropUnstored(a *Admission) {
	b := &g.bg
	if b.unstoredN.Load() == 0 {
		return
	}
	b.mu.Lock()
	delete(b.unstored, a)
	b.unstoredN.Store(int64(len(b.unstored)))
	b.mu.Unlock()
}

// nextUnstored returns one call still to write, nil when none.
func (g *Gate) nextUnstored() *Admission {
	b := &g.bg
	b.mu.Lock()
	defer b.mu.Unlock()
	for a := range b.unstored {
		delete(b.unstored, a)
		b.unstoredN.Store(int64(len(b.unstored)))
		return a
	}
	return nil
}

// flushUnstored writes the calls the store never counted into it, one
// after another, unless the store is being skipped. A call that decides by
// the store runs it first (and waits for one in progress), so the store
// counts them before it decides anything. It stops at the first failure.
func (g *Gate) flushUnstored(ctx context.Context) {
	b := &g.bg
	if b.unstoredN.Load() == 0 {
		return
	}
	b.flushMu.Lock()
	defer b.flushMu.Unlock()
	for !g.skipping() {
		a := g.nextUnstored()
		if a == nil {
			return
		}
		if !a.writeToStore(ctx) {
			g.addUnstored(a)
			return
		}
	}
}

// flushLoop writes the unstored calls every releaseRetryEvery while the
// store is not skipped, until none is left or the gate closes.
func (g *Gate) flushLoop(ctx context.Context, stop <-chan struct{}) {
	t := time.NewTimer(releaseRetryEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-stop:
			g.bg.mu.Lock()
			g.bg.flushing = false
			g.bg.mu.Unlock()
			return
		case <-ctx.Done():
			return
		}
		g.flushUnstored(ctx)
		b := &g.bg
		b.mu.Lock()
		if len(b.unstored) == 0 {
			b.flushing = false
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		t.Reset(releaseRetryEvery)
	}
}

// writeToStore takes a's leases in the store with Force, under its token
// (merging with a lease an acquire whose answer was lost may have taken),
// and from then on renews and releases them there. It reports false when
// the store failed. A call released meanwhile is released in the store
// too.
func (a *Admission) writeToStore(ctx context.Context) bool {
	g := a.g
	a.mu.Lock()
	released := a.released
	a.mu.Unlock()
	if released {
		return true
	}
	lease := time.Duration(a.cfg.LeaseSeconds) * time.Second
	limits := make([]int, len(a.keys))
	for i := range limits {
		limits[i] = classLimit // a class key: never full
		if i < len(a.lanes) {
			limits[i] = a.lanes[i].Limit
		}
	}
	// Forced: whatever the lanes hold, so nothing to borrow.
	req := AcquireRequest{Token: a.token, Keys: a.keys, Limits: limits, Lease: lease, Force: true, Seats: a.seats()}
	sctx, cancel := g.storeContext(ctx)
	_, err := g.Store.Acquire(sctx, req, make([]int, len(a.keys)))
	cancel()
	if err != nil {
		g.storeFailed("acquire", err)
		return false
	}
	a.mu.Lock()
	released = a.released
	if !released {
		a.stored.Store(true)
	}
	a.mu.Unlock()
	if released {
		g.retryRelease(a.token, a.keys, lease) // its Release came while it was written
	}
	return true
}

// storeContext returns a context for one store operation that the
// caller's cancellation does not reach, bounded by the gate when the
// store states no bound of its own.
func (g *Gate) storeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, bounded := g.storeBound(); bounded {
		return context.WithoutCancel(ctx), func() {}
	}
	return context.WithTimeout(context.WithoutCancel(ctx), DefaultStoreDeadline)
}
