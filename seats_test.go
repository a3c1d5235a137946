package capgate_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/lanetest"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/mock"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
)

// seatsPolicy has one heavy route, job, whose cost in the pool lane (4
// seats) is the length of its body's "items" (at most 8); every job takes
// one seat in its user's lane (6) and in the task lane (10).
const seatsPolicy = `version: 1
name: seats
routes:
  - name: job
    method: POST
    path: {exact: /job}
    fields:
      items: {body_array_len: items}
    seats:
      pool: {field: items, per: 1, max: 8}
identity:
  resolver: header
  scheme: Bearer
  default_tier: all
lanes:
  - name: pool
    scope: cluster
    routes: [job]
    limit: 4
  - name: tasks
    scope: task
    routes: [job]
    limit: 10
  - name: user
    scope: key
    key: user
    routes: [job]
    limit: 6
names:
  header_prefix: Capgate-
  refusal: {detail: "Busy: retry in {retry_after} seconds.", error_code: busy}
  log_event: capgate_call
`

func parseSeatsPolicy(t *testing.T) *policy.Policy {
	t.Helper()
	p, err := policy.Parse("seats.yaml", []byte(seatsPolicy))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// job is a call of the seats policy's route with n items, by user.
func job(p *policy.Policy, n int, user string) capgate.Call {
	r := p.Route("job")
	f := policy.NewFields(r)
	f.SetInt(r.Field("items"), n)
	return capgate.Call{Route: r, Fields: f, UserID: user, Tier: "all"}
}

// seatsEnv is a gate under the seats policy, enforcing, over a memory store
// (reached through a mock that can be made to fail).
type seatsEnv struct {
	p     *policy.Policy
	mem   *memory.Store
	store *mock.LaneStore
	cfg   *settings.Fixed
	gate  *capgate.Gate
	lines *mock.Sink
}

func newSeatsEnv(t *testing.T, edit func(*settings.Config)) *seatsEnv {
	t.Helper()
	return newSeatsEnvOn(t, edit, false)
}

// newSeatsEnvOn is newSeatsEnv; with direct the gate uses the memory store
// itself, waitlist and all, not through the mock.
func newSeatsEnvOn(t *testing.T, edit func(*settings.Config), direct bool) *seatsEnv {
	t.Helper()
	p := parseSeatsPolicy(t)
	c := settings.Default(p, settings.ModeEnforce)
	c.EnforceFor = settings.EnforceAll
	c.Wait.MaxSeconds = 0
	if edit != nil {
		edit(&c)
	}
	e := &seatsEnv{p: p, mem: memory.New(nil), cfg: settings.NewFixed(c), lines: &mock.Sink{}}
	e.store = &mock.LaneStore{Base: e.mem}
	var store capgate.LaneStore = e.store
	if direct {
		store = e.mem
	}
	g, err := capgate.NewGate(store, e.cfg, e.lines, "task-a")
	if err != nil {
		t.Fatal(err)
	}
	e.gate = g
	t.Cleanup(func() { _ = g.Close(context.WithoutCancel(t.Context())) })
	return e
}

func (e *seatsEnv) admit(t *testing.T, n int, user string) *capgate.Admission {
	t.Helper()
	a := e.gate.Admit(t.Context(), job(e.p, n, user))
	t.Cleanup(func() { a.Release(context.WithoutCancel(t.Context())) })
	return a
}

// count returns the seats held in the lane key of name (a cluster lane's
// key, or a keyed lane's with id).
func (e *seatsEnv) count(t *testing.T, key string) int {
	t.Helper()
	counts := make([]int, 1)
	if err := e.mem.Count(t.Context(), []string{e.p.Names.KeyPrefix + ":" + key}, counts); err != nil {
		t.Fatal(err)
	}
	return counts[0]
}

// A call takes its seats in every lane it counts in, all or nothing; a
// lane is full for it when its seats don't fit beside the count; the
// counts it reports, its line and Retry-After are in seats.
func TestSeatsAreTakenAllOrNothing(t *testing.T) {
	e := newSeatsEnv(t, nil)
	three := e.admit(t, 3, "ann")
	mustDecide(t, three, capgate.DecisionAdmitted)
	if got := lanetest.LaneCounts(three); got["pool"] != 3 || got["user"] != 1 || got["tasks"] != 1 {
		t.Fatalf("counts %v; want pool 3, user 1, tasks 1", got)
	}
	if n := e.count(t, "pool"); n != 3 {
		t.Fatalf("pool holds %d seats; want 3", n)
	}

	// Two seats don't fit beside three of four: refused, nothing taken
	// anywhere (not in the user's or the task's lane either), one seat
	// ahead.
	two := e.admit(t, 2, "bob")
	mustDecide(t, two, capgate.DecisionRefused)
	if two.Outcome().Scope != "pool" {
		t.Errorf("scope %q; want pool", two.Outcome().Scope)
	}
	if s := two.Outcome().RetryAfter; s != settings.Default(e.p, settings.ModeEnforce).RetryAfter.Base {
		t.Errorf("Retry-After %d; want base × 1 seat ahead", s)
	}
	if n := e.count(t, "user:bob"); n != 0 {
		t.Errorf("a refused call left %d seats in its user's lane", n)
	}
	if n := e.count(t, "tasks:task-a"); n != 1 {
		t.Errorf("tasks holds %d; want 1", n)
	}

	// One seat fits.
	one := e.admit(t, 1, "bob")
	mustDecide(t, one, capgate.DecisionAdmitted)
	if got := lanetest.LaneCounts(one)["pool"]; got != 4 {
		t.Errorf("pool count after a one-seat call %d; want 4", got)
	}

	three.Release(t.Context())
	if n := e.count(t, "pool"); n != 1 {
		t.Errorf("after releasing the 3-seat call the pool holds %d; want 1", n)
	}
	rec := three.Record()
	line := string(rec.AppendJSON(nil))
	if !strings.Contains(line, `"pool_in_flight":3,`) || !strings.Contains(line, `"seats":{"pool":3}`) {
		t.Errorf("line %s; want pool_in_flight 3 and seats {\"pool\":3}", line)
	}
	rec = one.Record()
	if l := string(rec.AppendJSON(nil)); strings.Contains(l, `"seats"`) {
		t.Errorf("a one-seat call's line has seats: %s", l)
	}
}

// A call's seats are capped at the lane's limit: the biggest call runs
// alone, it is never unrunnable; and it runs only alone.
func TestSeatsAreCappedAtTheLimit(t *testing.T) {
	e := newSeatsEnv(t, nil)
	big := e.admit(t, 8, "ann") // 8 seats, capped at the pool's 4
	mustDecide(t, big, capgate.DecisionAdmitted)
	if n := e.count(t, "pool"); n != 4 {
		t.Fatalf("pool holds %d; want 4 (8 capped at the limit)", n)
	}
	mustDecide(t, e.admit(t, 1, "bob"), capgate.DecisionRefused)
	big.Release(t.Context())

	small := e.admit(t, 1, "bob")
	mustDecide(t, small, capgate.DecisionAdmitted)
	mustDecide(t, e.admit(t, 8, "ann"), capgate.DecisionRefused) // not beside anyone

	// A limit lowered to 2: the same call now takes 2.
	small.Release(t.Context())
	e.cfg.Edit(func(c *settings.Config) {
		if err := c.SetNumber("lanes.pool", 2); err != nil {
			t.Fatal(err)
		}
	})
	mustDecide(t, e.admit(t, 8, "ann"), capgate.DecisionAdmitted)
	if n := e.count(t, "pool"); n != 2 {
		t.Errorf("pool holds %d; want 2", n)
	}
}

// In shadow mode a call that doesn't fit still takes its seats (forced):
// the counts stay true to what runs.
func TestSeatsShadowForcesAllSeats(t *testing.T) {
	e := newSeatsEnv(t, func(c *settings.Config) { c.Mode = settings.ModeShadow })
	mustDecide(t, e.admit(t, 3, "ann"), capgate.DecisionAdmitted)
	a := e.admit(t, 3, "bob")
	mustDecide(t, a, capgate.DecisionShadowRefused)
	if n := e.count(t, "pool"); n != 6 {
		t.Errorf("pool holds %d; want 6 (both calls' seats)", n)
	}
}

// A big call waits for its seats: it is granted once enough are free, and
// its counts then are the grant's (room for all its seats).
func TestSeatsWaitForEnoughSeats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newSeatsEnvOn(t, func(c *settings.Config) {
			c.Wait = settings.Wait{MaxSeconds: 20, MaxWaiting: 10, MaxWaitingPerUser: 5}
		}, true)
		a := e.gate.Admit(t.Context(), job(e.p, 1, "ann"))
		b := e.gate.Admit(t.Context(), job(e.p, 1, "bob"))
		mustDecide(t, a, capgate.DecisionAdmitted)
		mustDecide(t, b, capgate.DecisionAdmitted)
		ch := make(chan *capgate.Admission, 1)
		go func() { ch <- e.gate.Admit(t.Context(), job(e.p, 3, "cat")) }()
		synctest.Wait()
		select {
		case <-ch:
			t.Fatal("3 seats granted beside 2 of 4")
		default:
		}
		a.Release(t.Context()) // 3 free: enough
		big := <-ch
		defer big.Release(t.Context())
		mustDecide(t, big, capgate.DecisionAdmitted)
		if ok := big.Outcome().Queued; !ok {
			t.Error("the big call did not wait")
		}
		if got := lanetest.LaneCounts(big)["pool"]; got != 4 {
			t.Errorf("pool count of the granted call %d; want 4 (1 + its 3)", got)
		}
		if n := e.count(t, "pool"); n != 4 {
			t.Errorf("pool holds %d; want 4", n)
		}
		b.Release(t.Context())
	})
}

// While the store is out, the local lanes count seats too, under the
// degraded limits: the pool's 4 is this gateway's alone (no other seen),
// so a 3-seat call and a 2-seat call can't both run.
func TestSeatsInTheLocalLanes(t *testing.T) {
	e := newSeatsEnv(t, nil)
	e.gate.Local = memory.New(nil)
	e.store.AcquireFn = func(context.Context, capgate.AcquireRequest, []int) (bool, error) {
		return false, errors.New("store down")
	}
	// Admitted by the local lanes: "unavailable" (the store's count is
	// unknown), degraded.
	first := e.admit(t, 3, "ann")
	mustDecide(t, first, capgate.DecisionUnavailable)
	if !first.Outcome().Degraded {
		t.Fatal("not decided by the local lanes")
	}
	if got := lanetest.LaneCounts(first)["pool"]; got != 3 {
		t.Errorf("local pool count %d; want 3", got)
	}
	second := e.admit(t, 2, "bob")
	if second.Outcome().Decision != capgate.DecisionRefused {
		t.Errorf("a 2-seat call beside 3 of 4 local seats: %q; want refused", second.Outcome().Decision)
	}
	third := e.admit(t, 1, "bob")
	mustDecide(t, third, capgate.DecisionUnavailable)
	first.Release(t.Context())
	third.Release(t.Context())
	counts := make([]int, 1)
	if err := e.gate.Local.Count(t.Context(), []string{e.p.Names.KeyPrefix + ":pool"}, counts); err != nil || counts[0] != 0 {
		t.Errorf("local pool after release %d (%v); want 0", counts[0], err)
	}
}

// Why: a call's seats were its route's cost capped at the lane's limit
// plus what it may borrow, which wraps for a limit near 2^63, and a store
// takes a member per seat. The gate caps a call's seats at
// capgate.MaxSeats too (what every store accepts), so a huge count in a
// lane of a huge limit is admitted, never a store error that would open
// the skip window, and a field of math.MaxInt never wraps to 1 seat.
func TestSeatsAtTheInt64Edge(t *testing.T) {
	for _, tc := range []struct {
		name  string
		limit int
		items int
		want  int
	}{
		{"the lane's limit", 4, math.MaxInt, 4},
		{"MaxSeats", math.MaxInt, math.MaxInt, capgate.MaxSeats},
		{"limit MaxInt, few items", math.MaxInt, 3, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newSeatsEnvOn(t, func(c *settings.Config) {
				if err := c.SetNumber("lanes.pool", tc.limit); err != nil {
					t.Fatal(err)
				}
			}, true)
			e.p.Route("job").Seats["pool"] = policy.Seats{Field: "items", Per: 1, Max: 1_000_000} // Parse's largest
			a := e.admit(t, tc.items, "ann")
			mustDecide(t, a, capgate.DecisionAdmitted)
			if got := lanetest.LaneCounts(a)["pool"]; got != tc.want {
				t.Errorf("pool count %d; want %d", got, tc.want)
			}
			a.Release(t.Context())
		})
	}
}
