package capgate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/answer"
	"github.com/capgate/capgate/configtest"
	"github.com/capgate/capgate/lanetest"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/settings"
)

// newLocalEnv is a faultEnv whose gate keeps local lanes, in local.
func newLocalEnv(t *testing.T) (*faultEnv, *memory.Store) {
	t.Helper()
	e := newFaultEnv(t)
	local := memory.New(nil)
	e.gate.Local = local
	return e, local
}

func localUserLane(t *testing.T, local *memory.Store, user string) int {
	t.Helper()
	counts := make([]int, 1)
	if err := local.Count(context.Background(), []string{"ocl:capacity:user:" + user}, counts); err != nil {
		t.Fatal(err)
	}
	return counts[0]
}

func (e *faultEnv) failAcquires(err error) {
	e.store.AcquireFn = func(context.Context, capgate.AcquireRequest, []int) (bool, error) {
		e.acquires.Add(1)
		return false, err
	}
}

func enforce(e *faultEnv, fn func(c *settings.Config)) {
	e.cfg.Edit(func(c *settings.Config) {
		c.Mode, c.EnforceFor = settings.ModeEnforce, settings.EnforceAll
		if fn != nil {
			fn(c)
		}
	})
}

// A flood from one user never reaches the store past what this gateway
// alone knows is full: with per_user 0, not one of 400 calls asks it.
func TestLocalLanesRefuseAFloodBeforeTheStore(t *testing.T) {
	for _, limit := range []int{0, 2} {
		t.Run(fmt.Sprint("per_user ", limit), func(t *testing.T) {
			e, local := newLocalEnv(t)
			enforce(e, func(c *settings.Config) {
				configtest.SetNumbers(t, c, "per_user.preview", limit, "tiers.preview", 100, "api_heavy.per_task", 100)
			})
			var (
				wg  sync.WaitGroup
				mu  sync.Mutex
				got = map[capgate.Decision][]*capgate.Admission{}
			)
			for range 400 {
				wg.Go(func() {
					a := e.gate.Admit(context.Background(), lanetest.Match("flood", "preview"))
					mu.Lock()
					got[a.Outcome().Decision] = append(got[a.Outcome().Decision], a)
					mu.Unlock()
				})
			}
			wg.Wait()
			if n := len(got[capgate.DecisionAdmitted]); n != limit {
				t.Errorf("admitted %d of 400, want exactly the limit %d", n, limit)
			}
			if n := len(got[capgate.DecisionRefused]); n != 400-limit {
				t.Errorf("refused %d, want %d (decisions %v)", n, 400-limit, keys(got))
			}
			if n := int(e.acquires.Load()); n != limit {
				t.Errorf("the store was asked %d times, want %d: the rest are refused locally", n, limit)
			}
			if r := got[capgate.DecisionRefused]; len(r) > 0 {
				h := http.Header{}
				answer.SetHeaders(h, r[0].Outcome())
				want := "5"
				if limit == 0 {
					want = "120" // paused
				}
				if r[0].Outcome().Scope != capgate.LaneName("user") || h.Get("Retry-After") != want {
					t.Errorf("refusal scope %q Retry-After %q, want user and %s", r[0].Outcome().Scope, h.Get("Retry-After"), want)
				}
			}
			for _, as := range got {
				for _, a := range as {
					a.Release(context.Background())
				}
			}
			if e.userLane(t, "flood") != 0 || localUserLane(t, local, "flood") != 0 {
				t.Errorf("lanes not empty after release: store %d, local %d", e.userLane(t, "flood"), localUserLane(t, local, "flood"))
			}
		})
	}
}

func keys(m map[capgate.Decision][]*capgate.Admission) map[capgate.Decision]int {
	out := map[capgate.Decision]int{}
	for k, v := range m {
		out[k] = len(v)
	}
	return out
}

// While the store fails, the local lanes hold the per-user limit: calls go
// ahead as unavailable and degraded, and the one past the limit is refused.
func TestDegradedLanesHoldThePerUserLimit(t *testing.T) {
	e, local := newLocalEnv(t)
	enforce(e, func(c *settings.Config) {
		configtest.SetNumbers(t, c, "per_user.preview", 2, "api_heavy.per_task", 10, "tiers.preview", 10)
	})
	e.failAcquires(errRefused)
	ctx := context.Background()
	a := e.gate.Admit(ctx, lanetest.Match("p", "preview"))
	b := e.gate.Admit(ctx, lanetest.Match("p", "preview")) // inside the skip window
	c := e.gate.Admit(ctx, lanetest.Match("p", "preview"))
	for i, x := range []*capgate.Admission{a, b} {
		if x.Outcome().Decision != capgate.DecisionUnavailable || !x.Outcome().Degraded || !x.Outcome().Counted || x.Outcome().Holding {
			t.Fatalf("call %d: decision %q degraded %v counted %v holding %v, want unavailable, degraded, counted locally only",
				i, x.Outcome().Decision, x.Outcome().Degraded, x.Outcome().Counted, x.Outcome().Holding)
		}
	}
	// The user's own limit is exact here: refused before the store.
	if c.Outcome().Decision != capgate.DecisionRefused || c.Outcome().Scope != capgate.LaneName("user") || c.Outcome().Counted {
		t.Fatalf("third call: decision %q scope %q counted %v, want refused on the user lane", c.Outcome().Decision, c.Outcome().Scope, c.Outcome().Counted)
	}
	if n := e.acquires.Load(); n != 1 {
		t.Fatalf("store acquires = %d, want 1 (then the skip window)", n)
	}
	if n := localUserLane(t, local, "p"); n != 2 {
		t.Fatalf("local user lane = %d, want 2", n)
	}
	for _, x := range []*capgate.Admission{a, b, c} {
		x.Release(ctx)
	}
	if n := localUserLane(t, local, "p"); n != 0 {
		t.Fatalf("local user lane = %d after release", n)
	}
	lines := e.lines.All(t)
	if len(lines) != 3 {
		t.Fatalf("%d log lines, want 3", len(lines))
	}
	for i, want := range []string{"unavailable", "unavailable", "refused"} {
		l := lines[i]
		if l["decision"] != want || (l["degraded"] == true) != (i < 2) {
			t.Errorf("line %d: decision %v degraded %v, want %s", i, l["decision"], l["degraded"], want)
		}
	}
	if lines[1]["user_in_flight"] != json.Number("2") || lines[1]["error"] != capgate.ErrSkipped.Error() {
		t.Errorf("second line: user_in_flight %v error %v", lines[1]["user_in_flight"], lines[1]["error"])
	}
}

// The cluster-wide lanes are divided among the gateways last seen, counted
// from the task lanes' keys while the store worked.
func TestDegradedLanesDivideTheClusterLanes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, _ := newLocalEnv(t)
		enforce(e, func(c *settings.Config) {
			configtest.SetNumbers(t, c, "api_heavy.cluster", 7, "reserve_single_row", 1, "api_heavy.per_task", 10)
			configtest.SetNumbers(t, c, "tiers.preview", 10, "per_user.preview", 10, "es2_knn", 10)
		})
		ctx := context.Background()
		// Two other gateways have calls in flight.
		for _, task := range []string{"task-b", "task-c"} {
			g, err := capgate.NewGate(e.mem, e.cfg, nil, task)
			if err != nil {
				t.Fatal(err)
			}
			defer g.Admit(ctx, lanetest.Match("other-"+task, "preview")).Release(ctx)
		}
		first := e.gate.Admit(ctx, lanetest.Match("p", "preview"))
		defer first.Release(ctx)
		synctest.Wait() // the gateways are counted after the store answered

		e.failAcquires(errRefused)
		// bulk limit 6 over 3 gateways: 2 here, one of them taken by first.
		a := e.gate.Admit(ctx, lanetest.Match("p", "preview"))
		defer a.Release(ctx)
		b := e.gate.Admit(ctx, lanetest.Match("p", "preview"))
		defer b.Release(ctx)
		if a.Outcome().Decision != capgate.DecisionUnavailable || !a.Outcome().Degraded {
			t.Fatalf("second call: decision %q degraded %v", a.Outcome().Decision, a.Outcome().Degraded)
		}
		if b.Outcome().Decision != capgate.DecisionRefused || b.Outcome().Scope != capgate.LaneName("api_heavy") || !b.Outcome().Degraded {
			t.Fatalf("third call: decision %q scope %q, want refused on api_heavy", b.Outcome().Decision, b.Outcome().Scope)
		}
		if got := lanetest.LaneLimits(b)[capgate.LaneName("api_heavy")]; got != 2 {
			t.Fatalf("degraded api_heavy limit = %d, want 6/3 = 2", got)
		}
	})
}

// In shadow the local lanes only count, for the log; nothing is refused.
func TestDegradedLanesOnlyCountInShadow(t *testing.T) {
	e, _ := newLocalEnv(t)
	e.failAcquires(errRefused)
	ctx := context.Background()
	for range 3 {
		a := e.gate.Admit(ctx, lanetest.Match("p", "preview"))
		defer a.Release(ctx)
		if a.Outcome().Decision != capgate.DecisionUnavailable || a.Outcome().Decision == capgate.DecisionRefused || !a.Outcome().Degraded {
			t.Fatalf("shadow: decision %q degraded %v", a.Outcome().Decision, a.Outcome().Degraded)
		}
		h := http.Header{}
		answer.SetHeaders(h, a.Outcome())
		if h.Get("Retry-After") != "" {
			t.Fatalf("shadow call has Retry-After %q", h.Get("Retry-After"))
		}
	}
	if got := lanetest.LaneCounts(e.gate.Admit(ctx, lanetest.Match("p", "preview")))[capgate.LaneName("user")]; got != 4 {
		t.Fatalf("local user count = %d, want 4", got)
	}
}

// A store too busy to send the acquire is no store failure: the window
// stays shut. Without local lanes an enforced call is refused (nothing
// could count it) and a shadow one goes ahead; with them, they decide.
func TestABusyStoreIsNotAFailure(t *testing.T) {
	busy := fmt.Errorf("acquire lanes: %w", capgate.ErrBusy)
	ctx := context.Background()

	e := newFaultEnv(t)
	e.failAcquires(busy)
	a := e.gate.Admit(ctx, lanetest.Match("p", "preview"))
	a.Release(ctx)
	if a.Outcome().Decision != capgate.DecisionUnavailable || e.gate.Skipping() {
		t.Fatalf("shadow: decision %q, skipping %v", a.Outcome().Decision, e.gate.Skipping())
	}
	enforce(e, nil)
	b := e.gate.Admit(ctx, lanetest.Match("p", "preview"))
	b.Release(ctx)
	h := http.Header{}
	answer.SetHeaders(h, b.Outcome())
	if b.Outcome().Decision != capgate.DecisionRefused || b.Outcome().Scope != capgate.LaneName("api_heavy_task") || h.Get("Retry-After") != "5" || e.gate.Skipping() {
		t.Fatalf("enforced: decision %q scope %q Retry-After %q skipping %v; want refused on api_heavy_task after 5 s",
			b.Outcome().Decision, b.Outcome().Scope, h.Get("Retry-After"), e.gate.Skipping())
	}
	if got := string(answer.Refusal(b.Outcome())); got != `{"detail":"Matching is busy. Please retry in 5 seconds.","error_code":"capacity_exceeded","scope":"api_heavy_task","paused":false,"retry_after":5}` {
		t.Fatalf("refusal body %s", got)
	}

	e, _ = newLocalEnv(t)
	enforce(e, nil)
	e.failAcquires(busy)
	c := e.gate.Admit(ctx, lanetest.Match("p", "preview"))
	c.Release(ctx)
	if c.Outcome().Decision != capgate.DecisionUnavailable || !c.Outcome().Degraded || e.gate.Skipping() {
		t.Fatalf("with local lanes: decision %q degraded %v skipping %v", c.Outcome().Decision, c.Outcome().Degraded, e.gate.Skipping())
	}
}

// A degraded call renews its local leases like any other, so a long call
// keeps its place past lease_seconds.
func TestDegradedCallKeepsItsLocalLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, local := newLocalEnv(t)
		e.failAcquires(errRefused)
		ctx := context.Background()
		a := e.gate.Admit(ctx, lanetest.Match("p", "preview"))
		time.Sleep(200 * time.Second) // lease 60 s, renewed every 20 s
		synctest.Wait()
		if n := localUserLane(t, local, "p"); n != 1 {
			t.Fatalf("local user lane = %d after 200 s, want the lease kept", n)
		}
		a.Release(ctx)
		if n := localUserLane(t, local, "p"); n != 0 {
			t.Fatalf("local user lane = %d after release", n)
		}
	})
}

// A release that fails is retried in the background until it is done;
// Close waits for the retries.
func TestFailedReleaseIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newFaultEnv(t)
		fails := 3
		e.store.ReleaseFn = func(ctx context.Context, token string, keys []string) error {
			e.releases.Add(1)
			if fails > 0 { // one goroutine at a time: the call, then the retrier
				fails--
				return fmt.Errorf("release leases: %w", capgate.ErrBusy)
			}
			return e.mem.Release(ctx, token, keys)
		}
		ctx := context.Background()
		a := e.gate.Admit(ctx, lanetest.Match("p", "preview"))
		a.Release(ctx)
		if n := e.userLane(t, "p"); n != 1 || e.gate.Skipping() {
			t.Fatalf("after a busy release: user lane %d skipping %v", n, e.gate.Skipping())
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if n := e.userLane(t, "p"); n != 0 || e.releases.Load() != 4 {
			t.Fatalf("after retries: user lane %d, %d releases; want 0 and 4", n, e.releases.Load())
		}
	})
}

// A release that never succeeds is retried until its lease has expired,
// and no longer; Close ends the retries at once if asked to.
func TestReleaseRetriesEndWithTheLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newFaultEnv(t)
		e.store.ReleaseFn = func(context.Context, string, []string) error {
			e.releases.Add(1)
			return fmt.Errorf("release leases: %w", capgate.ErrBusy)
		}
		ctx := context.Background()
		a := e.gate.Admit(ctx, lanetest.Match("p", "preview"))
		a.Release(ctx)
		time.Sleep(61 * time.Second)
		synctest.Wait()
		n := e.releases.Load()
		if n < 100 {
			t.Fatalf("%d release tries in 60 s, want one every 0.5 s", n)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if m := e.releases.Load(); m != n {
			t.Fatalf("still retrying after the lease expired: %d more tries", m-n)
		}

		b := e.gate.Admit(ctx, lanetest.Match("q", "preview"))
		b.Release(ctx)
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if err := e.gate.Close(cctx); err != nil {
			t.Fatalf("close: %v", err)
		}
	})
}
