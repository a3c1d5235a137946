package capgate_test

import (
	"context"
	"testing"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/mock"
	"github.com/capgate/capgate/status"
)

// ReadLanes reads the fixed lanes and the gate's own task lane with no key
// scan; Status lists the task and user lanes too.
func TestReadLanesScansNothing(t *testing.T) {
	ctx := t.Context()
	base := memory.New(nil)
	store := &mock.LaneStore{Base: base}
	cfg := capgate.DefaultConfig(capgate.ModeShadow)
	src := capgate.NewFixedConfig(cfg)
	g1, err := capgate.NewGate(store, src, nil, "task-1")
	if err != nil {
		t.Fatal(err)
	}
	g2, err := capgate.NewGate(base, src, nil, "task-2")
	if err != nil {
		t.Fatal(err)
	}
	call := capgate.Call{Endpoint: capgate.EndpointMatch, Rows: 1, Semantic: true, UserID: "pam", Tier: capgate.TierCore}
	a1, a2 := g1.Admit(ctx, call), g2.Admit(ctx, call)
	defer a1.Release(ctx)
	defer a2.Release(ctx)

	var scans int
	store.KeysFn = func(ctx context.Context, prefix string) ([]string, error) {
		scans++
		return base.Keys(ctx, prefix)
	}
	st := g1.ReadLanes(ctx, cfg)
	if scans != 0 {
		t.Errorf("ReadLanes listed keys %d times, want none", scans)
	}
	if st.Store != status.OK || st.APIHeavy.InFlight != 2 || st.ES2KNN.InFlight != 2 || st.Tiers[string(capgate.TierCore)].InFlight != 2 {
		t.Errorf("ReadLanes: %+v; want 2 in flight on api_heavy, es2_knn and tier core", st)
	}
	if want := (status.Lane{InFlight: 1, Limit: cfg.APIHeavy.PerTask}); len(st.Tasks) != 1 || st.Tasks["task-1"] != want {
		t.Errorf("ReadLanes tasks %v, want only task-1: %+v", st.Tasks, want)
	}
	if len(st.Users) != 0 {
		t.Errorf("ReadLanes users %v, want none", st.Users)
	}
	full := g1.Status(ctx, cfg)
	if scans != 2 || len(full.Tasks) != 2 || full.Users["pam"].InFlight != 2 {
		t.Errorf("Status: %d scans, tasks %v, users %v; want 2 scans, both tasks, pam with 2", scans, full.Tasks, full.Users)
	}

	store.CountFn = func(context.Context, []string, []int) error { return context.DeadlineExceeded }
	if st := g1.ReadLanes(ctx, cfg); st.Store == status.OK || st.APIHeavy != nil {
		t.Errorf("ReadLanes with a failing store: %+v; want the error and no lanes", st)
	}
}
