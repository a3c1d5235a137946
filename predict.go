package capgate

import (
	"context"
	"math"
	"time"
)

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
