package memory_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/settings"
)

// TestFairWorkLeaseExpired: a call of fair work whose lease expired
// without a release (its holder never released nor renewed it) stops
// counting against its user when its lease does: user u's waiter is then
// served as if u had nothing running. As redis's
// TestFairWorkDeadGatewayMiniredis, on a fake clock: every call costs
// about 300 (the estimate learned from a call charged 300), so v's second
// ticket starts at 300; had the expired call kept counting (its seat ×
// 500 ms held so far), u's ticket would start past it.
func TestFairWorkLeaseExpired(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_700_000_000, 0)
	s := memory.New(func() time.Time { return now })
	const prefix = "fair"
	shared := prefix + ":api_heavy"
	seq := 0
	ticket := func(user string, lease time.Duration) capgate.Ticket {
		seq++
		return capgate.Ticket{Prefix: prefix, Token: "t" + string(rune('a'+seq)),
			Keys: []string{shared, prefix + ":user:" + user}, Limits: []int{2, 10}, UserID: user, UserLane: 2,
			Lease: lease, TicketLease: time.Minute, Claim: 30 * time.Second, MaxWaiting: 100, MaxPerUser: 50,
			Fair: settings.FairTime}
	}
	join := func(tk capgate.Ticket) capgate.JoinResult {
		t.Helper()
		res, err := s.Join(ctx, tk, make([]int, len(tk.Keys)))
		if err != nil {
			t.Fatalf("Join(%s): %v", tk.UserID, err)
		}
		return res
	}
	release := func(tk capgate.Ticket, cost int64) {
		t.Helper()
		if err := s.ReleaseWait(ctx, prefix, tk.Token, tk.Keys, capgate.Charge{User: tk.UserID, Cost: cost}); err != nil {
			t.Fatalf("ReleaseWait(%s): %v", tk.UserID, err)
		}
	}
	granted := func(tks ...capgate.Ticket) []string {
		members := memory.TestStore{Store: s}.Members(t, shared)
		var out []string
		for _, tk := range tks {
			if slices.Contains(members, tk.Token) {
				out = append(out, tk.UserID)
			}
		}
		return out
	}

	h0 := ticket("h", time.Minute)
	if res := join(h0); !res.Taken {
		t.Fatalf("h0: Join = %+v, want taken", res)
	}
	release(h0, 300) // every estimate is 300 from here
	u0 := ticket("u", 100*time.Millisecond)
	if res := join(u0); !res.Taken {
		t.Fatalf("u0: Join = %+v, want taken", res)
	}
	// u0 is never renewed nor released.
	h1 := ticket("h", time.Minute)
	if res := join(h1); !res.Taken {
		t.Fatalf("h1: Join = %+v, want taken", res)
	}
	now = now.Add(500 * time.Millisecond)
	h2 := ticket("h", time.Minute)
	if res := join(h2); !res.Taken {
		t.Fatalf("h2: Join = %+v, want taken (u0's lease expired)", res)
	}
	v1, v2, u1 := ticket("v", time.Minute), ticket("v", time.Minute), ticket("u", time.Minute)
	for _, tk := range []capgate.Ticket{v1, v2, u1} {
		if res := join(tk); !res.Queued {
			t.Fatalf("%s: Join = %+v, want queued", tk.UserID, res)
		}
	}
	release(h1, 300)
	if got := granted(v1, v2, u1); !slices.Equal(got, []string{"v"}) || !slices.Contains(memory.TestStore{Store: s}.Members(t, shared), v1.Token) {
		t.Fatalf("after h1's release, granted %v, want v's first", got)
	}
	release(h2, 300)
	if got := granted(v2, u1); !slices.Equal(got, []string{"u"}) {
		t.Errorf("after h2's release, granted %v, want u's (u's expired call stopped counting when its lease did)", got)
	}
}
