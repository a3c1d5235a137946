package memory_test

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/lanetest"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/mock"
)

func TestStore(t *testing.T) {
	lanetest.RunStore(t, func(t testing.TB) lanetest.Store {
		return memory.TestStore{Store: memory.New(nil)}
	})
}

func TestZeroValue(t *testing.T) {
	lanetest.RunStore(t, func(t testing.TB) lanetest.Store {
		return memory.TestStore{Store: new(memory.Store)}
	})
}

func newFake(t *testing.T) (memory.TestStore, *mock.Clock) {
	t.Helper()
	c := mock.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	return memory.TestStore{Store: memory.New(c.Now)}, c
}

func mustAcquire(t *testing.T, s *memory.Store, req capgate.AcquireRequest) (bool, []int) {
	t.Helper()
	counts := make([]int, len(req.Keys))
	taken, err := s.Acquire(t.Context(), req, counts)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	return taken, counts
}

func TestLeaseExpiresByTheStoreClock(t *testing.T) {
	s, clock := newFake(t)
	keys := []string{"lane"}
	req := capgate.AcquireRequest{Token: lanetest.NewToken(), Keys: keys, Limits: []int{1}, Lease: time.Minute}
	if taken, _ := mustAcquire(t, s.Store, req); !taken {
		t.Fatal("first acquire not taken")
	}

	clock.Advance(time.Minute - time.Millisecond)
	other := req
	other.Token = lanetest.NewToken()
	if taken, counts := mustAcquire(t, s.Store, other); taken || counts[0] != 1 {
		t.Fatalf("acquire before the lease ends = %v, %v; want false, [1]", taken, counts)
	}

	clock.Advance(time.Millisecond) // expiry ≤ now: expired
	if taken, counts := mustAcquire(t, s.Store, other); !taken || counts[0] != 0 {
		t.Fatalf("acquire once the lease ended = %v, %v; want true, [0]", taken, counts)
	}
	if got := s.Members(t, "lane"); !slices.Equal(got, []string{other.Token}) {
		t.Errorf("members = %v, want only %s", got, other.Token)
	}
}

func TestLaneGoesWithItsTTL(t *testing.T) {
	s, clock := newFake(t)
	tok := lanetest.NewToken()
	s.SetLease(t, "lane", tok, time.Hour) // outlives the key
	s.SetTTL(t, "lane", time.Minute)

	clock.Advance(time.Minute)
	if ttl := s.TTL(t, "lane"); ttl >= 0 {
		t.Errorf("TTL = %v once it passed, want the key gone", ttl)
	}
	keys, err := s.Keys(t.Context(), "")
	if err != nil || len(keys) != 0 {
		t.Errorf("Keys = %v, %v; want none", keys, err)
	}
	if held, err := s.Renew(t.Context(), tok, []string{"lane"}, time.Minute); err != nil || held != 0 {
		t.Errorf("Renew on a gone key = %d, %v; want 0, nil", held, err)
	}
}

func TestNotAfterComparesWallTime(t *testing.T) {
	s, clock := newFake(t)
	req := capgate.AcquireRequest{
		Token: lanetest.NewToken(), Keys: []string{"lane"}, Limits: []int{1}, Lease: time.Minute,
		NotAfter: clock.Now().Add(time.Second),
	}
	clock.Advance(time.Second)
	if taken, _ := mustAcquire(t, s.Store, req); !taken {
		t.Fatal("acquire at its not-after not taken")
	}
	clock.Advance(time.Millisecond)
	req.Token = lanetest.NewToken()
	taken, err := s.Acquire(t.Context(), req, make([]int, 1))
	if taken || !errors.Is(err, capgate.ErrLateAcquire) {
		t.Fatalf("acquire after its not-after = %v, %v; want false, ErrLateAcquire", taken, err)
	}
}

func TestMalformedRequest(t *testing.T) {
	s := memory.New(nil)
	for name, req := range map[string]capgate.AcquireRequest{
		"short limits": {Token: "t", Keys: []string{"a", "b"}, Limits: []int{1}, Lease: time.Minute},
		"no lease":     {Token: "t", Keys: []string{"a"}, Limits: []int{1}},
	} {
		if taken, err := s.Acquire(t.Context(), req, make([]int, 2)); err == nil || taken {
			t.Errorf("%s: Acquire = %v, %v; want an error", name, taken, err)
		}
	}
	req := capgate.AcquireRequest{Token: "t", Keys: []string{"a", "b"}, Limits: []int{1, 1}, Lease: time.Minute}
	if _, err := s.Acquire(t.Context(), req, make([]int, 1)); err == nil {
		t.Error("Acquire with room for too few counts: no error")
	}
}

// TestNoAllocations proves the steady state of an acquire and a release
// allocates nothing (the benchmark shows the same under RunParallel).
func TestNoAllocations(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation count")
	}
	s := memory.New(nil)
	req := capgate.AcquireRequest{Token: lanetest.NewToken(), Keys: benchKeys, Limits: []int{100, 100, 100, 100}, Lease: time.Minute}
	counts := make([]int, len(req.Keys))
	ctx := t.Context()
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := s.Acquire(ctx, req, counts); err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, req.Token, req.Keys); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per acquire+release, want 0", allocs)
	}
}

var benchKeys = []string{"ocl:capacity:api_heavy", "ocl:capacity:api_heavy_task:web-1", "ocl:capacity:tier:core", "ocl:capacity:user:alice"}

func BenchmarkAcquireRelease(b *testing.B) {
	lanetest.BenchPairs(b, memory.New(nil), benchKeys[:1], 100)
}

func BenchmarkAcquireReleaseFourLanes(b *testing.B) {
	lanetest.BenchPairs(b, memory.New(nil), benchKeys, 100)
}

// BenchmarkAcquireReleaseParallel has every goroutine take and give back a
// lease on one shared lane, with a few other leases always held there.
func BenchmarkAcquireReleaseParallel(b *testing.B) {
	s := memory.New(nil)
	for range 8 {
		req := capgate.AcquireRequest{Token: lanetest.NewToken(), Keys: benchKeys[:1], Limits: []int{1 << 20}, Lease: time.Hour}
		if _, err := s.Acquire(b.Context(), req, make([]int, 1)); err != nil {
			b.Fatal(err)
		}
	}
	var failed atomic.Bool
	ctx := b.Context()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		req := capgate.AcquireRequest{Token: lanetest.NewToken(), Keys: benchKeys[:1], Limits: []int{1 << 20}, Lease: time.Minute}
		counts := make([]int, 1)
		for pb.Next() {
			if _, err := s.Acquire(ctx, req, counts); err != nil {
				failed.Store(true)
			}
			if err := s.Release(ctx, req.Token, req.Keys); err != nil {
				failed.Store(true)
			}
		}
	})
	if failed.Load() {
		b.Fatal("an operation failed")
	}
}

// TestForgottenLanesAreSwept: lanes nobody touches again go once their
// TTL passes, as Redis keys do, without a goroutine.
func TestForgottenLanesAreSwept(t *testing.T) {
	s, clock := newFake(t)
	for i := range 100 {
		req := capgate.AcquireRequest{Token: lanetest.NewToken(), Keys: []string{fmt.Sprintf("user:%d", i)}, Limits: []int{1}, Lease: time.Minute}
		mustAcquire(t, s.Store, req)
	}
	clock.Advance(2 * time.Minute) // every TTL passed
	req := capgate.AcquireRequest{Token: lanetest.NewToken(), Keys: []string{"busy"}, Limits: []int{1 << 20}, Lease: time.Hour}
	for range 1000 {
		mustAcquire(t, s.Store, req)
	}
	if n := s.Len(); n != 1 {
		t.Errorf("%d lanes left, want only the busy one", n)
	}
}

// TestBenchPairs runs the shared pairs benchmark once over the store: every
// pair it takes, it gives back.
func TestBenchPairs(t *testing.T) {
	s := memory.New(nil)
	r := testing.Benchmark(func(b *testing.B) { lanetest.BenchPairs(b, s, benchKeys, 1) })
	if r.N == 0 {
		t.Fatal("BenchPairs ran no iterations")
	}
	counts := make([]int, len(benchKeys))
	if err := s.Count(t.Context(), benchKeys, counts); err != nil {
		t.Fatal(err)
	}
	if slices.Max(counts) != 0 {
		t.Errorf("counts after BenchPairs = %v; want every lane empty", counts)
	}
}

// The store declares every part it has (Caps): the gate uses no other, so
// a part left out would silently go unused. Its operations never wait, so
// its bound is 0.
func TestCaps(t *testing.T) {
	for _, s := range []*memory.Store{memory.New(nil), new(memory.Store)} {
		want := capgate.StoreCaps{Waitlist: s, Idempotency: s, Adaptive: s, Bounded: true, Kind: "memory"}
		if got := s.Caps(); got != want {
			t.Errorf("Caps() = %+v, want %+v", got, want)
		}
	}
}
