package loadgen_test

import (
	"context"
	"testing"
	"time"

	"github.com/capgate/capgate/configtest"
	"github.com/capgate/capgate/loadgen"
	"github.com/capgate/capgate/settings"
)

// oneSlot is enforce for every call with one slot on the task lane, the
// bottleneck.
func oneSlot(t testing.TB) settings.Config {
	c := tight(t, settings.ModeEnforce)
	c.EnforceFor = settings.EnforceAll
	configtest.SetNumbers(t, &c, "api_heavy.per_task", 1, "per_user.core", 4, "tiers.core", 4)
	return c
}

// The three clients against a real gateway: two users with two calls each
// sent at once, through a lane of one slot.
func TestClientModes(t *testing.T) {
	if testing.Short() {
		t.Skip("runs load for a few seconds")
	}
	const users, calls, rows = 2, 2, 10
	for _, mode := range []string{loadgen.ClientPlain, loadgen.ClientRetryAfter, loadgen.ClientAware} {
		t.Run(mode, func(t *testing.T) {
			s := newStack(t, oneSlot(t))
			rep, err := loadgen.Run(context.Background(), loadgen.Config{
				BaseURL: s.gw.URL, Users: s.users[:users], Client: mode, Calls: calls, Workers: calls,
				BulkRows: [2]int{rows, rows}, BottleneckLimit: 1, Duration: 30 * time.Second, Grace: time.Second,
			}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Client != mode {
				t.Errorf("report says client %q", rep.Client)
			}
			st := s.api.Stats()
			if st.Peak > 1 {
				t.Errorf("the API ran %d calls at once through a lane of 1", st.Peak)
			}
			if rep.Served != st.Calls || rep.Busy <= 0 || rep.Makespan <= 0 {
				t.Errorf("served %d (API saw %d), busy %s, makespan %s", rep.Served, st.Calls, rep.Busy, rep.Makespan)
			}
			done, failed := 0, rep.Failed()
			for _, u := range rep.Users {
				done += u.RowsDone
				if u.Demand != calls {
					t.Errorf("%s: demand %d, want %d", u.User, u.Demand, calls)
				}
			}
			switch mode {
			case loadgen.ClientPlain:
				// Sent once each, never again: every 429 is a failed call.
				if rep.Total429 == 0 || rep.Served+rep.Total429 != users*calls || failed != rep.Total429*rows {
					t.Errorf("plain: served %d, 429s %d, rows failed %d; want every call sent once and each 429 failed",
						rep.Served, rep.Total429, failed)
				}
			default:
				// Refused calls come back until they run.
				if failed != 0 || done != users*calls*rows || rep.Served != users*calls {
					t.Errorf("%s: rows done %d failed %d, served %d; want all %d calls run", mode, done, failed, rep.Served, users*calls)
				}
				if rep.Total429 == 0 {
					t.Errorf("%s: no 429: the lane never filled, the test tests nothing", mode)
				}
			}
		})
	}
}

func TestUtilization(t *testing.T) {
	for _, c := range []struct {
		busy  time.Duration
		limit int
		span  time.Duration
		want  float64
	}{
		{20 * time.Second, 2, 10 * time.Second, 1},
		{15 * time.Second, 2, 10 * time.Second, 0.75},
		{5 * time.Second, 1, 20 * time.Second, 0.25},
		{5 * time.Second, 0, 20 * time.Second, 0},
		{5 * time.Second, 2, 0, 0},
	} {
		if got := loadgen.Utilization(c.busy, c.limit, c.span); got < c.want-1e-9 || got > c.want+1e-9 {
			t.Errorf("Utilization(%s, %d, %s) = %v, want %v", c.busy, c.limit, c.span, got, c.want)
		}
	}
}

func TestRoundRobinFinish(t *testing.T) {
	s := time.Second
	for _, c := range []struct {
		calls []int
		limit int
		want  []time.Duration
	}{
		// Six users of four calls on two slots: pairs take turns, so the
		// pairs finish in the last three rounds.
		{[]int{4, 4, 4, 4, 4, 4}, 2, []time.Duration{10 * s, 10 * s, 11 * s, 11 * s, 12 * s, 12 * s}},
		// A heavy user doesn't delay a light one past its turn.
		{[]int{3, 1}, 1, []time.Duration{4 * s, 2 * s}},
		{[]int{8, 1, 1}, 2, []time.Duration{5 * s, 1 * s, 2 * s}},
		{[]int{0, 2}, 1, []time.Duration{0, 2 * s}},
	} {
		got := loadgen.RoundRobinFinish(c.calls, c.limit, s)
		for i := range c.want {
			if got[i] != c.want[i] {
				t.Errorf("RoundRobinFinish(%v, %d) = %v, want %v", c.calls, c.limit, got, c.want)
				break
			}
		}
	}
}
