package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/lanetest"
	"github.com/capgate/capgate/mock"
	"github.com/capgate/capgate/redis"
	"github.com/capgate/capgate/tune"
)

// clockedTune runs the tune script with miniredis's TIME set to clock's
// time, so the fake clock is the store's clock (the script reads TIME).
type clockedTune struct {
	*redis.Store
	m     *miniredis.Miniredis
	clock *mock.Clock
}

// Caps declares c itself as the adaptive state, so a gate's exchanges go
// through TuneExchange here.
func (c clockedTune) Caps() capgate.StoreCaps {
	caps := c.Store.Caps()
	caps.Adaptive = c
	return caps
}

func (c clockedTune) TuneExchange(ctx context.Context, key string, add tune.Window, every time.Duration) (tune.Round, error) {
	c.m.SetTime(c.clock.Now())
	return c.Store.TuneExchange(ctx, key, add, every)
}

func TestTuneMiniredis(t *testing.T) {
	lanetest.RunTune(t, func(t testing.TB, clock *mock.Clock) lanetest.TuneStore {
		m, h := openMini(t)
		return clockedTune{Store: h.Store, m: m, clock: clock}
	})
}

// TestTuneRealRedis runs the tune script on a real Redis, on its own clock:
// the first exchange takes the window, the next within the period does not,
// and a window's sums and the saved state come back.
func TestTuneRealRedis(t *testing.T) {
	h := openHarness(t, redis.RealRedisURL(t))
	ctx := t.Context()
	const key = "test:tune:es2_knn"
	w := tune.Window{Calls: 3, SumMicros: 900, Full: 1, MaxInFlight: 5, SumInFlight: 12}
	if r, err := h.TuneExchange(ctx, key, w, time.Hour); err != nil || !r.Due || r.Window != w || r.State != nil {
		t.Fatalf("first exchange = %+v, %v; want due with its window", r, err)
	}
	if r, err := h.TuneExchange(ctx, key, w, time.Hour); err != nil || r.Due {
		t.Fatalf("second exchange = %+v, %v; want not due within the hour", r, err)
	}
	if err := h.TuneSave(ctx, key, []byte(`{"limit":9}`)); err != nil {
		t.Fatal(err)
	}
	r, err := h.TuneExchange(ctx, key, w, 0)
	if want := w.Add(w); err != nil || !r.Due || r.Window != want || string(r.State) != `{"limit":9}` {
		t.Fatalf("exchange with no period = %+v (state %s), %v; want due with %+v and the state", r, r.State, err, want)
	}
	if ttl := h.TTL(t, key); ttl < tune.StateTTL-time.Minute {
		t.Errorf("TTL %v; want about %v", ttl, tune.StateTTL)
	}
}
