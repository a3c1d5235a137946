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
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/redis"
	"github.com/capgate/capgate/settings"
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
	}, func() capgate.LaneStore { return memory.New(nil) })
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
	cfg := settings.NewFixed(settings.Default(nil, settings.ModeEnforce))
	g, err := capgate.NewGate(s, cfg, nil, "task-a")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	a := g.Admit(context.Background(), lanetest.Match("p", "preview"))
	within(t, "gate acquire", start, time.Second)
	a.Release(context.Background())
	if a.Outcome().Decision != capgate.DecisionUnavailable || a.Outcome().Decision == capgate.DecisionRefused {
		t.Fatalf("decision %q, want unavailable", a.Outcome().Decision)
	}
	if !strings.HasSuffix(fmt.Sprint(a.Err()), "no answer from Redis within 0.1 s") {
		t.Fatalf("error %q", a.Err())
	}
	// The skip window is open: the next call does not ask Redis.
	b := g.Admit(context.Background(), lanetest.Match("p", "preview"))
	b.Release(context.Background())
	if !errors.Is(b.Err(), capgate.ErrSkipped) {
		t.Fatalf("after a hung call: next call's error %q, want %q (the skip window open)", b.Err(), capgate.ErrSkipped)
	}
}

// TestFloodDoesNotOpenTheSkipWindow: 1,000 heavy calls at once through a
// store whose queue they overflow, against a Redis that answers (slowly):
// the calls that time out in this process's own queue are back-pressure,
// and the skip window stays closed.
func TestFloodDoesNotOpenTheSkipWindow(t *testing.T) {
	m, _ := openMini(t)
	p := newProxy(t, m.Addr())
	s, err := redis.Open(redis.Options{URL: "redis://" + p.Addr, MaxInFlight: 2, MaxQueued: 64, Deadline: 3 * time.Second, Timeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	g, err := capgate.NewGate(s, settings.NewFixed(settings.Default(nil, settings.ModeShadow)), nil, "task-a")
	if err != nil {
		t.Fatal(err)
	}
	// Both connections open and the script loaded before Redis slows.
	var warm sync.WaitGroup
	for i := range 2 {
		warm.Go(func() {
			g.Admit(t.Context(), lanetest.Match(fmt.Sprintf("w%d", i), "preview")).Release(t.Context())
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
			a := g.Admit(t.Context(), lanetest.Match(fmt.Sprintf("u%d", i), "preview"))
			if errors.Is(a.Err(), capgate.ErrBusy) {
				busy.Add(1)
			}
			admissions[i] = a
		})
	}
	wg.Wait()
	// The skip window stayed closed: a call after the flood is not skipped.
	after := g.Admit(t.Context(), lanetest.Match("after", "preview"))
	defer after.Release(t.Context())
	if errors.Is(after.Err(), capgate.ErrSkipped) {
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
