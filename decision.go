package capgate

import (
	"errors"
	"math"
	"sync"
	"time"

	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
)

// Outcome is what the gate decided for one call: a plain value, fixed when
// Admit returns. Everything capgate says of a decision reads it — the
// capacity headers and the 429's body (package answer), the decision
// service's answer, the metrics and the call's log line — so they can't
// disagree. The zero Outcome is an ungated call's (no decision, no lanes).
type Outcome struct {
	Decision Decision
	// Mode is the mode of the config the call was decided under, and
	// Enforced whether a full lane refuses it there (mode enforce, and
	// enforce_for counts it): in shadow a full lane makes the call
	// DecisionShadowRefused, and it runs.
	Mode     settings.Mode
	Enforced bool
	// Queued reports whether the call's ticket waited for a slot (Waited:
	// for how long).
	Queued bool
	// Holding: the call holds leases in the lane store. Counted: it holds
	// a place until Release, in the store or in the gate's local lanes
	// while the store is out (a proxy keeps such a call's upstream request
	// running when its client leaves). Degraded: the local lanes decided
	// it alone, with degraded limits.
	Holding, Counted, Degraded bool
	// Full are the lanes the call found full: bit i set for Lanes[i] (a
	// policy has at most policy.MaxLanes lanes).
	Full uint32
	Call Call
	// Policy is the policy the call was decided under (the built-in one
	// for an ungated call).
	Policy *policy.Policy
	// Lanes are the call's lanes (nil when none were planned), Counts each
	// lane's count as the call saw it (before it, plus its seats if it took
	// them; nil when unknown).
	Lanes  []Lane
	Counts []int
	// Scope is the lane a refusal reports ("" when no lane was full).
	Scope LaneName
	// RetryAfter (seconds) and Spacing (how often Scope frees a slot,
	// under the adaptive hints; 0 unknown) are set for a refused or
	// shadow-refused call only. While the call is decided they hold its
	// hints whatever its decision.
	RetryAfter int
	Spacing    time.Duration
	// Suggested is how many calls the user should keep in flight; it
	// means something only when Lanes is not empty.
	Suggested int
	Waited    time.Duration
	// MaxHold is max_hold_seconds of its config: the longest its leases
	// are renewed.
	MaxHold time.Duration
}

// The pure part of a decision: which lanes are full, which one is reported,
// how long to wait and how many calls to keep in flight. No I/O here.

// laneSet is a set of lane indexes; a call has at most policy.MaxLanes (16).
type laneSet uint16

// A laneSet holds a bit for every lane a policy may have: this stops
// compiling if policy.MaxLanes outgrows it.
const _ laneSet = 1 << (policy.MaxLanes - 1)

func (s laneSet) has(i int) bool { return s&(1<<i) != 0 }
func (s laneSet) empty() bool    { return s == 0 }

// decide returns the decision of a call whose lanes full were full before
// it, given whether a full lane refuses it (enforced: the mode in force)
// and whether the store took its leases. This is the one place a call is
// shadow-refused: unenforced, it found a lane full and runs. A store whose
// answer contradicts the request (no lease though no lane was full, or
// the wrong answer to a forced or unforced request) broke its contract:
// that is an error, and the call is counted as unavailable.
func decide(enforced bool, full laneSet, taken bool) (Decision, error) {
	switch {
	case full.empty() && !taken:
		return DecisionNone, errors.New("the store took no lease though no lane was full")
	case full.empty():
		return DecisionAdmitted, nil
	case !enforced && taken:
		return DecisionShadowRefused, nil
	case !enforced:
		return DecisionNone, errors.New("the store refused an unenforced call (its acquire was forced)")
	case taken:
		return DecisionNone, errors.New("the store took a lease on a full lane of an enforced call")
	default:
		return DecisionRefused, nil
	}
}

// fullLanes returns the lanes where the call's seats don't fit beside the
// count before it (for a call of one seat: the count reached the limit); a
// limit of 0 is always full.
func fullLanes(lanes []Lane, before []int) laneSet {
	var s laneSet
	for i, l := range lanes {
		if before[i]+l.seats() > l.Limit {
			s |= 1 << i
		}
	}
	return s
}

// seats returns what the call takes of l: at least 1 (a Lane built by hand
// has none set).
func (l Lane) seats() int { return max(l.Seats, 1) }

// paused reports whether l admits no call: a limit of 0 and nothing to
// borrow (a lane that lends may still admit a call on a borrowed seat).
func (l Lane) paused() bool { return l.Limit <= 0 && l.Borrow.Key == "" }

// scopeOf returns the lane reported for a refusal: the first full lane
// whose limit is 0 (a paused lane wins), else the first full lane; -1 when
// none is full.
func scopeOf(lanes []Lane, full laneSet) int {
	first := -1
	for i, l := range lanes {
		if !full.has(i) {
			continue
		}
		if l.paused() {
			return i
		}
		if first < 0 {
			first = i
		}
	}
	return first
}

// retryAfterSeconds returns Retry-After for a call that found lanes full:
// retry_after.paused if any full lane is paused, else base × the most seats
// ahead in a full lane (count before + the call's seats − limit: for a
// call of one seat, the calls ahead), capped at max.
func retryAfterSeconds(ra settings.RetryAfter, lanes []Lane, before []int, full laneSet) int {
	ahead := 0
	for i, l := range lanes {
		if !full.has(i) {
			continue
		}
		if l.paused() {
			return ra.Paused
		}
		ahead = max(ahead, before[i]+l.seats()-l.Limit)
	}
	return min(ra.Max, ra.Base*ahead)
}

// suggestedConcurrency returns how many calls the user should keep in
// flight now, given the counts including this call (nil when unknown): the
// calls it has in its own lane (the one keyed by the caller) plus the room
// left in the fullest lane, within its own lane's limit. Without such a
// lane its own calls are unknown: the room left plus this call, within the
// smallest limit. Task lanes are left out: they say nothing about what the
// user may send. ok is false when the call has no lanes.
func suggestedConcurrency(lanes []Lane, counts []int) (n int, ok bool) {
	if len(lanes) == 0 {
		return 0, false
	}
	user := -1
	for i, l := range lanes {
		if l.paused() {
			return 0, true
		}
		if user < 0 && l.Spec != nil && l.Spec.ByUser() {
			user = i
		}
	}
	limit := lanes[0].Limit
	if user >= 0 {
		limit = lanes[user].Limit
	} else {
		seen := false
		for _, l := range lanes {
			if !isTaskLane(l) && (!seen || l.Limit < limit) {
				limit, seen = l.Limit, true
			}
		}
	}
	if counts == nil {
		return limit, true
	}
	room, seen := 0, false
	for i, l := range lanes {
		if isTaskLane(l) {
			continue
		}
		if r := l.Limit - counts[i]; !seen || r < room {
			room, seen = r, true
		}
	}
	if !seen { // only task lanes: they are all the call knows
		room = lanes[0].Limit - counts[0]
	}
	own := 1
	if user >= 0 {
		own = counts[user]
	}
	return max(1, min(limit, own+room)), true
}

// isTaskLane reports whether l counts one API task's calls.
func isTaskLane(l Lane) bool { return l.Spec != nil && l.Spec.Scope == policy.ScopeTask }

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
	a.out.RetryAfter, a.out.Spacing = refusalHints(a.cfg.RetryAfter, a.lanes, before, a.full, int(a.scope), a.g.holds)
}

// setBusyHints sets the hints of a call refused because the store was too
// busy to count it and no lane was found full: one call ahead in the scope
// lane (base seconds under the fixed policy, as before; the lane's spacing
// under the adaptive one).
func (a *Admission) setBusyHints() {
	if a.scope < 0 {
		a.out.RetryAfter, a.out.Spacing = a.cfg.RetryAfter.Base, 0
		return
	}
	before := make([]int, len(a.lanes))
	before[a.scope] = a.lanes[a.scope].Limit - a.lanes[a.scope].seats() + 1
	a.out.RetryAfter, a.out.Spacing = refusalHints(a.cfg.RetryAfter, a.lanes, before, laneSet(1)<<a.scope, int(a.scope), a.g.holds)
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
