package simapi

import (
	"testing"
	"time"
)

func TestBackendModel(t *testing.T) {
	b := NewBackend(4, 10*time.Millisecond)
	for _, tc := range []struct {
		n    int
		want time.Duration
	}{{1, 10 * time.Millisecond}, {4, 10 * time.Millisecond}, {8, 20 * time.Millisecond}, {12, 30 * time.Millisecond}} {
		if got := b.latency(tc.n); got != tc.want {
			t.Errorf("latency with %d in flight = %v; want %v", tc.n, got, tc.want)
		}
	}
	b.SetCapacity(2)
	if got := b.latency(4); got != 20*time.Millisecond {
		t.Errorf("capacity 2, 4 in flight: %v; want 20ms", got)
	}
	if r := b.Read(true); r.Calls != 5 || r.P50MS != 20 || r.P99MS != 30 {
		t.Errorf("read = %+v; want 5 calls, p50 20, p99 30", r)
	}
}
