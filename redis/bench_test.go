package redis_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/lanetest"
	"github.com/capgate/capgate/redis"
	"github.com/capgate/capgate/settings"
)

// benchKeys are the lanes of a typical call.
func benchKeys() []string {
	p := lanetest.NewPrefix()
	return []string{p + "api_heavy", p + "api_heavy_task:web-1", p + "tier:core", p + "user:alice"}
}

func benchStore(b *testing.B, url string) *redis.Store {
	b.Helper()
	s, err := redis.Open(redis.Options{URL: url, MaxQueued: 1024})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

// benchPairs runs acquire+release pairs on four lanes, one goroutine.
func benchPairs(b *testing.B, s *redis.Store) {
	lanetest.BenchPairs(b, s, benchKeys(), 1<<20)
}

// benchPairsParallel runs acquire+release pairs on four shared lanes from
// GOMAXPROCS×8 goroutines.
func benchPairsParallel(b *testing.B, s *redis.Store) {
	keys := benchKeys()
	var failed atomic.Value
	ctx := b.Context()
	b.ReportAllocs()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		req := capgate.AcquireRequest{Token: lanetest.NewToken(), Keys: keys, Limits: []int{1 << 20, 1 << 20, 1 << 20, 1 << 20}, Lease: time.Minute}
		counts := make([]int, len(keys))
		for pb.Next() {
			if _, err := s.Acquire(ctx, req, counts); err != nil {
				failed.Store(err)
			}
			if err := s.Release(ctx, req.Token, req.Keys); err != nil {
				failed.Store(err)
			}
		}
	})
	if err := failed.Load(); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkMiniredisAcquireRelease(b *testing.B) {
	benchPairs(b, benchStore(b, "redis://"+miniredis.RunT(b).Addr()))
}

func BenchmarkMiniredisAcquireReleaseParallel(b *testing.B) {
	benchPairsParallel(b, benchStore(b, "redis://"+miniredis.RunT(b).Addr()))
}

func BenchmarkRealRedisAcquireRelease(b *testing.B) {
	benchPairs(b, benchStore(b, redis.RealRedisURL(b)))
}

func BenchmarkRealRedisAcquireReleaseParallel(b *testing.B) {
	benchPairsParallel(b, benchStore(b, redis.RealRedisURL(b)))
}

// BenchmarkRealRedisJoinReleaseWait is a waiting-on call's store work
// uncontended, by fairness: Join's fast path and ReleaseWait (by time and
// usage each also records the call as running, and charges it).
func BenchmarkRealRedisJoinReleaseWait(b *testing.B) {
	url := redis.RealRedisURL(b)
	for _, c := range []struct {
		name string
		fair settings.FairBy
	}{{"calls", settings.FairCalls}, {"time", settings.FairTime}} {
		b.Run(c.name, func(b *testing.B) {
			s := benchStore(b, url)
			keys := benchKeys()
			prefix := lanetest.NewPrefix() + "ocl"
			ctx := b.Context()
			counts := make([]int, len(keys))
			b.ReportAllocs()
			for b.Loop() {
				t := capgate.Ticket{Prefix: prefix, Token: lanetest.NewToken(), Keys: keys, Limits: []int{1 << 20, 1 << 20, 1 << 20, 1 << 20},
					UserID: "alice", Lease: time.Minute, TicketLease: time.Minute, Claim: time.Second, MaxWaiting: 10, MaxPerUser: 10, Fair: c.fair}
				if res, err := s.Join(ctx, t, counts); err != nil || !res.Taken {
					b.Fatalf("Join = %+v, %v", res, err)
				}
				if err := s.ReleaseWait(ctx, prefix, t.Token, keys, capgate.Charge{User: "alice", Cost: 5}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
