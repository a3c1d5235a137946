package capgate_test

import (
	"context"
	"testing"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/configtest"
	"github.com/capgate/capgate/lanetest"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/mock"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
	"github.com/capgate/capgate/status"
)

// ReadLanes reads the fixed lanes and the gate's own task lane with no key
// scan; Status lists the task and user lanes too.
func TestReadLanesScansNothing(t *testing.T) {
	ctx := t.Context()
	base := memory.New(nil)
	store := &mock.LaneStore{Base: base}
	cfg := settings.Default(nil, settings.ModeShadow)
	src := settings.NewFixed(cfg)
	g1, err := capgate.NewGate(store, src, nil, "task-1")
	if err != nil {
		t.Fatal(err)
	}
	g2, err := capgate.NewGate(base, src, nil, "task-2")
	if err != nil {
		t.Fatal(err)
	}
	call := lanetest.OCLCall("match", 1, true, false, "pam", "core")
	a1, a2 := g1.Admit(ctx, call), g2.Admit(ctx, call)
	defer a1.Release(ctx)
	defer a2.Release(ctx)

	var scans int
	store.KeysFn = func(ctx context.Context, prefix string) ([]string, error) {
		scans++
		return base.Keys(ctx, prefix)
	}
	st, local := g1.ReadLanes(ctx, cfg)
	if scans != 0 || local {
		t.Errorf("ReadLanes listed keys %d times (local %v), want none, from the store", scans, local)
	}
	if st.Store != status.OK || lanetest.SharedLane(t, st, "api_heavy").InFlight != 2 || lanetest.SharedLane(t, st, "es2_knn").InFlight != 2 ||
		lanetest.Entries(t, st, "tier")["core"].InFlight != 2 {
		t.Errorf("ReadLanes: %+v; want 2 in flight on api_heavy, es2_knn and tier core", st)
	}
	tasks := lanetest.Entries(t, st, "api_heavy_task")
	if want := (status.Lane{InFlight: 1, Limit: configtest.Number(t, cfg, "api_heavy.per_task")}); len(tasks) != 1 || tasks["task-1"] != want {
		t.Errorf("ReadLanes tasks %v, want only task-1: %+v", tasks, want)
	}
	if users := lanetest.Entries(t, st, "user"); len(users) != 0 {
		t.Errorf("ReadLanes users %v, want none", users)
	}
	full := g1.Status(ctx, cfg)
	tasks, users := lanetest.Entries(t, full, "api_heavy_task"), lanetest.Entries(t, full, "user")
	if scans != 2 || len(tasks) != 2 || users["pam"].InFlight != 2 {
		t.Errorf("Status: %d scans, tasks %v, users %v; want 2 scans, both tasks, pam with 2", scans, tasks, users)
	}

	store.CountFn = func(context.Context, []string, []int) error { return context.DeadlineExceeded }
	if st, local := g1.ReadLanes(ctx, cfg); st.Store == status.OK || local || len(st.Shared) != 0 || len(st.Keyed) != 0 {
		t.Errorf("ReadLanes with a failing store and no local lanes: %+v (local %v); want the error and no lanes", st, local)
	}
}

// The status lists a field lane's key values with a limit of their own
// (key_limits), with no call in flight too, each with its limit.
func TestStatusShowsKeyLimits(t *testing.T) {
	ctx := t.Context()
	p, err := policy.Parse("kl.yaml", []byte(keyLimitsPolicy))
	if err != nil {
		t.Fatal(err)
	}
	cfg := settings.Default(p, settings.ModeShadow)
	g, err := capgate.NewGate(memory.New(nil), settings.NewFixed(cfg), nil, "task-1")
	if err != nil {
		t.Fatal(err)
	}
	call := capgate.Call{Route: p.Route("chat"), Fields: policy.NewFields(p.Route("chat")), UserID: "u", Tier: "free"}
	call.Fields.SetString(0, "small")
	a := g.Admit(ctx, call)
	defer a.Release(ctx)
	got := lanetest.Entries(t, g.Status(ctx, cfg), "model")
	want := map[string]status.Lane{"small": {InFlight: 1, Limit: 2}, "large": {Limit: 1}}
	if len(got) != len(want) || got["small"] != want["small"] || got["large"] != want["large"] {
		t.Errorf("model entries %+v; want %+v", got, want)
	}
}
