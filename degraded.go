package capgate

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
)

// Local lanes and degraded limits.
//
// A gate with Local lanes (Gate.Local, an in-process store) takes every
// call it counts there too, with the same keys, token, lease and renewals
// as in the store. They serve two ends:
//
//   - Before the store is asked, an enforced call that this gateway alone
//     already fills a lane with is refused at once: a lane can only be
//     fuller cluster-wide. So one user's flood of calls is refused here and
//     never queues for Redis.
//   - When the store cannot count a call (it failed, it is being skipped,
//     or it was too busy to send the acquire within its deadline), the local
//     lanes decide alone, with degraded limits (degradedLimit): per user
//     and per task as configured, cluster-wide lanes divided among the
//     gateways last seen. The call's decision stays "unavailable" (the
//     cluster did not count it) with Degraded set, and an enforced call that
//     the local lanes find full is refused: an outage no longer means
//     unlimited. A call that is not enforced is only counted, for its log
//     line.

// degradedLimit returns the limit the local lanes apply to lane l while
// the store is unavailable, with gateways the number of gateways last
// seen: the lanes every gateway shares (cluster lanes, and lanes keyed by
// tier or by a call field) get their limit divided among the gateways,
// rounded down but at least 1 (a paused lane stays paused); a task lane
// and the caller's own lane keep theirs. A user's calls spread over
// several gateways may then run up to their limit on each.
func degradedLimit(l Lane, gateways int) int {
	if !sharedByGateways(l) || l.Limit == 0 || gateways <= 1 {
		return l.Limit
	}
	return max(1, l.Limit/gateways)
}

// sharedByGateways reports whether every gateway counts in one count of
// lane l that this gateway only has a share of: not a task lane, not the
// caller's own lane.
func sharedByGateways(l Lane) bool {
	return l.Spec == nil || (l.Spec.Scope != policy.ScopeTask && !l.Spec.ByUser())
}

// acquireLocal takes the call's leases in the local lanes, with the
// configured limits and req's Force. It reports true when it refused the
// call: enforced, and a lane this gateway alone already fills. An error
// (not expected of an in-process store) leaves the call without local
// lanes.
func (a *Admission) acquireLocal(ctx context.Context, req AcquireRequest) (refused bool) {
	g := a.g
	if g.Local == nil {
		return false
	}
	before := make([]int, len(req.Keys)+borrowKeys(req.Borrow))
	req.NotAfter = time.Time{} // in process: nothing sits in a buffer
	taken, err := g.Local.Acquire(ctx, req, before)
	if err != nil {
		g.logger().Warn("capacity local lanes failed", "op", "acquire", "error", err)
		return false
	}
	// The local lanes lend as the store does, from this gateway's class
	// seats: judged on a copy, since the store's answer raises a.lanes'.
	lanes := a.lanes
	if req.Borrow != nil {
		lanes = slices.Clone(a.lanes)
	}
	before = lend(lanes, before, len(req.Keys))
	full := fullLanes(lanes, before)
	if taken || full.empty() {
		a.local, a.localAt = taken, before
		return false
	}
	a.out.Decision = DecisionRefused
	a.full = full
	a.scope = int8(scopeOf(a.lanes, full))
	a.setHints(before)
	a.out.Counts = before
	return true
}

// degradeLate is degrade for a call that may have skipped the local
// pre-check because it could wait (wl non-nil): it takes its local leases
// first, so the local lanes can decide for it.
func (a *Admission) degradeLate(ctx context.Context, wl Waitlist, req AcquireRequest, busy bool) error {
	if wl != nil && a.acquireLocal(ctx, req) {
		return nil // refused: this gateway alone already fills a lane
	}
	return a.degrade(ctx, busy)
}

// countLocal counts a call the store admitted after a wait (or at once,
// through the waitlist) in the local lanes. The cluster-wide lanes take it
// whatever they hold: they are this gateway's share, which the store has
// just found room for. But the user and task lanes have the same limit
// here as in the store, and this gateway's own calls alone filling one
// means the store lost some of them (a restart, a failover): then the
// store's answer must not stand. countLocal reports false in that case,
// with storeBefore raised to the local counts of those lanes, and the call
// holds no local lease. A call no longer enforced (the config in force
// stopped enforcing it while it waited) is counted whatever they hold, as
// on arrival.
func (a *Admission) countLocal(ctx context.Context, req AcquireRequest, storeBefore []int) bool {
	g := a.g
	if g.Local == nil || a.local {
		return true
	}
	before := make([]int, len(req.Keys))
	limits := make([]int, len(req.Keys))
	for i := range limits {
		limits[i] = classLimit // a class key: never full
		if i < len(a.lanes) && !sharedByGateways(a.lanes[i]) {
			// As the store had it (borrowed seats included): this
			// gateway's own calls can't fill a lane past what the store
			// let it have.
			limits[i] = a.lanes[i].Limit
		}
	}
	// The limits in full, without lending: a user or task lane's count
	// here is this gateway's alone.
	req.NotAfter, req.Force, req.Limits, req.Borrow = time.Time{}, !a.out.Enforced, limits, nil
	taken, err := g.Local.Acquire(ctx, req, before)
	if err != nil {
		g.logger().Warn("capacity local lanes failed", "op", "acquire", "error", err)
		return true
	}
	before = before[:len(a.lanes)]
	if !taken {
		for i, n := range before {
			if n+a.lanes[i].seats() > limits[i] {
				storeBefore[i] = max(storeBefore[i], n)
			}
		}
		return false
	}
	a.local, a.localAt = true, before
	return true
}

// degrade decides a call the store could not count. Without local lanes
// the call is unavailable, uncounted, except that an enforced call the
// store was merely too busy for, or whose waiting ticket it lost (busy), is
// refused, since nothing counted it: scope the task lane (this gateway is
// the one overloaded; the first lane without one), Retry-After
// retry_after.base. With local lanes they
// decide, with degraded limits, and a call they admit is written into the
// store as soon as it is used again (lease.go).
func (a *Admission) degrade(ctx context.Context, busy bool) error {
	a.out.Decision = DecisionUnavailable
	if !a.local {
		if busy && a.out.Enforced {
			a.out.Decision = DecisionRefused
			a.scope = int8(a.taskLane())
			a.setBusyHints()
		}
		return nil
	}
	a.out.Degraded = true
	n := a.g.gatewaysSeen()
	for i := range a.lanes {
		l := &a.lanes[i]
		l.Limit = degradedLimit(*l, n)
		// A big call still runs alone under the share: its seats are
		// capped at the lower limit too (they were taken locally at the
		// full count, which only makes the local count cautious).
		l.Seats = max(1, min(l.Seats, l.Limit))
	}
	before := a.localAt
	a.full = fullLanes(a.lanes, before)
	a.scope = int8(scopeOf(a.lanes, a.full))
	if !a.full.empty() && a.out.Enforced {
		a.dropLocal(ctx)
		a.out.Decision = DecisionRefused
		a.setHints(before)
		a.out.Counts = before
		return nil
	}
	a.out.Counts = make([]int, len(before))
	for i, n := range before {
		a.out.Counts[i] = n + a.lanes[i].seats()
	}
	a.startRenewing(ctx)
	a.g.addUnstored(a) // written into the store when it is back
	return nil
}

// releaseLost releases, in the background, the leases an acquire or join
// that failed with err may have taken all the same (the store ran it but
// its answer was lost, a timeout say), unless the call is to be written
// into the store under the same token anyway (it holds local leases). An
// acquire the store refused to run late, or never sent, took nothing.
func (a *Admission) releaseLost(wl Waitlist, req AcquireRequest, err error) {
	if a.local || errors.Is(err, ErrLateAcquire) {
		return
	}
	var te interface{ Timeout() bool }
	if errors.Is(err, ErrBusy) && !(errors.As(err, &te) && te.Timeout()) {
		return // never sent
	}
	a.g.retryLost(req.Token, req.Keys, req.Lease, wl != nil)
}

// dropLocal gives back the call's local leases while it is being decided
// (the store refused it, or the client left).
func (a *Admission) dropLocal(ctx context.Context) {
	if a.local {
		a.releaseLocal(ctx)
		a.local = false
	}
}

// releaseLocal gives back the call's local leases. An in-process store
// fails only on a done context, which this one never is.
func (a *Admission) releaseLocal(ctx context.Context) {
	if err := a.g.Local.Release(context.WithoutCancel(ctx), a.token, a.keys); err != nil {
		a.g.logger().Warn("capacity local lanes failed", "op", "release", "error", err)
	}
}

// taskLane returns the index of the call's task lane; 0 (the first lane)
// when it has none, -1 when it has no lanes.
func (a *Admission) taskLane() int {
	for i, l := range a.lanes {
		if isTaskLane(l) {
			return i
		}
	}
	if len(a.lanes) == 0 {
		return -1
	}
	return 0
}

// UnidentifiedUser is the user id of the heavy calls whose caller could
// not be identified because the identity lookup failed or timed out. The
// parentheses keep it apart from any Django username.
const UnidentifiedUser = "(unidentified)"

// defaultUnidentified is the default of the unidentified setting: one
// heavy call at once per gateway for callers it could not identify.
const defaultUnidentified = 1

// Unidentified admits a heavy call whose caller could not be identified
// because of cause (an identity lookup that failed or timed out). A failed
// lookup must never mean an uncounted call: a flood of requests that
// defeat or slow the lookup would otherwise all reach the API. The call
// is gated as the user UnidentifiedUser, of the policy's default tier, in
// one lane of the gateway's own — the policy's lane keyed by the user
// ("user" without one), key UnidentifiedUser — whose limit is the config's
// unidentified setting, per gateway: in the local lanes (Gate.Local), its decision then
// "unavailable" (the cluster did not count it) with Degraded set while it
// holds that place; or, without local lanes, in a Store that lives in this
// process (Kind "memory"), its decision then "admitted". An enforced call
// that finds the lane full is refused with scope user. A call that is not
// enforced is counted and never refused. With neither, nothing can count
// it: an enforced call is refused, any other is unavailable and uncounted. In mode off it passes untouched, as from Admit. The store is
// never asked and its skip window is not touched. The caller must call
// Release, as after Admit.
func (g *Gate) unidentified(ctx context.Context, cfg settings.Config, call Call, opts AdmitOptions) *Admission {
	p := cfg.Policy()
	call.UserID, call.Tier = UnidentifiedUser, p.Identity.Default
	a := g.newAdmission(cfg, call)
	if a.off {
		return a
	}
	defer g.admitted(a)
	a.setOptions(opts)
	a.setErr(opts.Unidentified)
	a.out.Decision = DecisionUnavailable
	lane := Lane{Name: "user", Limit: cfg.Unidentified}
	if i := p.UserLane(); i >= 0 {
		lane.Name, lane.Spec = LaneName(p.Lanes[i].Name), p.Lanes[i]
	}
	lane.Key = g.keys(cfg).Lane(lane.Name, UnidentifiedUser)
	a.lanes = append(a.laneBuf[:0], lane)
	a.keys = append(a.keyBuf[:0], lane.Key)
	before := a.intBuf[:1:1]
	// This gateway's own lanes: the local ones, or the store itself when
	// it is in this process (then the whole of the lanes).
	counter, inStore := g.Local, false
	if counter == nil && laneStoreKind(g.Store) == "memory" {
		counter, inStore = g.Store, true
	}
	if counter == nil {
		if a.out.Enforced {
			a.refuseUnidentified(before)
		}
		return a
	}
	a.token = newToken()
	taken, err := counter.Acquire(ctx, AcquireRequest{
		Token:  a.token,
		Keys:   a.keys,
		Limits: []int{lane.Limit},
		Lease:  time.Duration(cfg.LeaseSeconds) * time.Second,
		Force:  !a.out.Enforced,
	}, before)
	switch {
	case err != nil:
		// An in-process store fails only on a done context: the client
		// left, and a client that left never reaches the API.
		a.setErr(err)
		return a
	case !taken:
		a.refuseUnidentified(before)
		return a
	}
	if inStore {
		// Counted by the store, as any admission.
		a.taken, a.leased, a.out.Decision = true, g.now(), DecisionAdmitted
	} else {
		a.local, a.out.Degraded = true, true
	}
	a.full = fullLanes(a.lanes, before)
	a.out.Counts = append(a.intBuf[1:1:2], before[0]+1)
	a.startRenewing(ctx)
	return a
}

// refuseUnidentified refuses an unidentified call: its one lane (scope
// user) held before calls.
func (a *Admission) refuseUnidentified(before []int) {
	a.out.Decision = DecisionRefused
	a.full = 1
	a.scope = 0
	a.out.Counts = before
	a.setHints(before)
}
