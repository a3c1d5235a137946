package adaptive_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/adaptive"
	"github.com/capgate/capgate/lanetest"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/mock"
	"github.com/capgate/capgate/settings"
	"github.com/capgate/capgate/status"
	"github.com/capgate/capgate/tune"
)

// tunedGate is a gate on a memory store (a tune.Store: NewGate gives the
// gate its adaptive limits), on a fake clock.
func tunedGate(t *testing.T, cfg settings.Config) (*capgate.Gate, *settings.Fixed, *memory.Store, *mock.Clock) {
	t.Helper()
	clock := mock.NewClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	store := memory.New(clock.Now)
	src := settings.NewFixed(cfg)
	g, err := capgate.NewGate(store, src, &mock.Sink{}, "t1")
	if err != nil {
		t.Fatal(err)
	}
	g.Now = clock.Now
	t.Cleanup(func() { _ = g.Close(context.Background()) })
	return g, src, store, clock
}

func knnLimit(t *testing.T, g *capgate.Gate) int {
	t.Helper()
	a := g.Admit(context.Background(), lanetest.OCLCall("match", 2, true, false, "u", "core"))
	defer a.Release(context.Background())
	for _, l := range a.Outcome().Lanes {
		if l.Name == capgate.LaneName("es2_knn") {
			return l.Limit
		}
	}
	t.Fatal("no es2_knn lane")
	return 0
}

func TestGateAppliesTheAdaptiveLimit(t *testing.T) {
	cfg := settings.Default(nil, settings.ModeShadow)
	cfg.Adaptive = cfg.Adaptive.With("es2_knn", tune.LaneSettings{Mode: tune.Apply, Min: 1, Max: 10})
	g, src, store, _ := tunedGate(t, cfg)
	run := &adaptive.Runner{Gate: g}
	ctx := context.Background()
	if got := knnLimit(t, g); got != 3 {
		t.Fatalf("before any step: es2_knn limit %d; want the static 3", got)
	}
	// The cluster's state says 7 (another gateway computed it).
	if err := store.TuneSave(ctx, adaptive.Key(g, capgate.LaneName("es2_knn")), []byte(`{"limit":7,"step":4}`)); err != nil {
		t.Fatal(err)
	}
	if err := run.Step(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got := knnLimit(t, g); got != 7 {
		t.Errorf("apply: es2_knn limit %d; want the cluster's 7", got)
	}
	knn := lanetest.SharedLane(t, g.Status(ctx, src.Config(ctx)), "es2_knn")
	if knn.Limit != 7 || knn.Advised != 7 || knn.LimitSource != status.LimitAdaptive {
		t.Errorf("status es2_knn = %+v; want limit 7, advised 7, source adaptive", knn)
	}
	// Staff switch back: at once.
	src.Edit(func(c *settings.Config) {
		l := c.Adaptive.Lane("es2_knn")
		l.Mode = tune.Advise
		c.Adaptive = c.Adaptive.With("es2_knn", l)
	})
	if got := knnLimit(t, g); got != 3 {
		t.Errorf("advise: es2_knn limit %d; want the static 3 at once", got)
	}
	knn = lanetest.SharedLane(t, g.Status(ctx, src.Config(ctx)), "es2_knn")
	if knn.Limit != 3 || knn.Advised != 7 || knn.LimitSource != status.LimitStatic {
		t.Errorf("status es2_knn = %+v; want limit 3, advised 7, source static", knn)
	}
	// A max below the advised limit bounds it at once.
	src.Edit(func(c *settings.Config) {
		c.Adaptive = c.Adaptive.With("es2_knn", tune.LaneSettings{Mode: tune.Apply, Min: 1, Max: 5})
	})
	if got := knnLimit(t, g); got != 5 {
		t.Errorf("apply, max 5: es2_knn limit %d; want 5", got)
	}
}

func TestGateFeedsReleasedCallsToTheAdaptiveLimits(t *testing.T) {
	cfg := settings.Default(nil, settings.ModeShadow)
	cfg.Adaptive = cfg.Adaptive.With("es2_knn", tune.LaneSettings{Mode: tune.Advise, Min: 1, Max: 10})
	g, _, store, clock := tunedGate(t, cfg)
	run := &adaptive.Runner{Gate: g}
	ctx := context.Background()
	for range 12 {
		a := g.Admit(ctx, lanetest.OCLCall("match", 2, true, false, "u", "core"))
		clock.Advance(40 * time.Millisecond)
		a.Release(ctx)
	}
	// Lexical calls have no es2_knn lane and feed nothing.
	a := g.Admit(ctx, lanetest.OCLCall("rerank", 2, false, false, "u", "core"))
	clock.Advance(time.Second)
	a.Release(ctx)
	if err := run.Step(ctx, nil); err != nil {
		t.Fatal(err)
	}
	r, err := store.TuneExchange(ctx, adaptive.Key(g, capgate.LaneName("es2_knn")), tune.Window{}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	st, err := tune.Decode(r.State)
	if err != nil || st.Step != 1 || st.Last.Calls != 12 || st.Last.MeanMS != 20 {
		t.Errorf("state after one step = %+v, %v; want 12 calls of 20 ms a row (40 ms, 2 rows)", st, err)
	}
}

func TestNoAdaptiveKeyChangesNothing(t *testing.T) {
	g, src, _, _ := tunedGate(t, settings.Default(nil, settings.ModeShadow))
	run := &adaptive.Runner{Gate: g}
	ctx := context.Background()
	if err := run.Step(ctx, nil); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(g.Status(ctx, src.Config(ctx)))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "advised") || strings.Contains(string(b), "limit_source") {
		t.Errorf("status without adaptive = %s; want no advised or limit_source", b)
	}
	if got := knnLimit(t, g); got != 3 {
		t.Errorf("es2_knn limit %d; want the static 3", got)
	}
	if got := run.Advised(ctx); len(got) != 0 {
		t.Errorf("advised limits %v; want none", got)
	}
}

// Run steps at once, then every second, until its context ends.
func TestRunStepsUntilCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := settings.Default(nil, settings.ModeShadow)
		cfg.Adaptive = cfg.Adaptive.With("es2_knn", tune.LaneSettings{Mode: tune.Apply, Min: 1, Max: 10})
		store := memory.New(nil)
		g, err := capgate.NewGate(store, settings.NewFixed(cfg), &mock.Sink{}, "t1")
		if err != nil {
			t.Fatal(err)
		}
		run := &adaptive.Runner{Gate: g}
		defer func() { _ = g.Close(context.Background()) }()
		ctx, cancel := context.WithCancel(t.Context())
		if err := store.TuneSave(ctx, adaptive.Key(g, capgate.LaneName("es2_knn")), []byte(`{"limit":7,"step":4}`)); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { run.Run(ctx); close(done) }()
		synctest.Wait()
		if got := knnLimit(t, g); got != 7 {
			t.Errorf("after Run's first step: es2_knn limit %d; want the cluster's 7", got)
		}
		if err := store.TuneSave(ctx, adaptive.Key(g, capgate.LaneName("es2_knn")), []byte(`{"limit":5,"step":5}`)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if got := knnLimit(t, g); got != 5 {
			t.Errorf("a second later: es2_knn limit %d; want the cluster's 5", got)
		}
		cancel()
		synctest.Wait()
		select {
		case <-done:
		default:
			t.Error("Run still runs after its context ended")
		}
	})
}

// A Gate built by hand has no adaptive state: static limits, and
// Run returns at once.
func TestHandBuiltGateKeepsTheStaticLimits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := settings.Default(nil, settings.ModeShadow)
		cfg.Adaptive = cfg.Adaptive.With("es2_knn", tune.LaneSettings{Mode: tune.Apply, Min: 1, Max: 10})
		store := memory.New(nil)
		g := &capgate.Gate{Store: store, Source: settings.NewFixed(cfg), TaskID: "t1", Logger: slog.New(slog.DiscardHandler)}
		run := &adaptive.Runner{Gate: g}
		defer func() { _ = g.Close(context.Background()) }()
		if err := store.TuneSave(t.Context(), adaptive.Key(g, capgate.LaneName("es2_knn")), []byte(`{"limit":7,"step":4}`)); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { run.Run(t.Context()); close(done) }()
		synctest.Wait()
		select {
		case <-done:
		default:
			t.Fatal("Run on a gate without adaptive state still runs")
		}
		if err := run.Step(t.Context(), nil); err == nil {
			t.Error("Step on a gate without adaptive state: no error")
		}
		if got := knnLimit(t, g); got != 3 {
			t.Errorf("es2_knn limit %d; want the static 3", got)
		}
		if got := run.Advised(t.Context()); len(got) != 0 {
			t.Errorf("advised limits %v; want none", got)
		}
	})
}

// A gate derived with ForTask (decide's per-task gates) takes the adaptive
// limits its parent's loop steps, and its released calls feed that loop:
// the cluster lanes see every call of the process.
func TestForTaskSharesTheAdaptiveLimits(t *testing.T) {
	cfg := settings.Default(nil, settings.ModeShadow)
	cfg.Adaptive = cfg.Adaptive.With("es2_knn", tune.LaneSettings{Mode: tune.Apply, Min: 1, Max: 10})
	g, _, store, clock := tunedGate(t, cfg)
	run := &adaptive.Runner{Gate: g}
	ctx := context.Background()
	task, err := g.ForTask("t2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = task.Close(ctx) })
	if err := store.TuneSave(ctx, adaptive.Key(g, capgate.LaneName("es2_knn")), []byte(`{"limit":7,"step":4}`)); err != nil {
		t.Fatal(err)
	}
	if err := run.Step(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got := knnLimit(t, task); got != 7 {
		t.Errorf("task gate: es2_knn limit %d; want the parent's adaptive 7", got)
	}
	// knnLimit's call above was one; eleven more through the task's gate.
	for range 11 {
		a := task.Admit(ctx, lanetest.OCLCall("match", 2, true, false, "u", "core"))
		clock.Advance(40 * time.Millisecond)
		a.Release(ctx)
	}
	clock.Advance(time.Second) // the cluster's window is handed over once a second
	if err := run.Step(ctx, nil); err != nil {
		t.Fatal(err)
	}
	r, err := store.TuneExchange(ctx, adaptive.Key(g, capgate.LaneName("es2_knn")), tune.Window{}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := tune.Decode(r.State); err != nil || st.Last.Calls != 12 {
		t.Errorf("state after the task's calls = %+v, %v; want the 12 calls of the task's gate in the parent's window", st, err)
	}
}

// The age of the last step grows while no gateway steps the lane, and
// comes back to zero with the next step, whichever gateway takes it.
func TestAdaptiveStepAgeShowsALoopThatDoesNotStep(t *testing.T) {
	cfg := settings.Default(nil, settings.ModeShadow)
	cfg.Adaptive = cfg.Adaptive.With("es2_knn", tune.LaneSettings{Mode: tune.Apply, Min: 1, Max: 10})
	g, _, store, clock := tunedGate(t, cfg)
	run := &adaptive.Runner{Gate: g}
	other, err := capgate.NewGate(store, settings.NewFixed(cfg), nil, "t2")
	if err != nil {
		t.Fatal(err)
	}
	other.Now = clock.Now
	ctx := context.Background()
	age := func() time.Duration {
		t.Helper()
		a, ok := run.StepAges(ctx)[capgate.LaneName("es2_knn")]
		if !ok {
			t.Fatal("no age for es2_knn")
		}
		return a
	}
	if got := age(); got != 0 {
		t.Errorf("before any step: age %v; want 0 (counted from now)", got)
	}
	clock.Advance(3 * time.Second)
	if got := age(); got != 3*time.Second {
		t.Errorf("no step yet, 3 s later: age %v; want 3s", got)
	}
	if err := run.Step(ctx, nil); err != nil { // the first exchange takes a window
		t.Fatal(err)
	}
	if got := age(); got != 0 {
		t.Errorf("just stepped: age %v; want 0", got)
	}
	clock.Advance(10 * time.Second)
	if got := age(); got != 10*time.Second {
		t.Errorf("10 s without a step: age %v; want 10s", got)
	}
	// The other gateway takes the step; this one learns it on its next
	// exchange, which is not due itself.
	if err := (&adaptive.Runner{Gate: other}).Step(ctx, nil); err != nil {
		t.Fatal(err)
	}
	clock.Advance(200 * time.Millisecond)
	if err := run.Step(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got := age(); got != 200*time.Millisecond {
		t.Errorf("after the other gateway's step: age %v; want 200ms", got)
	}
	cfg.Adaptive = tune.Settings{}
	g2, _, _, _ := tunedGate(t, cfg)
	if got := (&adaptive.Runner{Gate: g2}).StepAges(ctx); len(got) != 0 {
		t.Errorf("no adaptive lane: ages %v; want none", got)
	}
}

// Each step's inputs are logged (debug), so a loop that holds says why.
func TestAdaptiveStepLogsItsInputs(t *testing.T) {
	cfg := settings.Default(nil, settings.ModeShadow)
	cfg.Adaptive = cfg.Adaptive.With("es2_knn", tune.LaneSettings{Mode: tune.Apply, Min: 1, Max: 10})
	g, _, _, _ := tunedGate(t, cfg)
	run := &adaptive.Runner{Gate: g}
	var buf strings.Builder
	g.Logger = slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx := context.Background()
	w := tune.Window{Calls: 4, SumMicros: 4 * 50000, MaxInFlight: 3, SumInFlight: 12}
	if err := run.Step(ctx, map[capgate.LaneName]tune.Window{capgate.LaneName("es2_knn"): w}); err != nil {
		t.Fatal(err)
	}
	var line map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if strings.Contains(l, `"adaptive step"`) {
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Fatal(err)
			}
		}
	}
	if line == nil || line["reason"] != "few calls" || line["calls"] != 4.0 || line["row_ms"] != 50.0 || line["from"] != 3.0 || line["to"] != 3.0 {
		t.Errorf("step line %v (log %s); want 4 calls of 50 ms, held at 3 for few calls", line, buf.String())
	}
}
