package client

import (
	"errors"
	"maps"
	"time"
)

// Stats are a Transport's counters since it was made, for a load report.
type Stats struct {
	Calls          int64            // heavy calls ended
	Attempts       int64            // requests sent
	Capacity429    map[string]int64 // capacity refusals by scope
	RateLimit429   int64            // other 429s
	Unavailable503 int64            // 503s
	Retries        int64            // error retries (dial failures, 503s, ambiguous failures with a key)
	Throttled      int64            // calls that ended with a *ThrottledError
	OutcomeUnknown int64            // calls that ended with ErrOutcomeUnknown
	Waited         time.Duration    // time calls were held back by pauses and backoffs
	Queued         time.Duration    // time calls waited for an in-flight slot
}

// Stats returns a copy of the counters. Safe for concurrent use.
func (t *Transport) Stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.stats
	st.Capacity429 = maps.Clone(t.stats.Capacity429)
	if st.Capacity429 == nil {
		st.Capacity429 = map[string]int64{}
	}
	return st
}

func (t *Transport) count(f func(*Stats)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f(&t.stats)
}

// countRefusal counts a 429 or 503 in res and the Transport's counters.
func (t *Transport) countRefusal(res *Result, r refusal) {
	switch r.kind {
	case Capacity:
		res.Capacity429++
	case RateLimit:
		res.RateLimit429++
	case Unavailable:
		res.Unavailable++
	}
	t.count(func(st *Stats) {
		switch r.kind {
		case Capacity:
			if st.Capacity429 == nil {
				st.Capacity429 = make(map[string]int64)
			}
			st.Capacity429[r.scope]++
		case RateLimit:
			st.RateLimit429++
		case Unavailable:
			st.Unavailable503++
		}
	})
}

// record counts a call that ended.
func (t *Transport) record(res *Result, err error) {
	t.count(func(st *Stats) {
		st.Calls++
		st.Waited += res.Waited
		st.Queued += res.Queued
		switch {
		case errors.Is(err, ErrThrottled):
			st.Throttled++
		case errors.Is(err, ErrOutcomeUnknown):
			st.OutcomeUnknown++
		}
	})
}
