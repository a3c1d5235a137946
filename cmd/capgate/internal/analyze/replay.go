package analyze

import "github.com/capgate/capgate"

// lease is one call holding its lanes until end.
type lease struct {
	end   int64
	lanes []*laneCount
}

// laneCount is the calls in flight in one lane.
type laneCount struct {
	key laneKey
	n   int
}

// lanes counts the calls in flight per lane as calls start and end, in
// time order. Entries are deleted at zero, so its maps hold only the lanes
// with calls in flight.
type lanes struct {
	counts  map[laneKey]*laneCount
	active  leaseHeap
	holdCap int64 // the longest a lease lives, ms; 0: no cap
	last    int64 // the last start or end processed (see mark)
	free    [][]*laneCount
	took    []*laneCount
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
func holdCapMS(cfg capgate.Config) int64 {
	renew, maxHold := int64(cfg.RenewSeconds)*1000, int64(cfg.MaxHoldSeconds)*1000
	if renew <= 0 || maxHold <= 0 {
		return 0
	}
	return (maxHold-1)/renew*renew + int64(cfg.LeaseSeconds)*1000
}

// count returns the calls in flight in lane k.
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
		for _, c := range ls.lanes {
			c.n--
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

// take adds a lease on keys from start to end (capped at holdCap); it
// returns false when the lease is empty (end ≤ start).
func (l *lanes) take(keys []laneKey, start, end int64) bool {
	if l.holdCap > 0 {
		end = min(end, start+l.holdCap)
	}
	if end <= start {
		return false // held for less than the ts resolution: in flight for no one
	}
	var cs []*laneCount
	if n := len(l.free); n > 0 {
		cs, l.free = l.free[n-1], l.free[:n-1]
	}
	for _, k := range keys {
		c := l.counts[k]
		if c == nil {
			c = &laneCount{key: k}
			l.counts[k] = c
		}
		c.n++
		cs = append(cs, c)
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

// callKeys returns the lanes of ev's call, in lane order.
func callKeys(buf []laneKey, ev *event) []laneKey {
	buf = append(buf[:0], laneKey{laneAPIHeavy, ""}, laneKey{laneTask, ev.task})
	if ev.semantic {
		buf = append(buf, laneKey{laneES2KNN, ""})
	}
	return append(buf, laneKey{laneTier, ev.tier}, laneKey{laneUser, ev.user})
}

// retryAfter is the gate's Retry-After for a call that found lanes full.
func retryAfter(ra capgate.RetryAfter, lanes []capgate.Lane, before []int) int {
	ahead := 0
	for i, l := range lanes {
		if before[i] < l.Limit {
			continue
		}
		if l.Limit == 0 {
			return ra.Paused
		}
		ahead = max(ahead, before[i]-l.Limit+1)
	}
	return min(ra.Max, ra.Base*ahead)
}

// whatIf replays the calls against a changed config.
type whatIf struct {
	cfg    capgate.Config
	lanes  *lanes
	plan   []capgate.Lane
	keys   []laneKey
	before []int
	out    WhatIf
	byLane [numLanes]Rate
	byTier map[string]*Rate
}

func newWhatIf(cfg capgate.Config) *whatIf {
	return &whatIf{cfg: cfg, lanes: newLanes(holdCapMS(cfg)), byTier: map[string]*Rate{},
		out: WhatIf{Decisions: map[string]int64{}, Agreement: Agreement{Changed: map[string]int64{}}}}
}

// step replays one call at its start; it returns whether the changed
// config refuses it.
func (w *whatIf) step(ev *event, nextStart int64, hasNext bool) bool {
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
	if w.cfg.Mode == capgate.ModeOff {
		w.out.Decisions["none"]++
		return false
	}
	call := capgate.Call{Endpoint: ev.endpoint, Rows: ev.rows, Semantic: ev.semantic,
		UserID: ev.user, Tier: capgate.Tier(ev.tier)}
	w.plan = capgate.Keys{TaskID: ev.task}.AppendPlan(w.plan[:0], w.cfg, call)
	w.keys, w.before = w.keys[:0], w.before[:0]
	full := false
	for _, l := range w.plan {
		i := laneIndex(string(l.Name))
		k := laneKey{i, laneID(ev, i)}
		n := w.lanes.count(k)
		w.keys, w.before = append(w.keys, k), append(w.before, n)
		w.byLane[i].Calls++
		full = full || n >= l.Limit
	}
	enforced := w.cfg.Mode == capgate.ModeEnforce && (w.cfg.EnforceFor == capgate.EnforceAll || ev.enforced)
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
			if w.before[j] >= l.Limit {
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
	if ev.held < 0 {
		if ev.decision == "refused" {
			w.out.NoLease++
		}
		return false
	}
	w.lanes.take(w.keys, ev.start, ev.end)
	return false
}

// report returns the replay's findings.
func (w *whatIf) report() *WhatIf {
	out := w.out
	if out.Agreement.Compared > 0 {
		out.Agreement.Rate = float64(out.Agreement.Same) / float64(out.Agreement.Compared)
	}
	for i, r := range w.byLane {
		if r.Calls > 0 {
			r.Name = laneNames[i]
			out.ByLane = append(out.ByLane, rate(r))
		}
	}
	for _, t := range sortedTiers(w.byTier) {
		out.ByTier = append(out.ByTier, rate(*w.byTier[t]))
	}
	return &out
}
