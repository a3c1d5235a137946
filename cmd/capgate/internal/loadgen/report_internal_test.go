package loadgen

import (
	"math"
	"testing"
	"time"
)

// The report of a fixed workload from known finish times: utilization,
// Jain over the users of equal demand, and the light users' slowdown.
func TestFixedWorkloadReport(t *testing.T) {
	s := time.Second
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := &run{
		cfg:   Config{Client: ClientPlain, Calls: 2, BottleneckLimit: 1, Duration: time.Minute},
		meter: &meter{busy: 8 * s, served: 8},
		start: start, end: start.Add(10 * s),
	}
	for _, u := range []struct {
		name   string
		calls  int
		done   int
		finish time.Duration
	}{
		{"heavy", 4, 40, 10 * s}, // 4 calls of 10 rows
		{"a", 0, 20, 8 * s},      // the config's 2 calls
		{"b", 0, 20, 4 * s},
	} {
		r.users = append(r.users, &userRun{User: User{Name: u.name, Tier: "core", Calls: u.calls},
			done: u.done, finish: u.finish, lat: map[string][]time.Duration{}})
	}
	rep := r.report()
	if got := rep.Utilization; math.Abs(got-0.8) > 1e-9 {
		t.Errorf("utilization %v, want 0.8 (8 s busy on 1 slot over 10 s)", got)
	}
	if rep.Ideal != 8*s || rep.Makespan != 10*s {
		t.Errorf("ideal %v, makespan %v; want 8s, 10s", rep.Ideal, rep.Makespan)
	}
	// Jain over a and b only (demand 2): rates 2.5 and 5 rows/s.
	if got, want := rep.Tiers[0].Fairness, (7.5*7.5)/(2*(25+6.25)); math.Abs(got-want) > 1e-9 {
		t.Errorf("Jain %v, want %v", got, want)
	}
	// Round-robin with 1 s calls on one slot: heavy, a, b, heavy, a, b,
	// heavy, heavy; the light users' shares are 5 s and 6 s, the earlier
	// one for b, who finished first.
	want := map[string]time.Duration{"heavy": 8 * s, "a": 6 * s, "b": 5 * s}
	for _, u := range rep.Users {
		if u.RRFinish != want[u.User] {
			t.Errorf("%s: round-robin finish %v, want %v", u.User, u.RRFinish, want[u.User])
		}
	}
	if got := rep.MaxSlowdown; math.Abs(got-8.0/6) > 1e-9 {
		t.Errorf("light users' worst slowdown %v, want 8/6 (a)", got)
	}
}
