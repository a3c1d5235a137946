//go:build faults

package faults

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func init() {
	names[15] = "Redis restarts under a full waitlist"
	names[16] = "Redis stalls, then recovers"
}

// countsConfig is enforce with one call per user, two at once across the
// cluster, and a small waitlist that the load keeps full. Lease and
// renewal are the defaults (60 s, 20 s): a lease outlives a skip window.
func countsConfig() []string {
	return []string{"mode=enforce", "enforce_for=all", "api_heavy.cluster=2", "api_heavy.per_task=100",
		"reserve_single_row=0", "es2_knn=100",
		"tiers.staff=100", "tiers.core=100", "tiers.early_access=100", "tiers.preview=100",
		"per_user.staff=1", "per_user.core=1", "per_user.early_access=1", "per_user.preview=1",
		"wait.max_seconds=20", "wait.max_waiting=12", "wait.max_waiting_per_user=6"}
}

// pinnedLoad runs perUser clients for each of loadUsers, every user's on
// one gateway (user i on gateway i mod n: sticky routing; the degraded
// limits are per gateway), each sending held calls back to back until ctx
// ends, and returns their results.
func pinnedLoad(ctx context.Context, r *rig, perUser int, hold time.Duration) []result {
	var mu sync.Mutex
	var out []result
	var wg sync.WaitGroup
	for i, u := range loadUsers {
		g := r.gws[i%len(r.gws)]
		for range perUser {
			wg.Go(func() {
				for ctx.Err() == nil {
					cctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a bound
					x := call(cctx, g.url(), u, bulkSemantic, map[string]string{holdHeader: itoa(int(hold.Milliseconds()))})
					cancel()
					x.gw = i % len(r.gws)
					mu.Lock()
					out = append(out, x)
					mu.Unlock()
					if x.status != http.StatusOK {
						select { // refused or failed: a little later
						case <-ctx.Done():
						case <-time.After(200 * time.Millisecond):
						}
					}
				}
			})
		}
	}
	wg.Wait()
	return out
}

// uncounted counts the calls the gateways let through with nothing
// counting them: unavailable and not degraded (the local lanes did not
// count them either).
func uncounted(t testing.TB, gws []*gateway) int {
	t.Helper()
	n := 0
	for _, g := range gws {
		for _, rec := range records(t, g) {
			if rec.Decision == "unavailable" && !rec.Degraded {
				n++
			}
		}
	}
	return n
}

// overLimit reports the users whose peak of heavy calls at once at the
// upstream passed limit.
func overLimit(peak laneCounts, limit int) string {
	var over []string
	for u, n := range peak.User {
		if n > limit {
			over = append(over, fmt.Sprintf("%s at %d", u, n))
		}
	}
	sort.Strings(over)
	return strings.Join(over, ", ")
}

// byStatus summarises results for the figures.
func byStatus(res []result) string {
	c := count(res)
	return fmt.Sprintf("%d calls: %d ok, %d refused (429), %d other", c.calls, c.byStatus[200], c.byStatus[429],
		c.calls-c.byStatus[200]-c.byStatus[429])
}

// TestS15RedisRestartFullWaitlist: Redis dies and comes back empty while
// the waitlist is full; the waiters whose tickets vanished fall back to the
// degraded local limits (never "unavailable, go"), and once Redis is back
// the calls the local lanes admitted are written into it. No user ever
// has more than its one call at the upstream.
func TestS15RedisRestartFullWaitlist(t *testing.T) {
	figures := begin(t, 15)
	r := newRig(t, rigOptions{Gateways: 3, DB: "s15", Config: countsConfig(), Env: faultEnv})
	// Calls held 3 s: the waiters are queued across the restart, which is
	// quick enough (kill, then start at once) that their next pump finds
	// Redis back and their tickets gone.
	pre, down, post := 4*time.Second, time.Duration(0), duration(22*time.Second, 20*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), pre+down+post)
	defer cancel()
	done := make(chan []result, 1)
	go func() { done <- pinnedLoad(ctx, r, 3, 3*time.Second) }()
	full, err := waitFor(ctx, pre+2*time.Second, 20*time.Millisecond, func() error {
		n, err := queued(ctx, r.rc)
		if err != nil {
			return err
		}
		if n < 12 {
			return fmt.Errorf("%d of 12 tickets waiting", n)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("the waitlist never filled: %v", err)
	}
	time.Sleep(max(pre-full, 0))
	r.redis.kill()
	r.redis.start(t) // same port, empty
	res := <-done
	_, peak, _ := r.up.snapshot()
	if over := overLimit(peak, 1); over != "" {
		t.Errorf("users over their limit of 1 at the upstream: %s", over)
	}
	n := uncounted(t, r.gws)
	if n > 0 {
		t.Errorf("%d calls went through uncounted (unavailable, not degraded)", n)
	}
	dc, dr := degraded(t, r.gws)
	figures("3 gateways, 7 users × 3 clients each on one gateway (calls held 3 s), per_user 1, api_heavy 2, max_waiting 12 (full %v after the start); Redis kill -9 %v in, started again at once (empty): %s; %d decided by the local lanes (%d counted, %d refused), %d uncounted; peak per user at the upstream %d (limit 1), peak overall %d",
		full.Round(time.Millisecond), pre, byStatus(res), dc+dr, dc, dr, n, maxOf(peak.User), peak.Total)
}

// TestS16RedisStallThenRecover: Redis stops answering (SIGSTOP) and then
// comes back; while it stalls the local lanes decide, and once the skip
// window closes the calls they admitted are written into Redis before it
// decides again. No user ever has more than its one call at the upstream.
func TestS16RedisStallThenRecover(t *testing.T) {
	figures := begin(t, 16)
	r := newRig(t, rigOptions{Gateways: 3, DB: "s16", Config: countsConfig(), Env: faultEnv})
	pre, stall, post := 4*time.Second, duration(8*time.Second, 5*time.Second), skipWindow+6*time.Second
	ctx, cancel := context.WithTimeout(context.Background(), pre+stall+post)
	defer cancel()
	done := make(chan []result, 1)
	go func() { done <- pinnedLoad(ctx, r, 3, 800*time.Millisecond) }()
	time.Sleep(pre)
	if err := r.redis.signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(stall)
	if err := r.redis.signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	res := <-done
	_, peak, _ := r.up.snapshot()
	if over := overLimit(peak, 1); over != "" {
		t.Errorf("users over their limit of 1 at the upstream: %s", over)
	}
	n := uncounted(t, r.gws)
	if n > 0 {
		t.Errorf("%d calls went through uncounted (unavailable, not degraded)", n)
	}
	took, err := lanesEmpty(t, r.rc, 5*time.Second)
	if err != nil {
		t.Errorf("lanes after the load: %v", err)
	}
	dc, dr := degraded(t, r.gws)
	figures("3 gateways, 7 users × 3 clients each on one gateway, per_user 1, api_heavy 2, max_waiting 12; Redis SIGSTOP %v in for %v, then %v more: %s; %d decided by the local lanes (%d counted, %d refused), %d uncounted; peak per user at the upstream %d (limit 1), peak overall %d; lanes empty %v after",
		pre, stall, post, byStatus(res), dc+dr, dc, dr, n, maxOf(peak.User), peak.Total, took.Round(time.Millisecond))
}
