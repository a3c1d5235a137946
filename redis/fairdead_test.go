package redis_test

import (
	"slices"
	"testing"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/lanetest"
	"github.com/capgate/capgate/redis"
	"github.com/capgate/capgate/settings"
)

// TestFairWorkDeadGatewayMiniredis: a call of fair work whose gateway died
// stops counting against its user when its lease expires (miniredis, its
// clock moved as the scripts read it: TIME and the TTLs).
func TestFairWorkDeadGatewayMiniredis(t *testing.T) {
	m, b := openMini(t)
	a := openHarness(t, "redis://"+m.Addr())
	now := time.Now()
	m.SetTime(now)
	fairDeadGateway(t, a, b, func(d time.Duration) {
		now = now.Add(d)
		m.SetTime(now)
		m.FastForward(d)
	})
}

// TestFairWorkDeadGatewayRealRedis is the same on a real Redis, whose
// clock can't be moved: the test waits for it.
func TestFairWorkDeadGatewayRealRedis(t *testing.T) {
	url := redis.RealRedisURL(t)
	a, b := openHarness(t, url), openHarness(t, url)
	fairDeadGateway(t, a, b, func(d time.Duration) {
		until := b.now(t) + d.Milliseconds()
		for b.now(t) < until {
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// TestFairWorkDeadGatewayCluster is the same on a real Redis Cluster: the
// record's lane key, which the scripts read outside their KEYS, is in
// the prefix's slot.
func TestFairWorkDeadGatewayCluster(t *testing.T) {
	seeds := redis.RealRedisCluster(t)
	a, b := openClusterHarness(t, seeds, redis.Options{}), openClusterHarness(t, seeds, redis.Options{})
	fairDeadGateway(t, a, b, func(d time.Duration) {
		until := b.now(t) + d.Milliseconds()
		for b.now(t) < until {
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// fairDeadGateway: gateway a takes a call of user u (fairness by time,
// lease 100 ms) and dies: its lease is never renewed nor released. Once
// the lease has expired (advance moves the scripts' clock 500 ms), u's
// call no longer runs: gateway b's waiters of u and v are served as if u
// had nothing running. Every call costs about 300 (the estimate learned
// from a call charged 300), so v's second ticket starts at 300; had the
// dead call kept counting (its seat × 500 ms held so far), u's ticket
// would start past it.
func fairDeadGateway(t *testing.T, a, b harness, advance func(time.Duration)) {
	ctx := t.Context()
	prefix := lanetest.NewPrefix() + "ocl"
	shared := prefix + ":api_heavy"
	ticket := func(user string, lease time.Duration) capgate.Ticket {
		return capgate.Ticket{Prefix: prefix, Token: lanetest.NewToken(),
			Keys: []string{shared, prefix + ":user:" + user}, Limits: []int{2, 10}, UserID: user, UserLane: 2,
			Lease: lease, TicketLease: time.Minute, Claim: 30 * time.Second, MaxWaiting: 100, MaxPerUser: 50,
			Fair: settings.FairTime}
	}
	join := func(s harness, tk capgate.Ticket) capgate.JoinResult {
		t.Helper()
		res, err := s.Join(ctx, tk, make([]int, len(tk.Keys)))
		if err != nil {
			t.Fatalf("Join(%s): %v", tk.UserID, err)
		}
		return res
	}
	release := func(tk capgate.Ticket, cost int64) {
		t.Helper()
		if err := b.ReleaseWait(ctx, prefix, tk.Token, tk.Keys, capgate.Charge{User: tk.UserID, Cost: cost}); err != nil {
			t.Fatalf("ReleaseWait(%s): %v", tk.UserID, err)
		}
	}
	granted := func(tks ...capgate.Ticket) []string {
		members := b.Members(t, shared)
		var out []string
		for _, tk := range tks {
			if slices.Contains(members, tk.Token) {
				out = append(out, tk.UserID)
			}
		}
		return out
	}

	h0 := ticket("h", time.Minute)
	if res := join(b, h0); !res.Taken {
		t.Fatalf("h0: Join = %+v, want taken", res)
	}
	release(h0, 300) // every estimate is 300 from here
	u0 := ticket("u", 100*time.Millisecond)
	if res := join(a, u0); !res.Taken {
		t.Fatalf("u0 on gateway a: Join = %+v, want taken", res)
	}
	// Gateway a dies: u0 is never renewed nor released.
	h1 := ticket("h", time.Minute)
	if res := join(b, h1); !res.Taken {
		t.Fatalf("h1: Join = %+v, want taken", res)
	}
	advance(500 * time.Millisecond)
	h2 := ticket("h", time.Minute)
	if res := join(b, h2); !res.Taken {
		t.Fatalf("h2: Join = %+v, want taken (u0's lease expired)", res)
	}
	v1, v2, u1 := ticket("v", time.Minute), ticket("v", time.Minute), ticket("u", time.Minute)
	for _, tk := range []capgate.Ticket{v1, v2, u1} {
		if res := join(b, tk); !res.Queued {
			t.Fatalf("%s: Join = %+v, want queued", tk.UserID, res)
		}
	}
	release(h1, 300)
	if got := granted(v1, v2, u1); !slices.Equal(got, []string{"v"}) || !slices.Contains(b.Members(t, shared), v1.Token) {
		t.Fatalf("after h1's release, granted %v, want v's first", got)
	}
	release(h2, 300)
	if got := granted(v2, u1); !slices.Equal(got, []string{"u"}) {
		t.Errorf("after h2's release, granted %v, want u's (u's dead call stopped counting when its lease expired)", got)
	}
	// The dead call's record is gone (it charged nothing past its lease).
	if n, err := b.raw.HExists(ctx, prefix+":wait:r", u0.Token).Result(); err != nil || n {
		t.Errorf("the dead call's running record: present %v (%v), want gone", n, err)
	}
}
