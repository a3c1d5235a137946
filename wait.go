package capgate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/capgate/capgate/settings"
)

// waitlist returns the store's waitlist when this call may wait: it is
// enforced, waiting is on, and none of its lanes is paused (a paused lane
// refuses at once, as before). Otherwise nil.
func (a *Admission) waitlist() Waitlist {
	if !a.out.Enforced || a.cfg.Wait.MaxSeconds <= 0 {
		return nil
	}
	wl := capsOf(a.g.Store).Waitlist
	if wl == nil {
		return nil
	}
	for _, l := range a.lanes {
		if l.paused() {
			return nil
		}
	}
	return wl
}

// errTicketLost means the store no longer knows a waiting ticket that was
// never granted, or a grant expired before the waiter picked it up: the
// store lost it (a restart, say) or the waiter was far too slow. The call
// fails open, without opening the skip window: the store answers.
var errTicketLost = errors.New("the waiting ticket vanished from the lane store")

// errCallerGone ends the wait of a call whose client left: not a store
// failure, and nothing to count.
var errCallerGone = errors.New("caller gone while waiting")

// errNotEnforced ends the wait of a call that the config in force no
// longer enforces: it left the waitlist ungranted, and acquire now takes
// its leases as an unenforced call's (forced). Not a failure.
var errNotEnforced = errors.New("no longer enforced while waiting")

// join is acquire for a call that may wait: it joins the waitlist and, if
// queued, waits until its ticket is granted, max_seconds pass, the client
// leaves, or the config in force no longer enforces the call (then it
// returns errNotEnforced, unless a grant raced the change). It returns as
// Acquire does: taken and the counts before (for a grant, each at most
// limit-1: at the grant every lane had room). A store error is returned as
// is; the ticket then expires by itself.
func (a *Admission) join(ctx context.Context, wl Waitlist, req AcquireRequest, before []int) (bool, error) {
	g := a.g
	t := Ticket{
		Prefix:      g.keys(a.cfg).prefix(),
		Token:       req.Token,
		Keys:        req.Keys,
		Limits:      req.Limits,
		UserID:      a.out.Call.UserID,
		UserLane:    a.userLane() + 1,
		Lease:       req.Lease,
		TicketLease: waitTicketLease,
		Claim:       waitClaim,
		MaxWaiting:  a.cfg.Wait.MaxWaiting,
		MaxPerUser:  a.cfg.Wait.MaxWaitingPerUser,
		NotAfter:    req.NotAfter,
		Seats:       req.Seats,
		Borrow:      req.Borrow,
		Fair:        fairBy(a.cfg.Fairness.By),
	}
	// Store calls run to their end whatever the client does (the store's
	// deadline bounds each), as the acquire does; the waiting itself ends
	// with ctx.
	sctx := context.WithoutCancel(ctx)
	wake, stop, err := wl.Watch(sctx, t.Prefix, t.Token)
	if err != nil {
		return false, fmt.Errorf("watch waitlist: %w", err)
	}
	defer stop()
	res, err := wl.Join(sctx, t, before)
	if err != nil || res.Taken || !res.Queued {
		return res.Taken, err
	}
	if d, ok := a.predictWait(sctx, wl, t, before); ok && d > time.Duration(a.cfg.Wait.MaxSeconds)*time.Second {
		// A wait that would end in a refusal: refused now (wait.go),
		// unless a grant raced the prediction.
		a.refusePredicted(d)
		return a.leave(sctx, wl, t, req, before, true)
	}
	if a.queued != nil {
		a.queued(time.Duration(a.cfg.Wait.MaxSeconds) * time.Second)
	}

	start := time.Now() // real timers: the wait sleeps on them
	a.out.Queued = true
	if o := g.Observer; o != nil {
		o.WaitStarted(a)
		defer func() { o.WaitEnded(a, a.out.Waited) }()
	}
	defer func() { a.out.Waited = time.Since(start) }()

	maxWait := time.Duration(a.cfg.Wait.MaxSeconds) * time.Second
	limit := time.NewTimer(maxWait)
	defer limit.Stop()
	every := waitPumpEvery
	pump := time.NewTimer(pumpAfter(res.Next, every))
	defer pump.Stop()
	recheck := time.NewTicker(waitLimitsEvery)
	defer recheck.Stop()
	granted := false
	for !granted {
		onlyLimits := false
		select {
		case <-wake:
			// Most wake-ups are grants: picking one up is one round trip.
			// Otherwise (a re-check after the subscription reconnected)
			// ask where the ticket stands.
			held, err := g.Store.Renew(sctx, t.Token, t.Keys, req.Lease)
			if err != nil {
				return false, err
			}
			if held == len(t.Keys) {
				granted = true
				continue
			}
		case <-pump.C:
		case <-recheck.C:
			onlyLimits = true
		case <-limit.C:
			return a.leave(sctx, wl, t, req, before, true)
		case <-ctx.Done():
			if _, err := a.leave(sctx, wl, t, req, before, false); err != nil {
				return false, err
			}
			return false, fmt.Errorf("%w: %w", errCallerGone, ctx.Err())
		}
		// The call waits under the config in force, which staff, the
		// adaptive limits or a failed config read (enforce served as
		// shadow) may have changed since it joined.
		cfg, err := g.config(ctx)
		if err != nil || !cfg.Enforces(a.out.Call.Aware) {
			// Not enforced any more: it goes ahead as an unenforced call
			// arriving now would (fail open: it must not get the 429).
			if err != nil {
				a.setErr(err) // and its lanes keep the limits they had
			} else {
				a.readLimits(cfg, t.Limits) // judged by the change's limits too
			}
			return a.stopEnforcing(sctx, wl, t, req, before, cfg)
		}
		if d := time.Duration(cfg.Wait.MaxSeconds) * time.Second; d < maxWait {
			// Lowered: the wait ends by the new bound, from when it
			// queued. A raised one is not taken: the caller was told the
			// bound it arrived under (the decide protocol's wait header).
			maxWait = d
			limit.Reset(max(0, maxWait-time.Since(start)))
		}
		// The ticket is judged by the limits in force: each pump carries
		// them, and a change is sent at once.
		changed, paused := a.readLimits(cfg, t.Limits)
		if paused {
			// Refused, as a call that finds a paused lane on arrival.
			return a.leave(sctx, wl, t, req, before, false)
		}
		if onlyLimits && !changed {
			continue
		}
		// Sent until a Pump has taken them: most pumps carry no change,
		// and the store then renews the ticket without reading it.
		t.NewLimits = t.NewLimits || changed
		res, err := wl.Pump(sctx, t)
		if err != nil {
			return false, err
		}
		t.NewLimits = false
		every = pumpEvery(res.Waiting)
		t.TicketLease = max(waitTicketLease, 2*every+waitPumpEvery) // from its next pump on
		switch {
		case res.Taken:
			if granted, err = a.pickUp(sctx, t, req); err != nil {
				return false, err
			}
		case res.Dropped:
			// Taken off a full list to make room for a user holding
			// fewer tickets: refused, as if there had been no room.
			a.dropped = true
			return false, nil
		case !res.Queued:
			return false, errTicketLost
		}
		pump.Reset(pumpAfter(res.Next, every))
	}
	a.tookGrant(before, t.Limits)
	return true, nil
}

// readLimits sets limits (one per lane of a) and a's lanes to the limits
// of cfg, the config in force now (read from the config source through the
// adaptive limits, as Admit reads it). It reports whether any changed, and
// whether a lane is now paused (or too small for the call's seats).
func (a *Admission) readLimits(cfg settings.Config, limits []int) (changed, paused bool) {
	var buf [laneBufLen]Lane
	p := cfg.Policy()
	if p != a.cfg.Policy() {
		return false, false // a new policy: the call keeps its lanes' limits
	}
	lanes := a.g.keys(cfg).AppendPlan(buf[:0], cfg, &a.out.Call, p.TierIndex(a.out.Call.Tier))
	if len(lanes) != len(a.lanes) {
		return false, false // the same call plans the same lanes: never
	}
	for i, l := range lanes {
		if l.Limit != limits[i] {
			limits[i], a.lanes[i].Limit, changed = l.Limit, l.Limit, true
		}
		// A limit lowered below the seats the ticket queued with could
		// never grant it (its seats are fixed at the join): refused as on a
		// paused lane; a retry gets seats capped at the new limit.
		paused = paused || l.paused() || a.lanes[i].seats() > satAdd(l.Limit, l.Borrow.Lend)
	}
	return changed, paused
}

// stopEnforcing ends the wait of a call that cfg, the config in force, no
// longer enforces (mode shadow or off, or enforce_for not covering it):
// from now on it is an unenforced call of cfg's mode, as its line says. It
// leaves the waitlist; a grant that raced the change is taken (true), else
// it returns errNotEnforced and acquire takes its leases forced. Mode off
// is taken as shadow: the call was classified and counted already, so it
// goes ahead counted, with its line, rather than untouched.
func (a *Admission) stopEnforcing(ctx context.Context, wl Waitlist, t Ticket, req AcquireRequest, before []int, cfg settings.Config) (bool, error) {
	a.out.Enforced = false
	a.cfg.Mode, a.cfg.EnforceFor = cfg.Mode, cfg.EnforceFor
	taken, err := a.leave(ctx, wl, t, req, before, true)
	if err != nil || taken {
		return taken, err
	}
	return false, errNotEnforced
}

// pickUp renews a grant's leases to the full lease; false means the grant
// expired first (it is gone: the caller can't use it).
func (a *Admission) pickUp(ctx context.Context, t Ticket, req AcquireRequest) (bool, error) {
	held, err := a.g.Store.Renew(ctx, t.Token, t.Keys, req.Lease)
	if err != nil {
		return false, err
	}
	if held < len(t.Keys) {
		return false, errTicketLost
	}
	return true, nil
}

// leave takes the ticket off the waitlist. If it had been granted
// meanwhile, a call that can still go ahead (use) takes the grant; one
// that can't gives it back. It returns whether the call holds the lease.
func (a *Admission) leave(ctx context.Context, wl Waitlist, t Ticket, req AcquireRequest, before []int, use bool) (bool, error) {
	granted, err := wl.Leave(ctx, t)
	if err != nil || !granted {
		return false, err
	}
	if use {
		if ok, err := a.pickUp(ctx, t, req); err != nil || !ok {
			return false, err
		}
		a.tookGrant(before, t.Limits)
		return true, nil
	}
	if err := wl.ReleaseWait(ctx, t.Prefix, t.Token, t.Keys, Charge{}); err != nil {
		return false, err
	}
	return false, nil
}

// pumpAfter is when a waiter next pumps: when the earliest blocking lease
// expires (next), and at least every every, to renew its ticket.
func pumpAfter(next, every time.Duration) time.Duration {
	if next > 0 && next < every {
		return next
	}
	return every
}

// pumpEvery is how often each waiter pumps with waiting tickets on the
// list: waitPumpEvery, or longer once the list is long, so that all the
// waiters together pump about waitPumpRate times a second (each pump is a
// script run in the store), up to waitPumpMax. Wake-ups, not pumps, hand
// most slots over.
func pumpEvery(waiting int) time.Duration {
	d := time.Duration(waiting) * time.Second / waitPumpRate
	return min(max(d, waitPumpEvery), waitPumpMax)
}

// tookGrant records that the call took the slot it waited for: its held
// time starts now (so held_ms, which the log's replay counts as time in
// the lanes, leaves the wait out), and the counts before it are what the
// grant saw: room in every lane.
func (a *Admission) tookGrant(before, limits []int) {
	a.granted = true
	a.start = a.g.now()
	for i, l := range a.lanes {
		before[i] = min(before[i], limits[i]-l.seats())
	}
}

// releaseStore gives the call's leases back, through the waitlist when
// calls may be waiting for them, so a freed slot is handed over at once.
func (a *Admission) releaseStore(ctx context.Context) error {
	if wl := capsOf(a.g.Store).Waitlist; wl != nil && a.cfg.Mode == settings.ModeEnforce && a.cfg.Wait.MaxSeconds > 0 {
		return wl.ReleaseWait(ctx, a.g.keys(a.cfg).prefix(), a.token, a.keys, a.charge())
	}
	return a.g.Store.Release(ctx, a.token, a.keys)
}

// userLane returns the index of the call's own lane (keyed by the user);
// -1 when it has none.
func (a *Admission) userLane() int {
	for i, l := range a.lanes {
		if l.Spec != nil && l.Spec.ByUser() {
			return i
		}
	}
	return -1
}

// charge is what the call cost its user in the wait's fair order, told
// to the store as it releases (fairness.by): nothing by calls (charged at
// the join); by time, its seats (the most it took in a lane) × the
// milliseconds it held them; by usage, what SetUsage recorded, or its time
// when nothing was.
func (a *Admission) charge() Charge {
	by := fairBy(a.cfg.Fairness.By)
	if by == settings.FairCalls {
		return Charge{}
	}
	if n, ok := a.Usage(); ok && by == settings.FairUsage {
		return Charge{User: a.out.Call.UserID, Cost: n}
	}
	seats := 1
	for _, l := range a.lanes {
		seats = max(seats, l.seats())
	}
	held := a.heldMS // set by Release, which runs this
	if !a.released || held < 0 {
		held = a.g.now().Sub(a.start).Milliseconds()
	}
	held = max(held, 0)
	return Charge{User: a.out.Call.UserID, Cost: int64(seats) * held}
}

// No wait that ends in a refusal anyone could predict: a call that joins
// the waitlist and is queued is told at once, with a 429, when its
// predicted wait is past wait.max_seconds, rather than holding its
// connection for the whole wait to be refused at its end. Its Retry-After
// is when a retry's wait would fit: the prediction − wait.max_seconds, in
// whole seconds rounded up, at least 1 (a retry then queues and is served
// within its wait; Retry-After as the whole prediction left the lane idle
// while the refused callers, whose clients pause on a 429, slept it out:
// docs/BENCHMARKS.md, *Predicted waits*). The prediction, per lane the call waits on (a lane that is full
// for it, or on which tickets wait), is
//
//	(calls over the limit + tickets waiting before it) × the lane's hold ÷ its limit
//
// where the calls over the limit are the lane's count when the call
// arrived + its seats − the limit (none when negative), the tickets
// waiting before it are the lane's waiting tickets less its own, and the
// hold is the lane's recent hold time (the exponentially weighted mean of
// this gateway's releases: holdTimes, the adaptive Retry-After's). The
// call's prediction is the longest over its lanes. It never refuses when
// it can't judge: a lane it waits on with no hold history yet, or a store
// error reading the waiting tickets, and the call waits as before (fail
// open). The tickets waiting are counted in arrival, not in fair order, so
// on a lane shared by users the prediction is a bound from above for a
// user with fewer calls waiting than the others.

// predictWait returns the predicted wait of the call whose ticket t was
// just queued, with before the lanes' counts when it arrived; ok is false
// when it can't judge.
func (a *Admission) predictWait(ctx context.Context, wl Waitlist, t Ticket, before []int) (d time.Duration, ok bool) {
	var buf [laneBufLen]int
	waiting := buf[:0]
	if len(t.Keys) <= len(buf) {
		waiting = buf[:len(t.Keys)]
	} else {
		waiting = make([]int, len(t.Keys))
	}
	if err := wl.Waiting(ctx, t.Prefix, t.Keys, waiting); err != nil {
		return 0, false
	}
	holds := make([]time.Duration, len(a.lanes))
	a.g.holds.of(a.lanes, holds)
	for i, l := range a.lanes {
		if i >= len(t.Keys) || i >= len(before) {
			return 0, false
		}
		limit := t.Limits[i]
		over := max(0, before[i]+l.seats()-limit)
		ahead := over + max(0, waiting[i]-1)
		if ahead == 0 {
			continue // the lane holds the call up nowhere
		}
		if holds[i] <= 0 || limit <= 0 {
			return 0, false // no history, or a lane of borrowed seats only: can't judge
		}
		per := holds[i] / time.Duration(limit)
		if per > 0 && time.Duration(ahead) > math.MaxInt64/per {
			return math.MaxInt64, true
		}
		d = max(d, time.Duration(ahead)*per)
	}
	return d, d > 0
}

// refusePredicted records that the call was refused at once for its
// predicted wait d (predictedRetry gives its Retry-After).
func (a *Admission) refusePredicted(d time.Duration) {
	a.predicted = max(d, time.Second)
}

// predictedRetry returns the Retry-After of a call refused for its
// predicted wait (refusePredicted): when a retry's predicted wait would fit
// in wait.max_seconds, the prediction − max_seconds in whole seconds,
// rounded up, at least 1; ok false for any other call.
func (a *Admission) predictedRetry() (secs int, ok bool) {
	if a.predicted <= 0 {
		return 0, false
	}
	d := max(a.predicted-time.Duration(a.cfg.Wait.MaxSeconds)*time.Second, time.Second)
	s := (d + time.Second - 1) / time.Second
	return int(min(s, math.MaxInt32)), true
}
