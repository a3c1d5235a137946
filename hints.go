package capgate

import (
	"math"
	"sync"
	"time"

	"github.com/capgate/capgate/settings"
)

// The refusal hints of the adaptive Retry-After policy: how long until a
// refused caller would get a slot, and how often the bottleneck lane frees
// one, both from the lanes' recent hold times. The arithmetic is pure; the
// hold estimates are the only state, kept per gate.

// holdWeight is the weight of the newest hold in a lane's estimate (an
// exponentially weighted mean): about the last eight calls count.
const holdWeight = 0.25

// holdTimes keeps, per lane name, a recent estimate of how long a call
// holds the lane, from this gateway's own releases. Keying by lane name
// (not lane key) keeps it bounded whatever the number of users; every lane
// of a call is held for the same time, so the names differ only in the mix
// of calls that pass through them. The zero value is ready to use and
// knows no history. A holdTimes is safe for concurrent use.
type holdTimes struct {
	mu  sync.Mutex
	est map[LaneName]time.Duration // requires mu held
}

// observe records that a call held lanes for held.
func (h *holdTimes) observe(lanes []Lane, held time.Duration) {
	if h == nil || held <= 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.est == nil {
		h.est = make(map[LaneName]time.Duration, 5)
	}
	for _, l := range lanes {
		old, ok := h.est[l.Name]
		if !ok {
			h.est[l.Name] = held
			continue
		}
		h.est[l.Name] = old + time.Duration(holdWeight*float64(held-old))
	}
}

// of fills holds (len(lanes)) with each lane's estimate; 0 where the lane
// has no history.
func (h *holdTimes) of(lanes []Lane, holds []time.Duration) {
	if h == nil {
		clear(holds)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, l := range lanes {
		holds[i] = h.est[l.Name]
	}
}

// adaptiveRetryAfter returns Retry-After for a call that found the lanes
// in full full: retry_after.paused if a full lane is paused; else the
// longest expected wait over the full lanes, calls ahead (count before −
// limit + 1) × the lane's hold ÷ its limit, in whole seconds rounded up,
// at least 1 and at most retry_after.max. holds[i] is lane i's recent hold
// (0: no history, the prior applies).
func adaptiveRetryAfter(ra settings.RetryAfter, lanes []Lane, before []int, full laneSet, holds []time.Duration) int {
	var wait time.Duration
	for i, l := range lanes {
		if !full.has(i) {
			continue
		}
		if l.paused() {
			return ra.Paused
		}
		ahead := time.Duration(before[i] + l.seats() - l.Limit)
		every := spacing(ra, l, holds[i])
		if ahead > 0 && every > math.MaxInt64/ahead {
			return ra.Max // beyond any cap
		}
		wait = max(wait, ahead*every)
	}
	secs := (wait + time.Second - 1) / time.Second
	return int(min(time.Duration(ra.Max), max(1, secs)))
}

// spacing returns how often lane frees a slot: its hold ÷ its limit; 0 for
// a paused lane, which frees none. A lane with no history (hold 0) is
// assumed to free one every retry_after.base seconds, so the adaptive
// policy starts where the fixed one is.
func spacing(ra settings.RetryAfter, l Lane, hold time.Duration) time.Duration {
	switch {
	case l.Limit <= 0: // paused, or all borrowed: frees none of its own
		return 0
	case hold <= 0:
		return time.Duration(ra.Base) * time.Second
	}
	return hold / time.Duration(l.Limit)
}

// refusalHints returns Retry-After (seconds) and the scope lane's spacing
// under ra's policy for a call that found full lanes; the fixed policy
// gives no spacing.
func refusalHints(ra settings.RetryAfter, lanes []Lane, before []int, full laneSet, scope int, holds *holdTimes) (retry int, every time.Duration) {
	if ra.Policy == settings.PolicyFixed {
		return retryAfterSeconds(ra, lanes, before, full), 0
	}
	hs := make([]time.Duration, len(lanes))
	holds.of(lanes, hs)
	retry = adaptiveRetryAfter(ra, lanes, before, full, hs)
	if scope >= 0 {
		every = spacing(ra, lanes[scope], hs[scope])
	}
	return retry, every
}

// setHints sets the Retry-After and spacing of a call refused (or
// shadow-refused) with before the counts it found and a.full, a.scope the
// lanes that refused it. Every refusal path calls it — the store's answer,
// the local lanes' pre-check, the degraded limits, a full waitlist, an
// unidentified caller — so a refusal says the same thing whichever lanes
// decided it: under the adaptive policy the hold-based Retry-After and the
// spacing, under the fixed one the fixed formula.
func (a *Admission) setHints(before []int) {
	a.retry, a.spacing = refusalHints(a.cfg.RetryAfter, a.lanes, before, a.full, a.scope, a.g.holds)
}

// setBusyHints sets the hints of a call refused because the store was too
// busy to count it and no lane was found full: one call ahead in the scope
// lane (base seconds under the fixed policy, as before; the lane's spacing
// under the adaptive one).
func (a *Admission) setBusyHints() {
	if a.scope < 0 {
		a.retry, a.spacing = a.cfg.RetryAfter.Base, 0
		return
	}
	before := make([]int, len(a.lanes))
	before[a.scope] = a.lanes[a.scope].Limit - a.lanes[a.scope].seats() + 1
	a.retry, a.spacing = refusalHints(a.cfg.RetryAfter, a.lanes, before, laneSet(1)<<a.scope, a.scope, a.g.holds)
}

// observeHold feeds the call's hold time, from taking its leases to its
// release (a wait before the leases were taken is not part of it), to the
// gate's estimates, unless its lease was lost (then the hold says nothing
// about the lane).
func (a *Admission) observeHold() {
	a.mu.Lock()
	held, lost := a.finished.Sub(a.leased), a.leaseLost
	a.mu.Unlock()
	if !lost {
		a.g.holds.observe(a.lanes, held)
	}
}

// observeService feeds the call's service time (from taking its leases to
// its release) to the adaptive limits, unless its lease was lost.
func (a *Admission) observeService() {
	if a.g.tuner == nil {
		return
	}
	a.mu.Lock()
	held, lost := a.finished.Sub(a.leased), a.leaseLost
	a.mu.Unlock()
	if !lost {
		a.g.tuner.observe(a, held)
	}
}
