package memory_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/settings"
)

// fairSim runs users' closed loops (each clients calls at once, each
// holding hold) on one lane of limit through a memory Store's waitlist on
// a fake clock: every call that ends is released with its charge, and its
// client joins again at once. It returns, over every stretch of time in
// which every user had a ticket waiting, the largest gap between two
// users' service (held seat-milliseconds, counting calls in flight as far
// as they ran), and the service each user got in all.
func fairSim(t *testing.T, by settings.FairBy, limit, clients int, hold []time.Duration, warm, steps int) (gap time.Duration, got []time.Duration) {
	t.Helper()
	ctx := context.Background()
	now := time.Unix(1_700_000_000, 0)
	s := memory.New(func() time.Time { return now })
	const prefix = "fair"
	keys := []string{prefix + ":lane"}
	type call struct {
		user       int
		token      string
		start, end time.Time
	}
	var running, queued []call
	seq := 0
	join := func(u int) {
		seq++
		tk := capgate.Ticket{Prefix: prefix, Token: fmt.Sprintf("t%d", seq), Keys: keys, Limits: []int{limit},
			UserID: fmt.Sprint("u", u), Lease: time.Hour, TicketLease: time.Hour, Claim: time.Hour,
			MaxWaiting: 1000, MaxPerUser: 1000, Fair: by}
		res, err := s.Join(ctx, tk, make([]int, 1))
		if err != nil {
			t.Fatal(err)
		}
		c := call{user: u, token: tk.Token, start: now, end: now.Add(hold[u])}
		switch {
		case res.Taken:
			running = append(running, c)
		case res.Queued:
			queued = append(queued, c)
		default:
			t.Fatalf("Join = %+v", res)
		}
	}
	// granted moves the queued calls the store granted to running.
	granted := func() {
		members := memory.TestStore{Store: s}.Members(t, keys[0])
		queued = slices.DeleteFunc(queued, func(c call) bool {
			if !slices.Contains(members, c.token) {
				return false
			}
			c.start, c.end = now, now.Add(hold[c.user])
			running = append(running, c)
			return true
		})
	}
	for u := range hold {
		for range clients {
			join(u)
		}
	}
	done := make([]time.Duration, len(hold))
	service := func(u int) time.Duration {
		d := done[u]
		for _, c := range running {
			if c.user == u {
				d += now.Sub(c.start)
			}
		}
		return d
	}
	backlogged := func() bool {
		for u := range hold {
			if !slices.ContainsFunc(queued, func(c call) bool { return c.user == u }) {
				return false
			}
		}
		return true
	}
	// Over a stretch where all are backlogged, the gap between users u
	// and v over any part of it is at most max(D) − min(D) of D = W_u −
	// W_v, checked at every event (D is piecewise linear between them).
	type span struct{ lo, hi time.Duration }
	var spans []span // per pair (u, v), u < v
	reset := func() {
		spans = spans[:0]
		for u := range hold {
			for v := u + 1; v < len(hold); v++ {
				d := service(u) - service(v)
				spans = append(spans, span{d, d})
			}
		}
	}
	observe := func() {
		if !backlogged() {
			spans = nil
			return
		}
		if spans == nil {
			reset()
		}
		i := 0
		for u := range hold {
			for v := u + 1; v < len(hold); v++ {
				d := service(u) - service(v)
				spans[i].lo, spans[i].hi = min(spans[i].lo, d), max(spans[i].hi, d)
				gap = max(gap, spans[i].hi-spans[i].lo)
				i++
			}
		}
	}
	for step := range steps {
		if step < warm {
			spans = nil // (not yet observed)
		} else {
			observe()
		}
		i := 0
		for j, c := range running {
			if c.end.Before(running[i].end) {
				i = j
			}
		}
		c := running[i]
		now = c.end
		if step >= warm {
			observe()
		}
		running = slices.Delete(running, i, i+1)
		held := now.Sub(c.start)
		done[c.user] += held
		if err := s.ReleaseWait(ctx, prefix, c.token, keys, capgate.Charge{User: fmt.Sprint("u", c.user), Cost: held.Milliseconds()}); err != nil {
			t.Fatal(err)
		}
		granted()
		join(c.user)
		if len(running) > limit {
			t.Fatalf("%d calls hold a lane of limit %d", len(running), limit)
		}
	}
	return gap, done
}

// TestFairTimeBound: two users always backlogged on one lane, one of
// calls 10× the other's. By time each gets half the lane, and once each
// user's estimate has learned its calls' cost (after a warm-up), the gap
// between their service over any stretch in which both wait stays within
// the bound docs/ARCHITECTURE.md states: (limit + 1) × (C_a + C_b), C_u
// the cost of u's longest call (SFQ's C_a + C_b, and VTC's 2 × the
// largest, on one server). By calls the long calls' user gets about
// 10/11 of the time.
func TestFairTimeBound(t *testing.T) {
	hold := []time.Duration{100 * time.Millisecond, 10 * time.Millisecond}
	for _, c := range []struct{ limit, clients int }{{1, 4}, {2, 4}, {4, 8}} {
		gap, got := fairSim(t, settings.FairTime, c.limit, c.clients, hold, 200, 4000)
		share := float64(got[0]) / float64(got[0]+got[1])
		if share < 0.45 || share > 0.55 {
			t.Errorf("limit %d: by time the long calls' user got %.3f of the lane (%v against %v), want about half",
				c.limit, share, got[0], got[1])
		}
		bound := time.Duration(c.limit+1) * (hold[0] + hold[1])
		if gap > bound {
			t.Errorf("limit %d, %d calls at once each: the service gap reached %v, over the bound %v", c.limit, c.clients, gap, bound)
		}
		t.Logf("limit %d, %d calls at once each: share %.3f, largest gap %v (bound %v)", c.limit, c.clients, share, gap, bound)
	}
	_, got := fairSim(t, settings.FairCalls, 2, 4, hold, 0, 4000)
	if share := float64(got[0]) / float64(got[0]+got[1]); share < 0.85 {
		t.Errorf("by calls: the long calls' user got %.3f of the lane, want about 10/11 (fair in calls)", share)
	}
}
