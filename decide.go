package capgate

import "errors"

// The pure part of a decision: which lanes are full, which one is reported,
// how long to wait and how many calls to keep in flight. No I/O here.

// enforces reports whether a full lane refuses call under c: in enforce,
// for every call or only for capacity-aware ones (enforce_for).
func (c Config) enforces(call Call) bool {
	return c.Mode == ModeEnforce && (c.EnforceFor == EnforceAll || call.Aware)
}

// laneSet is a set of lane indexes; a call has at most five lanes.
type laneSet uint8

func (s laneSet) has(i int) bool { return s&(1<<i) != 0 }
func (s laneSet) empty() bool    { return s == 0 }

// decide returns the decision of a call whose lanes full were full before
// it, given whether the store took its leases. A store that took none
// though no lane was full broke its contract: that is an error, and the
// call is counted as unavailable.
func decide(full laneSet, taken bool) (Decision, error) {
	switch {
	case full.empty() && !taken:
		return DecisionNone, errors.New("the store took no lease though no lane was full")
	case full.empty():
		return DecisionAdmitted, nil
	case taken:
		return DecisionShadowRefused, nil
	default:
		return DecisionRefused, nil
	}
}

// fullLanes returns the lanes whose count before the call reached their
// limit; a limit of 0 is always full.
func fullLanes(lanes []Lane, before []int) laneSet {
	var s laneSet
	for i, l := range lanes {
		if before[i] >= l.Limit {
			s |= 1 << i
		}
	}
	return s
}

// scopeOf returns the lane reported for a refusal: the first full lane
// whose limit is 0 (a paused lane wins), else the first full lane; -1 when
// none is full.
func scopeOf(lanes []Lane, full laneSet) int {
	first := -1
	for i, l := range lanes {
		if !full.has(i) {
			continue
		}
		if l.Limit == 0 {
			return i
		}
		if first < 0 {
			first = i
		}
	}
	return first
}

// retryAfterSeconds returns Retry-After for a call that found lanes full:
// retry_after.paused if any full lane is paused, else base × the most calls
// ahead in a full lane (count before − limit + 1), capped at max.
func retryAfterSeconds(ra RetryAfter, lanes []Lane, before []int, full laneSet) int {
	ahead := 0
	for i, l := range lanes {
		if !full.has(i) {
			continue
		}
		if l.Limit == 0 {
			return ra.Paused
		}
		ahead = max(ahead, before[i]-l.Limit+1)
	}
	return min(ra.Max, ra.Base*ahead)
}

// suggestedConcurrency returns how many calls the user should keep in
// flight now, given the counts including this call (nil when
// unknown); ok is false when the call has no lanes.
func suggestedConcurrency(lanes []Lane, counts []int) (n int, ok bool) {
	if len(lanes) == 0 {
		return 0, false
	}
	user := lanes[len(lanes)-1] // the user lane is always last
	for _, l := range lanes {
		if l.Limit == 0 {
			return 0, true
		}
	}
	if counts == nil {
		return user.Limit, true
	}
	room, seen := 0, false
	for i, l := range lanes {
		if l.Name == LaneTask {
			continue // the task lane says nothing about what the user may send
		}
		if r := l.Limit - counts[i]; !seen || r < room {
			room, seen = r, true
		}
	}
	return max(1, min(user.Limit, counts[len(lanes)-1]+room)), true
}
