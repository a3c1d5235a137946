package redis_test

import (
	"context"
	"fmt"
	"strings"
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
