package redis_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/lanetest"
	"github.com/capgate/capgate/redis"
)

func TestGateMiniredis(t *testing.T) {
	lanetest.RunGate(t, func(t testing.TB) lanetest.Store {
		_, h := openMini(t)
		return h
	})
}

func TestGateMiniredisWithLocalLanes(t *testing.T) {
	lanetest.RunGateWithLocalLanes(t, func(t testing.TB) lanetest.Store {
		_, h := openMini(t)
		return h
	})
}

func TestGateRealRedis(t *testing.T) {
	url := redis.RealRedisURL(t)
	lanetest.RunGate(t, func(t testing.TB) lanetest.Store {
		return openHarness(t, url)
	})
}

// The gate over a Redis that hangs: the call goes ahead uncounted at the
// store's deadline, with the exact error, and the skip window opens.
func TestGateFailsOpenAtTheDeadlineOfAHungRedis(t *testing.T) {
	s, _ := openHung(t, redis.Options{Deadline: 100 * time.Millisecond})
	cfg := capgate.NewFixedConfig(capgate.DefaultConfig(capgate.ModeEnforce))
	g, err := capgate.NewGate(s, cfg, nil, "task-a")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	a := g.Admit(context.Background(), lanetest.Match("p", capgate.TierPreview))
	within(t, "gate acquire", start, time.Second)
	a.Release(context.Background())
	if a.Decision() != capgate.DecisionUnavailable || a.Refused() {
		t.Fatalf("decision %q, want unavailable", a.Decision())
	}
	if !strings.HasSuffix(fmt.Sprint(a.Err()), "no answer from Redis within 0.1 s") {
		t.Fatalf("error %q", a.Err())
	}
	if !g.Skip.Skipping() {
		t.Fatal("the skip window is closed after a hung call")
	}
}

// TestFloodDoesNotOpenTheSkipWindow: 1,000 heavy calls at once through a
// store whose queue they overflow, against a Redis that answers (slowly):
// the calls that time out in this process's own queue are back-pressure,
// and the skip window stays closed.
func TestFloodDoesNotOpenTheSkipWindow(t *testing.T) {
	m, _ := openMini(t)
	p := newProxy(t, m.Addr())
	s, err := redis.Open(redis.Options{URL: "redis://" + p.Addr, MaxInFlight: 2, MaxQueued: 64, Deadline: time.Second, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	g, err := capgate.NewGate(s, capgate.NewFixedConfig(capgate.DefaultConfig(capgate.ModeShadow)), nil, "task-a")
	if err != nil {
		t.Fatal(err)
	}
	// Both connections open and the script loaded before Redis slows.
	var warm sync.WaitGroup
	for i := range 2 {
		warm.Go(func() {
			g.Admit(t.Context(), lanetest.Match(fmt.Sprintf("w%d", i), capgate.TierPreview)).Release(t.Context())
		})
	}
	warm.Wait()
	p.SetDelay(50 * time.Millisecond)
	const calls = 1000
	var wg sync.WaitGroup
	var busy atomic.Int64
	admissions := make([]*capgate.Admission, calls)
	for i := range calls {
		wg.Go(func() {
			a := g.Admit(t.Context(), lanetest.Match(fmt.Sprintf("u%d", i), capgate.TierPreview))
			if errors.Is(a.Err(), capgate.ErrBusy) {
				busy.Add(1)
			}
			admissions[i] = a
		})
	}
	wg.Wait()
	if g.Skip.Skipping() {
		t.Fatalf("the skip window opened under a flood (last error %v)", admissions[calls-1].Err())
	}
	if busy.Load() == 0 {
		t.Fatal("no call was held up by the queue: the test did not flood it")
	}
	p.SetDelay(0)
	for _, a := range admissions {
		a.Release(t.Context())
	}
}
