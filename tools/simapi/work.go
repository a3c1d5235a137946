package simapi

import (
	"context"
	"io"
	"net/http"
	"time"
)

// work plays a heavy call's time in the API: past a knee, n calls running,
// a failure (503 after the knee's delay); else a hold until released, or
// latency() (slowed by the knee). It reports whether the call goes on to
// its answer: false when it was answered here or its client went away.
func work(w http.ResponseWriter, r *http.Request, k *Knee, n int, failed bool, hold <-chan struct{}, latency func() time.Duration) bool {
	if failed {
		if k.Thrash > 0 {
			// Timed out by the overloaded API, the call still took its
			// share of it until then: work done and thrown away.
			ctx, cancel := context.WithTimeout(r.Context(), k.failAfter())
			k.run(ctx, latency())
			cancel()
			if r.Context().Err() != nil {
				return false
			}
		} else if !sleep(r.Context(), k.failAfter()) {
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, overloaded)
		return false
	}
	if hold != nil {
		select {
		case <-hold:
			return true
		case <-r.Context().Done():
			return false
		}
	}
	d := latency()
	if k != nil && k.Thrash > 0 {
		return k.run(r.Context(), d) // shared among the calls running (thrash.go)
	}
	if k != nil {
		d = k.slow(d, n)
	}
	return sleep(r.Context(), d)
}

// sleep waits d, or until ctx ends (false).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
