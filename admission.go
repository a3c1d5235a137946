package capgate

import (
	"context"
	"net/http"
	"strconv"
	"time"
)

// The capacity headers.
const (
	HeaderDecision            = "X-OCL-Capacity-Decision"
	HeaderLimit               = "X-OCL-Capacity-Limit"
	HeaderInFlight            = "X-OCL-Capacity-In-Flight"
	HeaderTier                = "X-OCL-Capacity-Tier"
	HeaderTierLimit           = "X-OCL-Capacity-Tier-Limit"
	HeaderTierInFlight        = "X-OCL-Capacity-Tier-In-Flight"
	HeaderSuggestedConcurrent = "X-OCL-Capacity-Suggested-Concurrency"
	HeaderSuggestedSpacing    = "X-OCL-Capacity-Suggested-Spacing-Ms"
)

// ExposedHeaders lists the headers a browser must be allowed to read on a
// gated response: the capacity headers (the waited time and the suggested
// spacing included) and Retry-After.
func ExposedHeaders() []string {
	return []string{HeaderDecision, HeaderLimit, HeaderInFlight, HeaderTier,
		HeaderTierLimit, HeaderTierInFlight, HeaderSuggestedConcurrent, HeaderSuggestedSpacing, HeaderWaited, "Retry-After"}
}

// Release stops renewing, gives back the leases and writes the log line.
// It is idempotent and never fails; cleanup runs even when ctx is done
// (bounded by the store's deadline).
func (a *Admission) Release(ctx context.Context) {
	if a == nil {
		return
	}
	a.mu.Lock()
	if a.released {
		a.mu.Unlock()
		return
	}
	a.released = true
	a.finished = a.g.now()
	a.heldMS = -1
	if a.taken || a.local {
		a.heldMS = a.finished.Sub(a.start).Milliseconds()
	}
	a.mu.Unlock()

	g := a.g
	// Each step runs whatever happened in the one before it.
	if a.renewCtx != nil {
		g.rn.remove(a)
	}
	if a.taken {
		a.releaseLeases(ctx)
		a.observeHold()
	}
	if a.local {
		a.releaseLocal(ctx)
	}
	if a.decision != DecisionNone {
		a.emit()
	}
	if g.Observer != nil {
		g.Observer.Released(a)
	}
}

func (a *Admission) releaseLeases(ctx context.Context) {
	g := a.g
	defer func() {
		if r := recover(); r != nil {
			a.setErr("release: internal error")
		}
	}()
	// A release that can't be done now is retried in the background until
	// done or the leases expire, lease_seconds from now at the latest.
	lease := time.Duration(a.cfg.LeaseSeconds) * time.Second
	if g.skipping() {
		g.storeSkipped("release")
		a.mu.Lock()
		if a.err == "" {
			a.err = ErrTextReleaseSkipped
		}
		a.mu.Unlock()
		g.retryRelease(a.token, a.keys, lease)
		return
	}
	deadline := g.StoreDeadline
	if deadline <= 0 {
		deadline = DefaultStoreDeadline
	}
	// The client may be gone; the leases must still be given back.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), deadline)
	defer cancel()
	if err := a.releaseStore(rctx); err != nil {
		g.storeFailed("release", err)
		a.setErr(err.Error())
		g.retryRelease(a.token, a.keys, lease)
	}
}

func (a *Admission) emit() {
	defer func() { _ = recover() }() // a failing log line never fails the call
	rec := a.Record()
	line := rec.AppendJSON(make([]byte, 0, 512))
	if h := a.g.hooks; h != nil && h.emit != nil {
		_ = h.emit(line)
		return
	}
	if a.g.Sink != nil {
		_ = a.g.Sink.Emit(line)
	}
}

// Decision returns the admission's decision.
func (a *Admission) Decision() Decision { return a.decision }

// Refused reports whether the call must be answered with the 429 and never
// reach the API.
func (a *Admission) Refused() bool { return a.decision == DecisionRefused }

// Enforced reports whether a full lane would refuse this call.
func (a *Admission) Enforced() bool { return a.enforced }

// Holding reports whether the call took leases in the store (not in the
// local lanes alone: see Counted).
func (a *Admission) Holding() bool { return a.taken }

// Call returns the call as admitted.
func (a *Admission) Call() Call { return a.call }

// Lanes returns the call's lanes (nil when none were planned).
func (a *Admission) Lanes() []Lane { return a.lanes }

// Counts returns each lane's count as this call saw it (count before, +1
// if it took the lease); nil when unknown.
func (a *Admission) Counts() []int { return a.counts }

// RetryAfter returns the Retry-After seconds for a refused or
// shadow-refused call; ok is false otherwise.
func (a *Admission) RetryAfter() (seconds int, ok bool) {
	return a.retry, a.retry > 0 && (a.decision == DecisionRefused || a.decision == DecisionShadowRefused)
}

// Scope returns the lane reported for a refusal; "" when no lane
// was full.
func (a *Admission) Scope() LaneName {
	if a.scope < 0 {
		return ""
	}
	return a.lanes[a.scope].Name
}

// Suggested returns the suggested concurrency; ok is false when the call
// has no lanes.
func (a *Admission) Suggested() (n int, ok bool) {
	return suggestedConcurrency(a.lanes, a.counts)
}

// Err returns the error recorded on the call, "" when none.
func (a *Admission) Err() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// Held returns how long the call held its leases; ok is false until it
// is released, and for a call that held none.
func (a *Admission) Held() (d time.Duration, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.released || a.heldMS < 0 {
		return 0, false
	}
	return time.Duration(a.heldMS) * time.Millisecond, true
}

// LeaseLost reports whether a renewal found a lease gone.
func (a *Admission) LeaseLost() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.leaseLost
}

func (a *Admission) lane(name LaneName) int {
	for i, l := range a.lanes {
		if l.Name == name {
			return i
		}
	}
	return -1
}

// SetHeaders sets the capacity headers on h: every value that is
// known, and Retry-After only on the gate's own refusal.
func (a *Admission) SetHeaders(h http.Header) {
	if a == nil || h == nil {
		return
	}
	h.Set(HeaderDecision, string(a.decision))
	if i := a.lane(LaneAPIHeavy); i >= 0 {
		h.Set(HeaderLimit, strconv.Itoa(a.lanes[i].Limit))
		if a.counts != nil {
			h.Set(HeaderInFlight, strconv.Itoa(a.counts[i]))
		}
	}
	if a.call.Tier != "" {
		h.Set(HeaderTier, string(a.call.Tier))
	}
	if i := a.lane(LaneTier); i >= 0 {
		h.Set(HeaderTierLimit, strconv.Itoa(a.lanes[i].Limit))
		if a.counts != nil {
			h.Set(HeaderTierInFlight, strconv.Itoa(a.counts[i]))
		}
	}
	if n, ok := a.Suggested(); ok {
		h.Set(HeaderSuggestedConcurrent, strconv.Itoa(n))
	}
	if d, ok := a.Waited(); ok {
		h.Set(HeaderWaited, strconv.FormatInt(d.Milliseconds(), 10))
	}
	if ms, ok := a.SpacingMS(); ok {
		h.Set(HeaderSuggestedSpacing, strconv.FormatInt(ms, 10))
	}
	// Only the gate's own refusal gets its Retry-After; one the API sent
	// itself (its rate limit, a 503) is left alone.
	if s, ok := a.RetryAfter(); ok && a.decision == DecisionRefused {
		h.Set("Retry-After", strconv.Itoa(s))
	}
}

// RefusalBody returns the JSON body of the 429; nil unless the
// call was refused.
func (a *Admission) RefusalBody() []byte {
	if a == nil || a.decision != DecisionRefused {
		return nil
	}
	scope, paused := a.Scope(), false
	if a.scope >= 0 {
		paused = a.lanes[a.scope].Limit == 0
	}
	return refusalBody(scope, paused, a.retry)
}

// Record returns the call's log record. Its timestamp and held_ms are set
// once the call is released.
func (a *Admission) Record() Record {
	r := Record{
		Decision:       a.decision,
		Mode:           a.cfg.Mode,
		Enforced:       a.enforced,
		Endpoint:       a.call.Endpoint,
		Semantic:       a.call.Semantic,
		Reranker:       a.call.Reranker,
		Rows:           a.call.Rows,
		SingleRow:      a.call.SingleRow(),
		Tier:           a.call.Tier,
		UserID:         a.call.UserID,
		Scope:          string(a.Scope()),
		Task:           a.g.TaskID,
		RequestSource:  a.call.RequestSource,
		AlgorithmID:    a.call.AlgorithmID,
		AutomatchRunID: a.call.AutomatchRunID,
		CID:            a.call.CID,
	}
	for i, l := range a.lanes {
		if a.full.has(i) {
			r.Full = append(r.Full, string(l.Name))
		}
		limit := l.Limit
		var inFlight *int
		if a.counts != nil {
			inFlight = &a.counts[i]
		}
		switch l.Name {
		case LaneAPIHeavy:
			r.InFlight, r.Limit = inFlight, &limit
		case LaneTask:
			r.TaskInFlight, r.TaskLimit = inFlight, &limit
		case LaneES2KNN:
			r.ES2KNNInFlight, r.ES2KNNLimit = inFlight, &limit
		case LaneTier:
			r.TierInFlight, r.TierLimit = inFlight, &limit
		case LaneUser:
			r.UserInFlight, r.UserLimit = inFlight, &limit
		}
	}
	if n, ok := a.Suggested(); ok {
		r.Suggested = &n
	}
	if s, ok := a.RetryAfter(); ok {
		r.RetryAfter = &s
	}
	if a.call.HasQueueMS {
		q := a.call.QueueMS
		r.QueueMS = &q
	}
	if d, ok := a.Waited(); ok {
		w := d.Milliseconds()
		r.WaitMS = &w
	}
	a.mu.Lock()
	r.Error, r.LeaseLost, r.TS = a.err, a.leaseLost, a.finished
	r.Degraded = a.degraded
	if a.released && a.heldMS >= 0 {
		h := a.heldMS
		r.HeldMS = &h
	}
	a.mu.Unlock()
	return r
}
