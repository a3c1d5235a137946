package loadgen

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/capgate/capgate/client"
)

// The clients loadgen can drive the gateway with (Config.Client).
const (
	// ClientAware is the capacity-aware client (package client): one
	// Transport shared by every user. The default.
	ClientAware = "aware"
	// ClientPlain sends each call once and never retries: a 429 is a
	// failed row.
	ClientPlain = "plain"
	// ClientRetryAfter follows the Mapper web client's rules: a 429 waits
	// Retry-After (at least 1 s; 5 s doubling to 60 s without one) plus
	// 0–50 % jitter and pauses the user's other calls (one gate per user,
	// like one per browser tab) for Retry-After; 502/503/504 and network
	// errors are retried twice after 3 s × 4ⁿ ± 25 %; a call gives up
	// (throttled) when its waits would pass 30 min.
	ClientRetryAfter = "retry-after"
)

// The Mapper's constants for ClientRetryAfter.
const (
	mapperMinDelay    = time.Second
	mapperBackoff     = 5 * time.Second
	mapperMaxBackoff  = 60 * time.Second
	mapperBudget      = 30 * time.Minute
	mapperErrBackoff  = 3 * time.Second
	mapperMaxRetries  = 2
	mapperMaxErrDelay = 60 * time.Second
)

// meter is the RoundTripper under every client: it counts 429s and sums
// the time of every heavy call the API answered with success — the time
// the call held its lanes, as the client sees it.
type meter struct {
	base     http.RoundTripper
	decision string // the policy's Decision header

	mu     sync.Mutex
	busy   time.Duration // requires mu held
	served int           // requires mu held
	n429   int           // requires mu held
	// decisions counts the gateway's Decision header answers;
	// requires mu held.
	decisions map[string]int
}

func (m *meter) RoundTrip(req *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := m.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	d := time.Since(start)
	m.mu.Lock()
	if dec := resp.Header.Get(m.decision); dec != "" {
		if m.decisions == nil {
			m.decisions = map[string]int{}
		}
		m.decisions[dec]++
	}
	switch {
	case resp.StatusCode == http.StatusTooManyRequests:
		m.n429++
	case resp.StatusCode < 300:
		m.busy += d
		m.served++
	}
	m.mu.Unlock()
	return resp, nil
}

func (m *meter) totals() (busy time.Duration, served, n429 int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.busy, m.served, m.n429
}

// decided returns a copy of the decisions counted.
func (m *meter) decided() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.decisions)
}

// errThrottled marks a call the retry-after client gave up on.
var errThrottled = fmt.Errorf("the server stayed busy past the wait budget: %w", client.ErrThrottled)

// tabGate is the Mapper's per-tab gate: when the user's calls may send
// again. A pause never shortens.
type tabGate struct {
	mu       sync.Mutex
	resumeAt time.Time // requires mu held
}

func (g *tabGate) pause(d time.Duration, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if t := now.Add(d); t.After(g.resumeAt) {
		g.resumeAt = t
	}
}

func (g *tabGate) remaining(now time.Time) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.resumeAt.Sub(now)
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sendPlain sends the call once.
func (r *run) sendPlain(newReq func() (*http.Request, error)) (int, error) {
	req, err := newReq()
	if err != nil {
		return 0, err
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// sendRetryAfter sends the call as the Mapper does and returns the final
// status and the time waited.
func (r *run) sendRetryAfter(ctx context.Context, u *userRun, rng *rand.Rand, newReq func() (*http.Request, error)) (int, time.Duration, error) {
	var waited time.Duration
	wait := func(d time.Duration) error {
		waited += d
		return sleepCtx(ctx, d)
	}
	n429, nErr := 0, 0
	for {
		// The tab's gate: wait out a pause, then jitter on the pause seen.
		for {
			p := u.gate.remaining(time.Now())
			if p <= 0 {
				break
			}
			if p > mapperBudget-waited {
				return http.StatusTooManyRequests, waited, errThrottled
			}
			if err := wait(p); err != nil {
				return 0, waited, err
			}
			if err := wait(min(time.Duration(rng.Float64()*0.5*float64(p)), mapperBudget-waited)); err != nil {
				return 0, waited, err
			}
		}
		req, err := newReq()
		if err != nil {
			return 0, waited, err
		}
		resp, err := r.hc.Do(req)
		if err != nil {
			if ctx.Err() != nil || nErr >= mapperMaxRetries {
				return 0, waited, err
			}
			if err := wait(errorDelay(nErr, rng)); err != nil {
				return 0, waited, err
			}
			nErr++
			continue
		}
		ra, known := retryAfter(resp)
		status := resp.StatusCode
		switch {
		case status == http.StatusTooManyRequests:
			base := max(ra, mapperMinDelay)
			if !known {
				base = min(mapperBackoff<<min(n429, 4), mapperMaxBackoff)
				n429++
			}
			d := time.Duration(float64(base) * (1 + 0.5*rng.Float64()))
			if waited+d > mapperBudget {
				return status, waited, errThrottled // gives up alone, without pausing the tab
			}
			u.gate.pause(base, time.Now())
			if err := wait(d); err != nil {
				return 0, waited, err
			}
			continue
		case (status == 502 || status == 503 || status == 504) && nErr < mapperMaxRetries:
			d := errorDelay(nErr, rng)
			if known {
				d = time.Duration(float64(min(ra, mapperMaxErrDelay)) * (1 + 0.5*rng.Float64()))
			}
			nErr++
			if err := wait(d); err != nil {
				return 0, waited, err
			}
			continue
		}
		return status, waited, nil
	}
}

// errorDelay is the Mapper's wait before error retry n: 3 s × 4ⁿ ± 25 %.
func errorDelay(n int, rng *rand.Rand) time.Duration {
	return time.Duration(float64(mapperErrBackoff<<(2*n)) * (0.75 + 0.5*rng.Float64()))
}

// retryAfter reads a response's delay as the Mapper does, and closes the
// body: the Retry-After header in seconds (a valid but negative or
// malformed one gives none, without looking at the body); when the header
// is absent, the body's retry_after if it is a JSON number ≥ 0.
func retryAfter(resp *http.Response) (time.Duration, bool) {
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if h := strings.TrimSpace(resp.Header.Get("Retry-After")); h != "" {
		f, err := strconv.ParseFloat(h, 64)
		if err != nil || f < 0 {
			if t, err := http.ParseTime(h); err == nil {
				return max(time.Until(t), 0), true
			}
			return 0, false
		}
		return time.Duration(f * float64(time.Second)), true
	}
	var body struct {
		RetryAfter json.RawMessage `json:"retry_after"`
	}
	if json.Unmarshal(b, &body) != nil || len(body.RetryAfter) == 0 || body.RetryAfter[0] == '"' {
		return 0, false
	}
	var f float64
	if json.Unmarshal(body.RetryAfter, &f) != nil || f < 0 {
		return 0, false
	}
	return time.Duration(f * float64(time.Second)), true
}

// statusError turns a final status into the call's error; nil for success.
func statusError(kind string, status int) error {
	if status >= 400 {
		return fmt.Errorf("%s: HTTP %d", kind, status)
	}
	return nil
}
