package loadgen

import (
	"math"
	"strings"
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

// A utilization is reported only where the limit held the calls: not
// when some went past it (shadow-refused, unavailable), nor when it comes
// out over 1; the report says why instead of printing the number.
func TestUtilizationOnlyWhereItMeansSomething(t *testing.T) {
	s := time.Second
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name      string
		busy      time.Duration
		decisions map[string]int
		note      string // a part of the note; "" for none
	}{
		{"enforce", 8 * s, map[string]int{"admitted": 8, "refused": 3}, ""},
		{"shadow", 8 * s, map[string]int{"admitted": 2, "shadow-refused": 6}, "6 shadow-refused"},
		{"store down", 8 * s, map[string]int{"unavailable": 8}, "8 unavailable"},
		{"over 1", 111 * s, map[string]int{"admitted": 8}, "11.100 is over 1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &run{cfg: Config{Client: ClientPlain, BottleneckLimit: 1, Duration: time.Minute},
				meter: &meter{busy: c.busy, served: 8, decisions: c.decisions}, start: start, end: start.Add(10 * s)}
			rep := r.report()
			var out strings.Builder
			rep.Write(&out)
			if c.note == "" {
				if rep.UtilizationNote != "" || !strings.Contains(out.String(), "bottleneck utilization 0.800 (limit 1)") {
					t.Errorf("note %q, report %q; want utilization 0.800", rep.UtilizationNote, out.String())
				}
				return
			}
			if !strings.Contains(rep.UtilizationNote, c.note) || !strings.Contains(out.String(), "not meaningful") ||
				strings.Contains(out.String(), "ideal") {
				t.Errorf("note %q, report %q; want a note with %q and no number", rep.UtilizationNote, out.String(), c.note)
			}
		})
	}
}
