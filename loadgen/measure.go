package loadgen

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Utilization is the share of a lane's slot time that calls used: busy
// (the calls' summed time holding the lane) ÷ (limit × span). 1 means
// every slot was busy all the time; 0 when limit or span is not positive.
func Utilization(busy time.Duration, limit int, span time.Duration) float64 {
	if limit <= 0 || span <= 0 {
		return 0
	}
	return float64(busy) / (float64(limit) * float64(span))
}

// RoundRobinFinish returns when each user would finish if the lane's
// limit slots went round-robin across the users that still have calls
// (user i has calls[i]), every call taking hold: a user's round-robin
// share. A user with no calls finishes at 0.
func RoundRobinFinish(calls []int, limit int, hold time.Duration) []time.Duration {
	finish := make([]time.Duration, len(calls))
	if limit <= 0 {
		return finish
	}
	left := append([]int(nil), calls...)
	free := make([]time.Duration, limit) // when each slot frees
	next := 0                            // the user whose turn it is
	for {
		i := -1
		for k := range left { // the next user in turn with a call left
			if u := (next + k) % len(left); left[u] > 0 {
				i = u
				break
			}
		}
		if i < 0 {
			return finish
		}
		s := 0 // the slot that frees first
		for k := range free {
			if free[k] < free[s] {
				s = k
			}
		}
		free[s] += hold
		left[i]--
		finish[i] = max(finish[i], free[s])
		next = (i + 1) % len(left)
	}
}

// simBusy reads the busy time an upstream's stats endpoint reports.
func simBusy(ctx context.Context, url string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, fmt.Errorf("loadgen: upstream stats: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("loadgen: upstream stats: %w", err)
	}
	defer resp.Body.Close()
	var st struct {
		BusyMS *float64 `json:"busy_ms"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&st); err != nil || st.BusyMS == nil || resp.StatusCode != 200 {
		return 0, fmt.Errorf("loadgen: upstream stats %s: HTTP %d, want JSON with busy_ms", url, resp.StatusCode)
	}
	return time.Duration(*st.BusyMS * float64(time.Millisecond)), nil
}
