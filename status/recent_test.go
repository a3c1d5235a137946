package status_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/capgate/capgate/status"
)

// Decisions over the last 1, 5 and 15 minutes, on a fake clock: a call
// counts in every window that reaches its minute, and leaves them as they
// pass.
func TestRecentDecisions(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 30, 0, time.UTC)
	r := status.NewRecent(func() time.Time { return now })
	r.Record("preview", "shadow-refused", nil, "user")
	now = now.Add(3 * time.Minute)
	r.Record("preview", "admitted", []string{"api_heavy", "user"}, "")
	r.Record("core", "refused", nil, "api_heavy_task")
	now = now.Add(30 * time.Second)
	r.Record("core", "admitted", []string{"api_heavy"}, "")

	got, _ := json.Marshal(r.Decisions())
	want := `{"window_minutes":[1,5,15],` +
		`"by_tier":{"core":{"admitted":[1,1,1],"refused":[1,1,1]},"preview":{"admitted":[1,1,1],"shadow-refused":[0,1,1]}},` +
		`"by_lane":{"api_heavy":{"admitted":[2,2,2]},"api_heavy_task":{"refused":[1,1,1]},"user":{"admitted":[1,1,1],"shadow-refused":[0,1,1]}}}`
	if string(got) != want {
		t.Errorf("decisions\n%s\nwant\n%s", got, want)
	}

	// Ten minutes on, only the 15-minute window still holds them; past
	// it, none.
	now = now.Add(10 * time.Minute)
	d := r.Decisions()
	if c := d.ByTier["preview"]["shadow-refused"]; c[0] != 0 || c[1] != 0 || c[2] != 1 {
		t.Errorf("13.5 min on: preview shadow-refused %v, want [0 0 1]", c)
	}
	now = now.Add(5 * time.Minute)
	r.Record("staff", "admitted", []string{"api_heavy"}, "")
	d = r.Decisions()
	if len(d.ByTier) != 1 || d.ByTier["staff"]["admitted"][0] != 1 {
		t.Errorf("after 15 min: %v, want only the new call", d.ByTier)
	}
}

func TestBindingLane(t *testing.T) {
	st := ocl(status.Snapshot{},
		&status.Lane{InFlight: 2, Limit: 4, BulkLimit: ptr(3), Waiting: 22},
		&status.Lane{InFlight: 1, Limit: 3, Waiting: 5},
		map[string]status.Lane{"gw1": {InFlight: 2, Limit: 2, Waiting: 22}},
		map[string]status.Lane{"preview": {InFlight: 2, Limit: 2, Waiting: 3}, "core": {InFlight: 0, Limit: 4}}, nil)
	// api_heavy has the most waiting too, but slots free: the calls wait
	// on the full task lane.
	if got := status.BindingLane(st); got != "task:gw1" {
		t.Errorf("binding %q, want task:gw1", got)
	}
	st.Keyed[0].Entries["gw1"] = status.Lane{InFlight: 1, Limit: 2, Waiting: 22}
	if got := status.BindingLane(st); got != "tier:preview" {
		t.Errorf("binding %q, want tier:preview", got)
	}
	// Shadow: nobody waits; the fullest full lane.
	st = ocl(status.Snapshot{}, &status.Lane{InFlight: 9, Limit: 4, BulkLimit: ptr(3)}, nil, nil,
		map[string]status.Lane{"preview": {InFlight: 3, Limit: 2}}, nil)
	if got := status.BindingLane(st); got != "api_heavy" {
		t.Errorf("shadow binding %q, want api_heavy (9 of 3)", got)
	}
	if got := status.BindingLane(ocl(status.Snapshot{}, &status.Lane{InFlight: 1, Limit: 4, BulkLimit: ptr(3)}, nil, nil, nil, nil)); got != "" {
		t.Errorf("no full lane: binding %q, want none", got)
	}
}
