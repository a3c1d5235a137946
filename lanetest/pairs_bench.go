package lanetest

import (
	"slices"
	"testing"
	"time"

	"github.com/capgate/capgate"
)

// BenchPairs measures acquire+release pairs on keys, one goroutine, each
// lane limited to limit (high enough that every acquire is taken); it
// reports allocations.
func BenchPairs(b *testing.B, s capgate.LaneStore, keys []string, limit int) {
	limits := slices.Repeat([]int{limit}, len(keys))
	req := capgate.AcquireRequest{Token: NewToken(), Keys: keys, Limits: limits, Lease: time.Minute}
	counts := make([]int, len(keys))
	ctx := b.Context()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Acquire(ctx, req, counts); err != nil {
			b.Fatal(err)
		}
		if err := s.Release(ctx, req.Token, req.Keys); err != nil {
			b.Fatal(err)
		}
	}
}
