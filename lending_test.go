package capgate_test

import (
	"context"
	"reflect"
	"testing"
	"testing/synctest"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/configtest"
	"github.com/capgate/capgate/lanetest"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/mock"
	"github.com/capgate/capgate/settings"
	"github.com/capgate/capgate/status"
)

// lendEnv is a gate under the built-in policy, enforcing for all, with
// api_heavy the only lane that binds (cluster 4, reserve_single_row 1),
// over a memory store, the wait off unless asked.
type lendEnv struct {
	mem  *memory.Store
	cfg  *settings.Fixed
	gate *capgate.Gate
}

func newLendEnv(t *testing.T, lend int, wait bool) *lendEnv {
	t.Helper()
	c := settings.Default(nil, settings.ModeEnforce)
	c.EnforceFor = settings.EnforceAll
	configtest.SetNumbers(t, &c, "api_heavy.cluster", 4, "reserve_single_row", 1, "api_heavy.per_task", 50,
		"es2_knn", 50, "tiers.core", 50, "per_user.core", 50)
	c.Wait.MaxSeconds = 0
	if wait {
		c.Wait = settings.Wait{MaxSeconds: 20, MaxWaiting: 10, MaxWaitingPerUser: 5}
	}
	if lend > 0 {
		var err error
		if c, _, err = c.Apply(settings.Patch{"lending": map[string]any{"api_heavy": lend}}); err != nil {
			t.Fatal(err)
		}
	}
	e := &lendEnv{mem: memory.New(nil), cfg: settings.NewFixed(c)}
	g, err := capgate.NewGate(e.mem, e.cfg, &mock.Sink{}, "task-a")
	if err != nil {
		t.Fatal(err)
	}
	e.gate = g
	t.Cleanup(func() { _ = g.Close(context.WithoutCancel(t.Context())) })
	return e
}

func (e *lendEnv) admit(t *testing.T, call capgate.Call) *capgate.Admission {
	t.Helper()
	a := e.gate.Admit(t.Context(), call)
	t.Cleanup(func() { a.Release(context.WithoutCancel(t.Context())) })
	return a
}

func bulk(user string) capgate.Call   { return lanetest.OCLCall("match", 10, false, true, user, "core") }
func single(user string) capgate.Call { return lanetest.OCLCall("match", 1, false, true, user, "core") }

// Lending off, as by default: batch calls stop at limit − reserve, and the
// reserve waits for a single-row call.
func TestLendingOffKeepsTheReserve(t *testing.T) {
	e := newLendEnv(t, 0, false)
	for range 3 {
		mustDecide(t, e.admit(t, bulk("b")), capgate.DecisionAdmitted)
	}
	mustDecide(t, e.admit(t, bulk("b")), capgate.DecisionRefused)
	mustDecide(t, e.admit(t, single("s")), capgate.DecisionAdmitted)
}

// Lending on: with no single-row call in flight a batch call borrows the
// reserved seat (its line's limit says 4: what it was judged by); the
// class then finds the lane full (a running call is never cut), and gets
// the next seat that frees.
func TestLendingLetsBatchBorrowTheIdleReserve(t *testing.T) {
	e := newLendEnv(t, 1, false)
	var held []*capgate.Admission
	for range 3 {
		a := e.admit(t, bulk("b"))
		mustDecide(t, a, capgate.DecisionAdmitted)
		held = append(held, a)
	}
	fourth := e.admit(t, bulk("b"))
	mustDecide(t, fourth, capgate.DecisionAdmitted)
	if l := fourth.Outcome().Lanes[0]; l.Name != "api_heavy" || l.Limit != 4 {
		t.Errorf("the borrower's api_heavy %+v; want the limit it was judged by, 4", l)
	}
	if got := lanetest.LaneCounts(fourth)["api_heavy"]; got != 4 {
		t.Errorf("api_heavy count %d; want 4", got)
	}
	mustDecide(t, e.admit(t, bulk("b")), capgate.DecisionRefused)
	lookup := e.admit(t, single("s"))
	mustDecide(t, lookup, capgate.DecisionRefused)
	if lookup.Outcome().Scope != "api_heavy" {
		t.Errorf("scope %q; want api_heavy", lookup.Outcome().Scope)
	}
	held[0].Release(t.Context())
	mustDecide(t, e.admit(t, single("s")), capgate.DecisionAdmitted)
}

// While the class holds its reserve there is nothing to borrow: batch
// calls stop at limit − reserve beside it, as with lending off.
func TestLendingLendsOnlyIdleSeats(t *testing.T) {
	e := newLendEnv(t, 1, false)
	mustDecide(t, e.admit(t, single("s")), capgate.DecisionAdmitted)
	mustDecide(t, e.admit(t, bulk("b")), capgate.DecisionAdmitted)
	mustDecide(t, e.admit(t, bulk("b")), capgate.DecisionAdmitted)
	third := e.admit(t, bulk("b"))
	mustDecide(t, third, capgate.DecisionRefused)
	if l := third.Outcome().Lanes[0]; l.Limit != 3 {
		t.Errorf("api_heavy limit of a batch call beside the class %d; want 3 (nothing lent)", l.Limit)
	}
	// The class's own count lives under its class key, apart from the lane.
	counts := make([]int, 2)
	if err := e.mem.Count(t.Context(), []string{"ocl:capacity:api_heavy~single_row", "ocl:capacity:api_heavy"}, counts); err != nil {
		t.Fatal(err)
	}
	if counts[0] != 1 || counts[1] != 3 {
		t.Errorf("class key %d, lane %d; want 1 and 3", counts[0], counts[1])
	}
}

// With local lanes, as a gateway runs, the local pre-check lends as the
// store does: one gateway alone fills the whole limit with batch calls.
func TestLendingThroughTheLocalLanes(t *testing.T) {
	e := newLendEnv(t, 1, false)
	e.gate.Local = memory.New(nil)
	for range 4 {
		mustDecide(t, e.admit(t, bulk("b")), capgate.DecisionAdmitted)
	}
	mustDecide(t, e.admit(t, bulk("b")), capgate.DecisionRefused)
}

// With the wait on, a seat that frees goes to a waiting call of the class
// first, though a batch call queued before it.
func TestLendingWaitingClassGoesFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newLendEnv(t, 1, true)
		var held []*capgate.Admission
		for range 4 {
			a := e.gate.Admit(t.Context(), bulk("b"))
			mustDecide(t, a, capgate.DecisionAdmitted)
			held = append(held, a)
		}
		batch := make(chan *capgate.Admission, 1)
		go func() { batch <- e.gate.Admit(t.Context(), bulk("c")) }()
		synctest.Wait()
		lookup := make(chan *capgate.Admission, 1)
		go func() { lookup <- e.gate.Admit(t.Context(), single("s")) }()
		synctest.Wait()

		held[0].Release(t.Context())
		synctest.Wait()
		select {
		case a := <-lookup:
			mustDecide(t, a, capgate.DecisionAdmitted)
			a.Release(t.Context())
		case a := <-batch:
			t.Fatalf("the batch call got the freed seat (%q) while a single-row call waited", a.Outcome().Decision)
		}
		for _, a := range held[1:] {
			a.Release(t.Context())
		}
		a := <-batch
		mustDecide(t, a, capgate.DecisionAdmitted)
		a.Release(t.Context())
		held[0].Release(t.Context())
	})
}

// The status says how much a lane lends: bulk calls up to limit −
// reserve, and up to lend more while the reserve is idle; nothing when it
// lends nothing (the status is then as before lending).
func TestLendingInTheStatus(t *testing.T) {
	for _, lend := range []int{0, 1} {
		e := newLendEnv(t, lend, false)
		mustDecide(t, e.admit(t, bulk("b")), capgate.DecisionAdmitted)
		got := lanetest.SharedLane(t, e.gate.Status(t.Context(), e.cfg.Config(t.Context())), "api_heavy")
		want := status.Lane{InFlight: 1, Limit: 4, BulkLimit: lanetest.Int(3), Lend: lend}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("lend %d: api_heavy status %+v; want %+v", lend, got, want)
		}
	}
}
