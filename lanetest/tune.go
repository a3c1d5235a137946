package lanetest

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/adaptive"
	"github.com/capgate/capgate/configtest"
	"github.com/capgate/capgate/mock"
	"github.com/capgate/capgate/settings"
	"github.com/capgate/capgate/status"
	"github.com/capgate/capgate/tune"
)

// TuneStore is a lane store that keeps the adaptive limits' state (a
// tune.Store), under test.
type TuneStore interface {
	capgate.LaneStore
	tune.Store
}

// TuneFactory opens an empty TuneStore for one test whose clock is clock
// (the store's own: the memory store's Now, miniredis's TIME), and
// registers its cleanup on t.
type TuneFactory func(t testing.TB, clock *mock.Clock) TuneStore

// RunTune runs the conformance suite of tune.Store and, on top of
// it, the invariants of the cluster-wide control loop (the gate's adaptive
// limits: adaptive.Runner.Step, as Runner.Run runs it), all on a fake
// clock: three gateways share one store, a simulated backend of known
// capacity answers, and nothing sleeps.
func RunTune(t *testing.T, open TuneFactory) {
	tests := []struct {
		name string
		fn   func(t *testing.T, open TuneFactory)
	}{
		{"ExchangeGathersAndTakes", testTuneExchange},
		{"ClusterStepsOnceAndConverges", testTuneCluster},
		{"OutageKeepsTheLastLimit", testTuneOutage},
		{"RestartKeepsTheLimit", testTuneRestart},
		{"NoDriftBelowCapacity", testTuneNoDrift},
		{"AdviseAndSwitchBack", testTuneAdvise},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, open) })
	}
}

var tuneEpoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func testTuneExchange(t *testing.T, open TuneFactory) {
	clock := mock.NewClock(tuneEpoch)
	s := open(t, clock)
	ctx := t.Context()
	const key = "test:tune:es2_knn"
	a := tune.Window{Calls: 2, SumMicros: 300, Full: 1, MaxInFlight: 4, SumInFlight: 7}
	r, err := s.TuneExchange(ctx, key, a, time.Second)
	if err != nil || !r.Due || r.Window != a || r.State != nil {
		t.Fatalf("first exchange = %+v, %v; want due with its own window and no state", r, err)
	}
	b := tune.Window{Calls: 3, SumMicros: 100, MaxInFlight: 9, SumInFlight: 20}
	c := tune.Window{Calls: 1, SumMicros: 50, Full: 1, MaxInFlight: 2, SumInFlight: 2}
	for _, w := range []tune.Window{b, c} {
		clock.Advance(300 * time.Millisecond)
		if r, err := s.TuneExchange(ctx, key, w, time.Second); err != nil || r.Due || r.Window != (tune.Window{}) {
			t.Fatalf("exchange within the second = %+v, %v; want not due", r, err)
		}
	}
	if err := s.TuneSave(ctx, key, []byte(`{"limit":7}`)); err != nil {
		t.Fatal(err)
	}
	clock.Advance(500 * time.Millisecond)
	r, err = s.TuneExchange(ctx, key, tune.Window{}, time.Second)
	if want := b.Add(c); err != nil || !r.Due || r.Window != want || string(r.State) != `{"limit":7}` {
		t.Fatalf("exchange a second later = %+v (state %s), %v; want due with %+v and the saved state", r, r.State, err, want)
	}
	if r, _ := s.TuneExchange(ctx, "test:tune:other", tune.Window{}, time.Second); r.State != nil || r.Window != (tune.Window{}) {
		t.Errorf("another key = %+v; want nothing of the first", r)
	}
}

// backend is the simulated backend: demand callers always waiting, and a
// service time of base × max(1, in flight / capacity).
type backend struct {
	demand, capacity int
	base             time.Duration
}

// second returns one second of the lane at limit l, as the cluster saw it.
func (b backend) second(l int) tune.Window {
	n := min(l, b.demand)
	r := float64(b.base.Microseconds()) * max(1, float64(n)/float64(b.capacity))
	calls := int64(float64(n) * 1e6 / r)
	w := tune.Window{Calls: calls, SumMicros: int64(float64(calls) * r), MaxInFlight: int64(n), SumInFlight: calls * int64(n)}
	if b.demand > l {
		w.Full = calls
	}
	return w
}

// split returns w's share of gateway i of n.
func split(w tune.Window, i, n int) tune.Window {
	part := func(v int64) int64 { return v/int64(n) + map[bool]int64{true: v % int64(n), false: 0}[i == 0] }
	return tune.Window{Calls: part(w.Calls), SumMicros: part(w.SumMicros), Full: part(w.Full),
		MaxInFlight: w.MaxInFlight, SumInFlight: part(w.SumInFlight)}
}

// countingStore counts the saves (the steps taken) and fails while down.
type countingStore struct {
	TuneStore
	saves atomic.Int64
	down  atomic.Bool
}

// Caps declares c itself as the adaptive state, so a gate's exchanges and
// saves go through it.
func (c *countingStore) Caps() capgate.StoreCaps {
	caps := c.TuneStore.Caps()
	caps.Adaptive = c
	return caps
}

var errDown = errors.New("store down")

func (c *countingStore) TuneExchange(ctx context.Context, key string, add tune.Window, every time.Duration) (tune.Round, error) {
	if c.down.Load() {
		return tune.Round{}, errDown
	}
	return c.TuneStore.TuneExchange(ctx, key, add, every)
}

func (c *countingStore) TuneSave(ctx context.Context, key string, state []byte) error {
	if c.down.Load() {
		return errDown
	}
	c.saves.Add(1)
	return c.TuneStore.TuneSave(ctx, key, state)
}

// cluster is three gateways' gates on one store and config.
type cluster struct {
	t     *testing.T
	clock *mock.Clock
	store *countingStore
	cfg   *settings.Fixed
	gates []*capgate.Gate
	sink  *mock.Sink
	be    backend
}

func newCluster(t *testing.T, open TuneFactory, static int, mode tune.Mode, be backend) *cluster {
	clock := mock.NewClock(tuneEpoch)
	c := &cluster{t: t, clock: clock, store: &countingStore{TuneStore: open(t, clock)}, sink: &mock.Sink{}, be: be}
	cfg := settings.Default(nil, settings.ModeEnforce)
	configtest.SetNumbers(t, &cfg, "es2_knn", static)
	cfg.Adaptive = cfg.Adaptive.With("es2_knn", tune.LaneSettings{Mode: mode, Min: 1, Max: 64})
	c.cfg = settings.NewFixed(cfg)
	for _, task := range []string{"gw-a", "gw-b", "gw-c"} {
		c.gates = append(c.gates, c.newGate(task))
	}
	return c
}

// newGate starts gateway task: a new gate, knowing nothing yet.
func (c *cluster) newGate(task string) *capgate.Gate {
	g, err := capgate.NewGate(c.store, c.cfg, c.sink, task)
	if err != nil {
		c.t.Fatal(err)
	}
	g.KeyPrefix, g.Now, g.Logger = "test", c.clock.Now, slog.New(slog.DiscardHandler)
	c.t.Cleanup(func() { _ = g.Close(context.Background()) })
	return g
}

// inForce returns the es2_knn limit gateway i applies, from its status
// (the limits the gate applies, as staff see them).
func (c *cluster) inForce(i int) int {
	ctx := context.Background()
	st := c.gates[i].Status(ctx, c.cfg.Config(ctx))
	l, ok := st.SharedLane("es2_knn")
	if !ok {
		c.t.Fatalf("gateway %d: status %+v has no es2_knn lane", i, st)
	}
	return l.Limit
}

// second runs one second: the backend answers at the limit in force (the
// first gateway's; they agree), each gateway adds its share and steps.
func (c *cluster) second() {
	c.clock.Advance(time.Second)
	w := c.be.second(c.inForce(0))
	for i, g := range c.gates {
		_ = (&adaptive.Runner{Gate: g}).Step(context.Background(), map[capgate.LaneName]tune.Window{capgate.LaneName("es2_knn"): split(w, i, len(c.gates))})
	}
}

func testTuneCluster(t *testing.T, open TuneFactory) {
	const k = 16
	for _, static := range []int{3 * k, k / 3} {
		c := newCluster(t, open, static, tune.Apply, backend{demand: 40, capacity: k, base: 50 * time.Millisecond})
		prev, converged := static, -1
		for sec := range 90 {
			if sec == 60 {
				c.be.capacity = k / 2
				converged = -1
			}
			saves := c.store.saves.Load()
			c.second()
			if got := c.store.saves.Load() - saves; got != 1 {
				t.Fatalf("static %d, second %d: %d steps taken by the cluster; want exactly 1", static, sec, got)
			}
			l := c.inForce(0)
			for i := range c.gates {
				if got := c.inForce(i); got != l {
					t.Fatalf("static %d, second %d: gateway %d applies %d, gateway 0 %d; want one limit for the cluster", static, sec, i, got, l)
				}
			}
			if l < 1 || l > 64 || l > 2*prev || 2*l < prev {
				t.Fatalf("static %d, second %d: limit %d after %d; want within [1, 64] and at most ×2 or ÷2", static, sec, l, prev)
			}
			prev = l
			kk := c.be.capacity
			if in := 10*l >= 7*kk && 10*l <= 15*kk; in && converged < 0 {
				converged = sec
			}
		}
		if converged < 0 || converged > 60+30 {
			t.Errorf("static %d: followed the halved capacity at second %d; want within 30 s of it", static, converged)
		}
		if l := c.inForce(0); 10*l < 7*k/2 || 10*l > 15*k/2 {
			t.Errorf("static %d: limit %d after the capacity halved to %d; want within [0.7K, 1.5K]", static, l, k/2)
		}
		lines := c.sink.All(t)
		if len(lines) == 0 || lines[0]["event"] != "ocl_capacity_adaptive" || lines[0]["lane"] != "es2_knn" {
			t.Errorf("static %d: log lines %v; want ocl_capacity_adaptive lines for es2_knn", static, lines)
		}
	}
}

func testTuneOutage(t *testing.T, open TuneFactory) {
	c := newCluster(t, open, 48, tune.Apply, backend{demand: 40, capacity: 16, base: 50 * time.Millisecond})
	for range 30 {
		c.second()
	}
	before := c.inForce(0)
	c.store.down.Store(true)
	for sec := range 60 {
		c.second()
		for i := range c.gates {
			if got := c.inForce(i); got != before {
				t.Fatalf("second %d of the outage: gateway %d applies %d; want the last limit %d kept", sec, i, got, before)
			}
		}
	}
	c.store.down.Store(false)
	c.second()
	if got := c.inForce(0); 2*got < before || got > 2*before {
		t.Errorf("after the outage: limit %d; want a step from %d", got, before)
	}
}

func testTuneRestart(t *testing.T, open TuneFactory) {
	c := newCluster(t, open, 48, tune.Apply, backend{demand: 40, capacity: 16, base: 50 * time.Millisecond})
	for range 30 {
		c.second()
	}
	before := c.inForce(0)
	// Every gateway restarts: new gates, same store.
	for i, task := range []string{"gw-a", "gw-b", "gw-c"} {
		c.gates[i] = c.newGate(task)
	}
	if got := c.inForce(0); got != 48 {
		t.Errorf("a gateway that has not read the store yet applies %d; want the static 48", got)
	}
	for _, g := range c.gates {
		_ = (&adaptive.Runner{Gate: g}).Step(context.Background(), nil) // reads the state; not due yet
	}
	if got := c.inForce(0); got != before {
		t.Errorf("after a restart: limit %d; want the cluster's %d, not the static limit or min", got, before)
	}
}

func testTuneNoDrift(t *testing.T, open TuneFactory) {
	c := newCluster(t, open, 20, tune.Apply, backend{demand: 10, capacity: 32, base: 50 * time.Millisecond})
	for range 12 { // the first windows probe the no-load time
		c.second()
	}
	for sec := range 600 {
		c.second()
		if got := c.inForce(0); got != 20 {
			t.Fatalf("second %d: limit %d; want 20 held while healthy below capacity", sec, got)
		}
	}
}

func testTuneAdvise(t *testing.T, open TuneFactory) {
	// Advise can't probe (the static limit is in force): a quiet spell
	// shows the no-load time, then the load comes.
	c := newCluster(t, open, 48, tune.Advise, backend{demand: 4, capacity: 16, base: 50 * time.Millisecond})
	for range 10 {
		c.second()
	}
	c.be.demand = 40
	for range 20 {
		c.second()
	}
	ctx := context.Background()
	adv, ok := (&adaptive.Runner{Gate: c.gates[0]}).Advised(ctx)[capgate.LaneName("es2_knn")]
	if !ok || adv == 48 || 10*adv < 7*16 || 10*adv > 15*16 {
		t.Errorf("advised = %d, %v; want within [0.7K, 1.5K] of 16", adv, ok)
	}
	st := c.gates[0].Status(ctx, c.cfg.Config(ctx))
	if l, ok := st.SharedLane("es2_knn"); !ok || l.Advised != adv || l.LimitSource != status.LimitStatic {
		t.Errorf("status es2_knn = %+v, %v; want advised %d, limit source static", l, ok, adv)
	}
	if got := c.inForce(0); got != 48 {
		t.Errorf("advise applies %d; want the static 48", got)
	}
	c.cfg.Edit(func(cfg *settings.Config) { setAdaptiveMode(cfg, "es2_knn", tune.Apply) })
	if got := c.inForce(0); got != adv {
		t.Errorf("apply: limit %d; want the advised %d at once", got, adv)
	}
	c.cfg.Edit(func(cfg *settings.Config) { setAdaptiveMode(cfg, "es2_knn", tune.Advise) })
	if got := c.inForce(0); got != 48 {
		t.Errorf("back to advise: limit %d; want the static 48 at once", got)
	}
}

// setAdaptiveMode sets the mode of lane's adaptive setting in cfg.
func setAdaptiveMode(cfg *settings.Config, lane string, m tune.Mode) {
	l := cfg.Adaptive.Lane(lane)
	l.Mode = m
	cfg.Adaptive = cfg.Adaptive.With(lane, l)
}
