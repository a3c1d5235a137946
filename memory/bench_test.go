package memory_test

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/lanetest"
	"github.com/capgate/capgate/memory"
)

// BenchmarkAcquireReleaseSemanticParallel is what a semantic $match costs
// the store under load: five lanes, four of them shared by every
// goroutine (cluster, task, es2_knn, tier) and one per goroutine (the
// user). Run with -cpu 1,2 for pairs/s per core; ns/op is one pair.
func BenchmarkAcquireReleaseSemanticParallel(b *testing.B) {
	s := memory.New(nil)
	var n atomic.Int64
	var failed atomic.Bool
	ctx := b.Context()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		user := "ocl:capacity:user:u" + strconv.FormatInt(n.Add(1), 10)
		keys := []string{"ocl:capacity:api_heavy", "ocl:capacity:api_heavy_task:web-1",
			"ocl:capacity:es2_knn", "ocl:capacity:tier:core", user}
		req := capgate.AcquireRequest{Token: lanetest.NewToken(), Keys: keys,
			Limits: []int{1 << 20, 1 << 20, 1 << 20, 1 << 20, 1 << 20}, Lease: time.Minute, Force: true}
		counts := make([]int, len(keys))
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

// BenchmarkWake: a freed slot reaching the next waiter in process.
func BenchmarkWake(b *testing.B) {
	s := memory.New(nil)
	lanetest.BenchWake(b, s, s)
}
