package mock_test

import (
	"sync"
	"testing"
	"time"

	"github.com/capgate/capgate/mock"
)

func TestClock(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := mock.NewClock(start)
	if got := c.Now(); !got.Equal(start) {
		t.Fatalf("Now = %v; want %v", got, start)
	}
	if got := c.Now(); !got.Equal(start) {
		t.Fatalf("Now after no Advance = %v; want it still %v", got, start)
	}
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() { c.Advance(time.Second) })
	}
	wg.Wait()
	if got, want := c.Now(), start.Add(10*time.Second); !got.Equal(want) {
		t.Errorf("Now after 10 concurrent Advance(1s) = %v; want %v", got, want)
	}
	var zero mock.Clock
	if !zero.Now().IsZero() {
		t.Errorf("zero Clock's Now = %v; want the zero time", zero.Now())
	}
}
