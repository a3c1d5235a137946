package analyze

import (
	"cmp"
	"slices"
	"strings"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
)

// lease is one call holding its seats in its lanes until end.
type lease struct {
	end   int64
	lanes []held
}

// held is a call's seats in one lane.
type held struct {
	c     *laneCount
	seats int
}

// laneCount is the seats in flight in one lane (with a seat per call, as
// by default, the calls).
type laneCount struct {
	key laneKey
	n   int
}

// lanes counts the seats in flight per lane as calls start and end, in
// time order. Entries are deleted at zero, so its maps hold only the lanes
// with calls in flight.
type lanes struct {
	counts  map[laneKey]*laneCount
	active  leaseHeap
	holdCap int64 // the longest a lease lives, ms; 0: no cap
	last    int64 // the last start or end processed (see mark)
	free    [][]held
	took    []held
	// onEnd, when set, is told about each lane count that drops.
	onEnd func(end int64, k laneKey, count int)
}

func newLanes(holdCap int64) *lanes {
	return &lanes{counts: map[laneKey]*laneCount{}, holdCap: holdCap}
}

// holdCapMS returns how long a lease counts at most under cfg: the gate
// stops renewing at max_hold_seconds, so the last renewal is the last
// multiple of renew_seconds before it, and the lease expires lease_seconds
// later.
func holdCapMS(cfg settings.Config) int64 {
	renew, maxHold := int64(cfg.RenewSeconds)*1000, int64(cfg.MaxHoldSeconds)*1000
	if renew <= 0 || maxHold <= 0 {
		return 0
	}
	return (maxHold-1)/renew*renew + int64(cfg.LeaseSeconds)*1000
}

// count returns the seats in flight in lane k.
func (l *lanes) count(k laneKey) int {
	if c := l.counts[k]; c != nil {
		return c.n
	}
	return 0
}

// endUntil ends every lease whose end is at or before t: a call that
// ended at t is not in flight for a call starting at t.
func (l *lanes) endUntil(t int64) {
	for len(l.active) > 0 && l.active[0].end <= t {
		ls := l.active.pop()
		for _, h := range ls.lanes {
			c := h.c
			c.n -= h.seats
			if c.n <= 0 {
				delete(l.counts, c.key)
			}
			if l.onEnd != nil {
				l.onEnd(ls.end, c.key, c.n)
			}
		}
		l.last = max(l.last, ls.end)
		l.free = append(l.free, ls.lanes[:0])
	}
}

// take adds a lease of seats[i] seats on each keys[i] from start to end
// (capped at holdCap); it returns false when the lease is empty (end ≤
// start).
func (l *lanes) take(keys []laneKey, seats []int, start, end int64) bool {
	if l.holdCap > 0 {
		end = min(end, start+l.holdCap)
	}
	if end <= start {
		return false // held for less than the ts resolution: in flight for no one
	}
	var cs []held
	if n := len(l.free); n > 0 {
		cs, l.free = l.free[n-1], l.free[:n-1]
	}
	for i, k := range keys {
		c := l.counts[k]
		if c == nil {
			c = &laneCount{key: k}
			l.counts[k] = c
		}
		c.n += seats[i]
		cs = append(cs, held{c, seats[i]})
	}
	l.active.push(lease{end: end, lanes: cs})
	l.took = cs
	return true
}

// tieMS is how close two events must be for their order to be unknown:
// ts and held_ms are each truncated to the millisecond, so a rebuilt start
// can be off by up to a millisecond either way, and an end by up to one.
const tieMS = 2

// nearTie reports whether another start or end lies within tieMS of t:
// the last one processed, the next end, or the next start given.
func (l *lanes) nearTie(t int64, nextStart int64, hasNext bool) bool {
	if l.last >= t-tieMS {
		return true
	}
	if len(l.active) > 0 && l.active[0].end <= t+tieMS {
		return true
	}
	return hasNext && nextStart <= t+tieMS
}

// mark records a start processed, for nearTie.
func (l *lanes) mark(t int64) { l.last = max(l.last, t) }

// retryAfter is the gate's Retry-After for a call that found lanes full:
// base × the most seats ahead in a full lane.
func retryAfter(ra settings.RetryAfter, lanes []capgate.Lane, before []int) int {
	ahead := 0
	for i, l := range lanes {
		seats := max(l.Seats, 1)
		if before[i]+seats <= l.Limit {
			continue
		}
		if l.Limit == 0 && l.Borrow.Key == "" {
			return ra.Paused
		}
		ahead = max(ahead, before[i]+seats-l.Limit)
	}
	return min(ra.Max, ra.Base*ahead)
}

// classKey returns the key of the class's seats in lane k (a lane that
// lends, config "lending"): apart from every lane's.
func classKey(k laneKey) laneKey { return laneKey{k.lane + policy.MaxLanes, k.id} }

// whatIf replays the calls against a changed config, planning each call
// as the gate does (capgate.Keys.AppendPlan) under the config and its
// policy, the log's.
type whatIf struct {
	lay    *layout
	cfg    settings.Config
	lanes  *lanes
	plan   []capgate.Lane
	keys   []laneKey
	seats  []int
	before []int
	out    WhatIf
	byLane [policy.MaxLanes]Rate
	byTier map[string]*Rate
	// noRoute counts the calls of routes the policy lacks: they are
	// planned in no lane, so the replay admits them.
	noRoute int64
	// waited are, by user, the calls of the log that waited for a slot
	// (the contended ones), for the fairness replay (fairness).
	waited map[string]*FairUser
}

func newWhatIf(cfg settings.Config, lay *layout) *whatIf {
	return &whatIf{lay: lay, cfg: cfg, lanes: newLanes(holdCapMS(cfg)), byTier: map[string]*Rate{},
		out: WhatIf{Decisions: map[string]int64{}, Agreement: Agreement{Changed: map[string]int64{}}}}
}

// step replays one call (ev, and call as layout.callOf made it) at its
// start; it returns whether the changed config refuses it.
func (w *whatIf) step(ev *event, call *capgate.Call, nextStart int64, hasNext bool) bool {
	w.lanes.endUntil(ev.start)
	defer w.lanes.mark(ev.start)
	if ev.decision == "unavailable" || ev.degraded {
		return false // the store could not count it; it took no lease
	}
	w.out.Calls++
	r := w.byTier[ev.tier]
	if r == nil {
		r = &Rate{Name: ev.tier}
		w.byTier[ev.tier] = r
	}
	r.Calls++
	if w.cfg.Mode == settings.ModeOff {
		w.out.Decisions["none"]++
		return false
	}
	w.plan = w.plan[:0]
	if call.Route != nil {
		w.plan = capgate.Keys{TaskID: ev.task}.AppendPlan(w.plan, w.cfg, call, w.lay.tierIndex(ev.tier))
	} else {
		w.noRoute++
	}
	w.keys, w.seats, w.before = w.keys[:0], w.seats[:0], w.before[:0]
	full := false
	for j := range w.plan {
		l := &w.plan[j]
		// The seats as the changed config's plan has them: a call's seats
		// are capped at the lane's limit, which the change may move.
		i, seats := l.Spec.Index(), max(l.Seats, 1)
		k := laneKey{i, w.lay.laneID(ev, i)}
		n := w.lanes.count(k)
		if l.Borrow.Key != "" {
			// A lane that lends: the reserve's idle seats, by the class's
			// own count in the lane.
			l.Limit += l.Borrow.Borrowable(w.lanes.count(classKey(k)))
		}
		w.keys, w.seats, w.before = append(w.keys, k), append(w.seats, seats), append(w.before, n)
		w.byLane[i].Calls++
		full = full || n+seats > l.Limit
	}
	for j, l := range w.plan {
		if l.ClassKey != "" {
			// A call of the class also counts in the class's seats.
			w.keys, w.seats = append(w.keys, classKey(w.keys[j])), append(w.seats, w.seats[j])
		}
	}
	enforced := w.cfg.Enforces(ev.enforced)
	decision := "admitted"
	switch {
	case full && enforced:
		decision = "refused"
	case full:
		decision = "shadow-refused"
	}
	w.out.Decisions[decision]++
	w.out.Agreement.Compared++
	if decision == ev.decision {
		w.out.Agreement.Same++
	} else {
		w.out.Agreement.Changed[ev.decision+"→"+decision]++
		if w.lanes.nearTie(ev.start, nextStart, hasNext) {
			w.out.Agreement.NearTies++
		}
	}
	if full {
		for j, l := range w.plan {
			if w.before[j]+w.seats[j] > l.Limit {
				tallyRefusal(&w.byLane[w.keys[j].lane], decision)
			}
		}
		tallyRefusal(r, decision)
	}
	if decision == "refused" {
		w.out.Refused++
		if ev.decision != "refused" {
			w.out.NewlyRefused++
		}
		w.out.ExtraWaitSeconds += int64(retryAfter(w.cfg.RetryAfter, w.plan, w.before))
		return true
	}
	if ev.hasWait && ev.wait > 0 && ev.held >= 0 {
		w.noteWaited(ev)
	}
	if ev.held < 0 {
		if ev.decision == "refused" {
			w.out.NoLease++
		}
		return false
	}
	w.lanes.take(w.keys, w.seats, ev.start, ev.end)
	return false
}

// noteWaited counts a call that waited for a slot: its user's calls
// and seat-milliseconds held (its most seats in a lane × held_ms).
func (w *whatIf) noteWaited(ev *event) {
	if w.waited == nil {
		w.waited = map[string]*FairUser{}
	}
	u := w.waited[ev.user]
	if u == nil {
		u = &FairUser{User: ev.user}
		w.waited[ev.user] = u
	}
	seats := 1
	for _, n := range ev.seats {
		seats = max(seats, n)
	}
	u.Waited++
	u.HeldSeatMS += int64(seats) * ev.held
}

// fairness replays the config's fairness.by over the users whose calls
// waited in the log: while they wait together, by calls each gets as
// many admissions (its share of the time ∝ its mean call), by time or
// usage (the log has no usage: as time) each gets as much time. It
// returns the 20 users that held the most, with their share as logged
// and as replayed; nil when no call waited.
func (w *whatIf) fairness() *Fairness {
	if len(w.waited) == 0 {
		return nil
	}
	f := &Fairness{By: string(w.cfg.Fairness.By)}
	var total, means float64
	for _, u := range w.waited {
		u.MeanHeldMS = float64(u.HeldSeatMS) / float64(u.Waited)
		total += float64(u.HeldSeatMS)
		means += u.MeanHeldMS
		f.Users = append(f.Users, *u)
	}
	for i := range f.Users {
		u := &f.Users[i]
		u.Logged = float64(u.HeldSeatMS) / max(total, 1)
		u.Replayed = 1 / float64(len(f.Users))
		if w.cfg.Fairness.By == settings.FairCalls {
			u.Replayed = u.MeanHeldMS / max(means, 1)
		}
	}
	slices.SortFunc(f.Users, func(a, b FairUser) int {
		if a.HeldSeatMS != b.HeldSeatMS {
			return cmp.Compare(b.HeldSeatMS, a.HeldSeatMS)
		}
		return strings.Compare(a.User, b.User)
	})
	f.Users = f.Users[:min(len(f.Users), 20)]
	return f
}

// report returns the replay's findings.
func (w *whatIf) report() *WhatIf {
	out := w.out
	out.Fairness = w.fairness()
	if out.Agreement.Compared > 0 {
		out.Agreement.Rate = float64(out.Agreement.Same) / float64(out.Agreement.Compared)
	}
	for i, r := range w.byLane[:len(w.lay.lanes)] {
		if r.Calls > 0 {
			r.Name = w.lay.lanes[i].Name
			out.ByLane = append(out.ByLane, rate(r))
		}
	}
	for _, t := range sortedTiers(w.lay, w.byTier) {
		out.ByTier = append(out.ByTier, rate(*w.byTier[t]))
	}
	return &out
}
