package capgate_test

import (
	"context"
	"strings"
	"testing"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/idempotency"
	"github.com/capgate/capgate/lanetest"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/mock"
	"github.com/capgate/capgate/settings"
)

// An empty task id would give every gateway the same api_heavy_task lane:
// the per-task limit would act cluster-wide. NewGate refuses it.
func TestNewGateRefusesAnEmptyTaskID(t *testing.T) {
	cfg := settings.NewFixed(settings.Default(nil, settings.ModeEnforce))
	g, err := capgate.NewGate(memory.New(nil), cfg, nil, "")
	if err == nil || g != nil || !strings.Contains(err.Error(), "task id") {
		t.Fatalf("NewGate(task \"\") = %v, %v; want no gate and an error naming the task id", g, err)
	}
	if g, err := capgate.NewGate(memory.New(nil), cfg, nil, "task-a"); err != nil || g.TaskID != "task-a" {
		t.Fatalf("NewGate(task-a) = %+v, %v; want a gate on task-a", g, err)
	}
}

// A gate built by hand without a task id doesn't share one task lane with
// every other such gate: its calls go unavailable (uncounted, never
// refused), the line saying why.
func TestAGateWithoutATaskIDCountsNoTaskLane(t *testing.T) {
	store := memory.New(nil)
	g := &capgate.Gate{Store: store, Source: settings.NewFixed(settings.Default(nil, settings.ModeEnforce))}
	a := g.Admit(context.Background(), lanetest.OCLCall("match", 2, true, false, "ann", "core"))
	defer a.Release(context.Background())
	if o := a.Outcome(); o.Decision != capgate.DecisionUnavailable || o.Counted {
		t.Fatalf("decision %q, counted %v; want unavailable and uncounted", o.Decision, o.Counted)
	}
	if err := a.Err(); err == nil || !strings.Contains(err.Error(), "task id") {
		t.Fatalf("error %v; want one naming the task id", err)
	}
}

// A config the gate can't decide by (the zero Config of settings.NewFixed
// or a zero settings.Fixed) makes its calls unavailable, saying why, and
// is never counted as a store failure: the next call under a good config
// is decided, not "skipped: Redis failed recently".
func TestAZeroConfigIsNotAStoreFailure(t *testing.T) {
	ctx := context.Background()
	for name, src := range map[string]*settings.Fixed{"NewFixed(Config{})": settings.NewFixed(settings.Config{}), "zero Fixed": new(settings.Fixed)} {
		t.Run(name, func(t *testing.T) {
			g, err := capgate.NewGate(memory.New(nil), src, nil, "task-a")
			if err != nil {
				t.Fatal(err)
			}
			a := g.Admit(ctx, lanetest.Match("p", "preview"))
			a.Release(ctx)
			if a.Outcome().Decision != capgate.DecisionUnavailable || a.Err() == nil || !strings.Contains(a.Err().Error(), "config") {
				t.Fatalf("under the zero config: %v, %v; want unavailable, naming the config", a.Outcome().Decision, a.Err())
			}
			src.Set(settings.Default(nil, settings.ModeEnforce))
			b := g.Admit(ctx, lanetest.Match("p", "preview"))
			b.Release(ctx)
			if b.Outcome().Decision != capgate.DecisionAdmitted {
				t.Fatalf("under a good config after it: %v, %v; want admitted (no skip window)", b.Outcome().Decision, b.Err())
			}
		})
	}
}

// A gate with no store or no config source would make every call
// unavailable: NewGate refuses it.
func TestNewGateRefusesNoStoreOrNoConfig(t *testing.T) {
	cfg := settings.NewFixed(settings.Default(nil, settings.ModeShadow))
	if g, err := capgate.NewGate(nil, cfg, nil, "task-a"); err == nil || g != nil {
		t.Errorf("NewGate(nil store) = %v, %v; want an error", g, err)
	}
	if g, err := capgate.NewGate(memory.New(nil), nil, nil, "task-a"); err == nil || g != nil {
		t.Errorf("NewGate(nil config) = %v, %v; want an error", g, err)
	}
}

// A mode in another case is that mode, not shadow; no mode, or a word
// that is none of the three, is shadow (the boot default's rule), and
// whatever Default returns passes Check.
func TestDefaultModeIsReadNotGuessed(t *testing.T) {
	for in, want := range map[settings.Mode]settings.Mode{"Enforce": settings.ModeEnforce, " OFF ": settings.ModeOff,
		"": settings.ModeShadow, "shadow": settings.ModeShadow, "enforcing": settings.ModeShadow} {
		c := settings.Default(nil, in)
		if c.Mode != want || c.Check() != nil {
			t.Errorf("Default(nil, %q): mode %q, Check %v; want %q and no error", in, c.Mode, c.Check(), want)
		}
	}
}

// A store wrapped by mock.LaneStore offers what the store it wraps offers
// (its Caps, forwarded whole): calls wait on its waitlist, repeats join,
// status names where the lanes live.
func TestAWrappedStoreKeepsItsParts(t *testing.T) {
	base := memory.New(nil)
	wrapped := &mock.LaneStore{Base: base}
	bc, wc := base.Caps(), wrapped.Caps()
	if wc != bc || wc.Waitlist == nil || wc.Idempotency == nil || wc.Adaptive == nil || !wc.Bounded || wc.Kind != "memory" {
		t.Fatalf("mock.LaneStore{memory}.Caps() = %+v; want memory's %+v", wc, bc)
	}
	cfg := settings.Default(nil, settings.ModeShadow)
	cfg.Idempotency.Mode = settings.IdempotencyKey
	g, err := capgate.NewGate(wrapped, settings.NewFixed(cfg), nil, "task-a")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if st := g.Status(ctx, cfg); st.Lanes != "memory" {
		t.Errorf("status of a wrapped memory store: lanes %q, want memory", st.Lanes)
	}
	r, err := idempotency.New(g).Repeat(ctx, idempotency.RepeatRequest{ID: "id", CID: "c1", Fingerprint: "fp"})
	if err != nil || r.Outcome != idempotency.RepeatFirst {
		t.Fatalf("Repeat through a wrapped store = %+v, %v; want the first of its key", r, err)
	}
	r.Finish(ctx, nil)
}
