//go:build faults

package faults

import (
	"context"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"
)

// floodCalls is how many calls one user sends at once.
const floodCalls = 400

// floodHold is how long the upstream keeps each admitted call: longer than
// the whole flood takes to arrive, so that exactly the limit runs at a
// time and no call is admitted into a place another one left.
const floodHold = 5 * time.Second

// floodOutcome is what one flood got.
type floodOutcome struct {
	byDecision map[string]int // 200s and 429s by decision
	other      int            // any other answer
	noRetry    int            // 429s without Retry-After
	peak       int            // the user's calls in the upstream at once
	upstream   int            // the user's calls the upstream ran
}

// flood sends floodCalls calls of user at once to base and waits for every
// answer.
func flood(t *testing.T, r *rig, base, user string) floodOutcome {
	t.Helper()
	r.up.reset()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		out   = floodOutcome{byDecision: map[string]int{}}
		start = make(chan struct{})
	)
	for range floodCalls {
		wg.Go(func() {
			<-start
			x := call(context.Background(), base, user, bulkSemantic, map[string]string{holdHeader: itoa(int(floodHold.Milliseconds()))})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case x.err == nil && x.status == http.StatusOK:
				out.byDecision[x.decision]++
			case x.err == nil && x.status == http.StatusTooManyRequests:
				out.byDecision[x.decision]++
				if x.header.Get("Retry-After") == "" {
					out.noRetry++
				}
			default:
				out.other++
				if out.other == 1 {
					t.Logf("first other answer: status %d err %v body %.200s", x.status, x.err, x.body)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	_, peak, calls := r.up.snapshot()
	out.peak, out.upstream = peak.User[user], calls
	return out
}

// TestS13Flood: one user floods a gateway with 400 calls at once. Exactly
// the user's limit runs at a time — the rest are refused 429 before they
// reach Redis, never let through uncounted — with Redis up, and with Redis
// SIGSTOPped, when the gateway's local lanes hold the per-user limit.
func TestS13Flood(t *testing.T) {
	figures := begin(t, 13)
	const limit = 2
	// Waiting off, as in scenarios 1, 2 and 9: the flood's extra calls are
	// refused at once, so a count of the admitted ones is the limit. (With
	// waiting on, up to wait.max_waiting_per_user of them queue and run
	// later, one slot at a time: the upstream peak is the same.)
	cfg := append(roomyConfig(), "per_user.preview="+itoa(limit), "per_user.early_access=0", "wait.max_seconds=0")
	r := newRig(t, rigOptions{Gateways: 1, DB: "s13", Config: cfg, Env: faultEnv})
	base := r.gws[0].url()

	check := func(phase string, o floodOutcome, want string, n int) {
		t.Helper()
		if o.byDecision[want] != n || o.upstream != n || o.peak != n {
			t.Errorf("%s: %d %s, upstream ran %d (peak %d at once); want exactly %d (decisions %v)",
				phase, o.byDecision[want], want, o.upstream, o.peak, n, o.byDecision)
		}
		if got := o.byDecision["refused"]; got != floodCalls-n || o.noRetry > 0 || o.other > 0 {
			t.Errorf("%s: %d refused (%d without Retry-After), %d other answers; want %d refused 429 with Retry-After",
				phase, got, o.noRetry, o.other, floodCalls-n)
		}
	}

	up := flood(t, r, base, "margaret") // preview: limit 2
	check("Redis up", up, "admitted", limit)
	paused := flood(t, r, base, "ken") // early_access: limit 0
	check("limit 0", paused, "admitted", 0)
	if _, err := lanesEmpty(t, r.rc, 3*time.Second); err != nil {
		t.Errorf("lanes after the floods: %v", err)
	}

	if err := r.redis.signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := flood(t, r, base, "margaret")
	if err := r.redis.signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	check("Redis stopped", stopped, "unavailable", limit)
	// A call's line is written when it is released, after its client
	// has the whole answer, and through the log's queue: wait for the
	// lines (a few ms; 5 s at most) before counting them.
	degraded := 0
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		degraded = 0
		for _, rec := range records(t, r.gws[0]) {
			if rec.Degraded && rec.Decision == "unavailable" {
				degraded++
			}
		}
		if degraded >= limit || time.Now().After(deadline) {
			break
		}
	}
	if degraded != limit {
		t.Errorf("Redis stopped: %d log lines unavailable with degraded:true, want %d", degraded, limit)
	}
	took, err := lanesEmpty(t, r.rc, 20*time.Second)
	if err != nil {
		t.Errorf("lanes after Redis came back: %v", err)
	}
	figures("1 gateway, one user sends %d calls at once (each held %v upstream) with per_user %d: Redis up: %d admitted, %d refused 429, %d other, upstream peak %d; limit 0: %d admitted, %d refused, %d reached the upstream; Redis SIGSTOPped: %d unavailable (degraded, local lanes), %d refused 429, %d other, upstream peak %d; lanes empty %v after",
		floodCalls, floodHold, limit, up.byDecision["admitted"], up.byDecision["refused"], up.other, up.peak,
		paused.byDecision["admitted"], paused.byDecision["refused"], paused.upstream,
		stopped.byDecision["unavailable"], stopped.byDecision["refused"], stopped.other, stopped.peak,
		took.Round(time.Millisecond))
}
