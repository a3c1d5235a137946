package capgate_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/answer"
	"github.com/capgate/capgate/configtest"
	"github.com/capgate/capgate/lanetest"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/mock"
	"github.com/capgate/capgate/settings"
)

// faultEnv is a gate over a real memory store wrapped so a test can make
// store operations fail, and count them.
type faultEnv struct {
	mem       *memory.Store
	store     *mock.LaneStore
	gate      *capgate.Gate
	cfg       *settings.Fixed
	lines     *mock.Sink
	acquires  atomic.Int32
	lastToken atomic.Value // string: the token of the last acquire
	renews    atomic.Int32
	releases  atomic.Int32
}

func newFaultEnv(t *testing.T) *faultEnv {
	t.Helper()
	e := &faultEnv{mem: memory.New(nil), lines: &mock.Sink{}}
	// A store with no optional part (no waitlist, idempotency, adaptive
	// state, bound or kind): every call goes through the func fields.
	e.store = &mock.LaneStore{Base: e.mem, CapsFn: func() capgate.StoreCaps { return capgate.StoreCaps{} }}
	e.store.AcquireFn = func(ctx context.Context, req capgate.AcquireRequest, counts []int) (bool, error) {
		e.acquires.Add(1)
		e.lastToken.Store(req.Token)
		return e.mem.Acquire(ctx, req, counts)
	}
	e.store.RenewFn = func(ctx context.Context, token string, keys []string, lease time.Duration) (int, error) {
		e.renews.Add(1)
		return e.mem.Renew(ctx, token, keys, lease)
	}
	e.store.ReleaseFn = func(ctx context.Context, token string, keys []string) error {
		e.releases.Add(1)
		return e.mem.Release(ctx, token, keys)
	}
	e.cfg = settings.NewFixed(settings.Default(nil, settings.ModeShadow))
	gate, err := capgate.NewGate(e.store, e.cfg, e.lines, "task-a")
	if err != nil {
		t.Fatal(err)
	}
	e.gate = gate
	t.Cleanup(func() {
		if err := e.gate.Close(context.Background()); err != nil {
			t.Errorf("close gate: %v", err)
		}
	})
	return e
}

func (e *faultEnv) userLane(t *testing.T, user string) int {
	t.Helper()
	counts := make([]int, 1)
	if err := e.mem.Count(context.Background(), []string{"ocl:capacity:user:" + user}, counts); err != nil {
		t.Fatal(err)
	}
	return counts[0]
}

var errRefused = errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")

func TestStoreFailureFailsOpenAndSkipsTheStore(t *testing.T) {
	e := newFaultEnv(t)
	e.store.AcquireFn = func(context.Context, capgate.AcquireRequest, []int) (bool, error) {
		e.acquires.Add(1)
		return false, errRefused
	}
	ctx := context.Background()
	a := e.gate.Admit(ctx, lanetest.Match("p", "preview"))
	if a.Outcome().Decision != capgate.DecisionUnavailable || a.Outcome().Holding {
		t.Fatalf("decision %q holding %v, want unavailable and no lease", a.Outcome().Decision, a.Outcome().Holding)
	}
	if fmt.Sprint(a.Err()) != errRefused.Error() {
		t.Fatalf("error = %q, want %q", a.Err(), errRefused)
	}
	if !e.gate.Skipping() {
		t.Fatal("a store error did not open the skip window")
	}
	a.Release(ctx)

	b := e.gate.Admit(ctx, lanetest.Match("p", "preview"))
	if b.Outcome().Decision != capgate.DecisionUnavailable || !errors.Is(b.Err(), capgate.ErrSkipped) {
		t.Fatalf("inside the window: decision %q error %q", b.Outcome().Decision, b.Err())
	}
	if n := e.acquires.Load(); n != 1 {
		t.Fatalf("store acquires = %d, want 1 (the second call must skip it)", n)
	}
	if n, ok := b.Outcome().Suggested, len(b.Outcome().Lanes) > 0; !ok || n != 1 {
		t.Fatalf("suggested without counts = %d %v, want the per-user limit 1", n, ok)
	}
	h := http.Header{}
	answer.SetHeaders(h, b.Outcome())
	if h.Get("Retry-After") != "" || h.Get("X-OCL-Capacity-In-Flight") != "" || h.Get("X-OCL-Capacity-Limit") != "3" {
		t.Fatalf("unavailable headers = %v", h)
	}
	b.Release(ctx)

	e.gate.ResetSkip()
	e.gate.Admit(ctx, lanetest.Match("p", "preview")).Release(ctx)
	if n := e.acquires.Load(); n != 2 {
		t.Fatalf("after the window the store was not tried again: %d acquires", n)
	}
}

// The skip window is per process: a gate derived with ForTask shares it,
// by the gate's clock, and a gate with no SkipFor never skips the store.
func TestForTaskSharesTheSkipWindow(t *testing.T) {
	e := newFaultEnv(t)
	clock := mock.NewClock(time.Now()) // near the store's clock: a call's acquire must not look late
	e.gate.Now = clock.Now
	if _, err := e.gate.ForTask(""); err == nil {
		t.Fatal("ForTask(\"\") gave a gate; want an error")
	}
	other, err := e.gate.ForTask("task-b")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close(context.Background()) })
	if other.TaskID != "task-b" || other.KeyPrefix != e.gate.KeyPrefix || other.SkipFor != capgate.DefaultSkipDuration {
		t.Fatalf("derived gate: task %q prefix %q skip for %v", other.TaskID, other.KeyPrefix, other.SkipFor)
	}
	failing := true
	e.store.AcquireFn = func(ctx context.Context, req capgate.AcquireRequest, counts []int) (bool, error) {
		e.acquires.Add(1)
		if failing {
			return false, errRefused
		}
		return e.mem.Acquire(ctx, req, counts)
	}
	ctx := context.Background()
	other.Admit(ctx, lanetest.Match("p", "preview")).Release(ctx)
	a := e.gate.Admit(ctx, lanetest.Match("p", "preview"))
	a.Release(ctx)
	if !errors.Is(a.Err(), capgate.ErrSkipped) || e.acquires.Load() != 1 {
		t.Fatalf("after the derived gate's store error: error %q, %d acquires; want skipped, 1", a.Err(), e.acquires.Load())
	}
	clock.Advance(capgate.DefaultSkipDuration)
	failing = false
	b := other.Admit(ctx, lanetest.Match("p", "preview"))
	b.Release(ctx)
	if b.Outcome().Decision != capgate.DecisionAdmitted || e.acquires.Load() != 2 {
		t.Fatalf("after the window: decision %q (%v), %d acquires; want admitted, 2", b.Outcome().Decision, b.Err(), e.acquires.Load())
	}

	failing = true
	bare := &capgate.Gate{Store: e.store, Source: e.cfg, TaskID: "task-c"}
	t.Cleanup(func() { _ = bare.Close(context.Background()) })
	for range 2 {
		bare.Admit(ctx, lanetest.Match("p", "preview")).Release(ctx)
	}
	if n := e.acquires.Load(); n != 4 {
		t.Fatalf("a gate with no SkipFor: %d acquires, want 4 (the store never skipped)", n)
	}
}

func TestEnforceNeverRefusesOnStoreFailure(t *testing.T) {
	e := newFaultEnv(t)
	e.cfg.Edit(func(c *settings.Config) {
		c.Mode, c.EnforceFor = settings.ModeEnforce, settings.EnforceAll
		configtest.SetNumbers(t, c, "per_user.preview", 0)
	})
	e.store.AcquireFn = func(context.Context, capgate.AcquireRequest, []int) (bool, error) {
		return false, errRefused
	}
	a := e.gate.Admit(context.Background(), lanetest.Match("p", "preview"))
	defer a.Release(context.Background())
	if a.Outcome().Decision == capgate.DecisionRefused || a.Outcome().Decision != capgate.DecisionUnavailable {
		t.Fatalf("decision %q: a store failure must never refuse", a.Outcome().Decision)
	}
}

func TestFailedReleaseIsLoggedNotRaised(t *testing.T) {
	e := newFaultEnv(t)
	ctx := context.Background()
	a := e.gate.Admit(ctx, lanetest.Match("p", "preview"))
	e.store.ReleaseFn = func(context.Context, string, []string) error { return errors.New("gone") }
	a.Release(ctx)
	lines := e.lines.All(t)
	if len(lines) != 1 || lines[0]["error"] != "gone" || lines[0]["decision"] != "admitted" {
		t.Fatalf("log line = %v, want decision admitted and error gone", lines)
	}
	if !e.gate.Skipping() {
		t.Fatal("a failed release did not open the skip window")
	}
}

// A release inside the skip window does not reach the store; it is retried
// in the background once the window has closed.
func TestReleaseSkipsTheStoreInsideTheWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newFaultEnv(t)
		ctx := context.Background()
		a := e.gate.Admit(ctx, lanetest.Match("p", "preview"))
		e.gate.FailStore()
		a.Release(ctx)
		if n := e.releases.Load(); n != 0 {
			t.Fatalf("release called the store %d times inside the skip window", n)
		}
		lines := e.lines.All(t)
		if got := lines[0]["error"]; got != "release skipped: Redis failed recently; retried until the leases expire" {
			t.Fatalf("log line error = %q", got)
		}
		if n := e.userLane(t, "p"); n != 1 {
			t.Fatalf("user lane = %d inside the window, want the lease still there", n)
		}
		time.Sleep(14 * time.Second)
		synctest.Wait()
		if n := e.releases.Load(); n != 0 {
			t.Fatalf("retried %d times inside the window", n)
		}
		time.Sleep(2 * time.Second) // the window closed at 15 s
		synctest.Wait()
		if n := e.releases.Load(); n != 1 || e.userLane(t, "p") != 0 {
			t.Fatalf("after the window: %d releases, user lane %d; want the lease released once", n, e.userLane(t, "p"))
		}
	})
}

func TestRenewerFailingToStartStillReleases(t *testing.T) {
	e := newFaultEnv(t)
	capgate.SetStartRenewerHook(e.gate, func(func()) error { return errors.New("can't start new goroutine") })
	ctx := context.Background()
	a := e.gate.Admit(ctx, lanetest.Match("p", "preview"))
	if a.Outcome().Decision != capgate.DecisionAdmitted || !a.Outcome().Holding {
		t.Fatalf("decision %q holding %v, want admitted holding", a.Outcome().Decision, a.Outcome().Holding)
	}
	if !strings.Contains(fmt.Sprint(a.Err()), "can't start new goroutine") {
		t.Fatalf("error = %q", a.Err())
	}
	a.Release(ctx)
	if n := e.userLane(t, "p"); n != 0 {
		t.Fatalf("user lane = %d after release, want 0", n)
	}
}

func TestErrorAfterARefusalNeverRefuses(t *testing.T) {
	e := newFaultEnv(t)
	e.cfg.Edit(func(c *settings.Config) {
		c.Mode, c.EnforceFor = settings.ModeEnforce, settings.EnforceAll
		configtest.SetNumbers(t, c, "per_user.preview", 0)
	})
	capgate.SetRetryAfterHook(e.gate, func() error { return errors.New("boom") })
	a := e.gate.Admit(context.Background(), lanetest.Match("p", "preview"))
	defer a.Release(context.Background())
	if a.Outcome().Decision != capgate.DecisionUnavailable || a.Outcome().Decision == capgate.DecisionRefused {
		t.Fatalf("decision %q, want unavailable", a.Outcome().Decision)
	}
	if ok := a.Outcome().RetryAfter > 0; ok {
		t.Fatal("retry after kept after a failure")
	}
	h := http.Header{}
	answer.SetHeaders(h, a.Outcome())
	if h.Get("Retry-After") != "" {
		t.Fatalf("Retry-After sent: %v", h)
	}
	if answer.Refusal(a.Outcome()) != nil {
		t.Fatal("refusal body for an unavailable call")
	}
}

func TestUnexpectedErrorFailsOpenWithoutTheSkipWindow(t *testing.T) {
	e := newFaultEnv(t)
	ctx := context.Background()
	a := e.gate.Admit(ctx, lanetest.OCLCall("match", 1, false, false, "u", "gold"))
	a.Release(ctx)
	if a.Outcome().Decision != capgate.DecisionUnavailable || fmt.Sprint(a.Err()) != `unknown tier "gold"` {
		t.Fatalf("decision %q error %q", a.Outcome().Decision, a.Err())
	}
	if e.gate.Skipping() {
		t.Fatal("a non-store error opened the skip window")
	}
	if lines := e.lines.All(t); len(lines) != 1 || lines[0]["decision"] != "unavailable" {
		t.Fatalf("log lines = %v", lines)
	}
}

// An unavailable call (one the policy in force can't place: no tier, no
// user) never reaches the store, and its answer carries only the decision.
func TestUnavailableCarriesOnlyItsDecision(t *testing.T) {
	e := newFaultEnv(t)
	ctx := context.Background()
	a := e.gate.Admit(ctx, lanetest.OCLCall("match", 3, true, false, "", ""))
	a.Release(ctx)
	if a.Outcome().Decision != capgate.DecisionUnavailable || e.acquires.Load() != 0 {
		t.Fatalf("decision %q, acquires %d", a.Outcome().Decision, e.acquires.Load())
	}
	h := http.Header{}
	answer.SetHeaders(h, a.Outcome())
	if len(h) != 1 || h.Get("X-OCL-Capacity-Decision") != "unavailable" {
		t.Fatalf("headers = %v, want only the decision", h)
	}
	if lines := e.lines.All(t); len(lines) != 1 || lines[0]["error"] != `unknown tier ""` {
		t.Fatalf("log lines = %v", lines)
	}
}

func TestOffModeNeverTouchesTheStore(t *testing.T) {
	e := newFaultEnv(t)
	e.cfg.Edit(func(c *settings.Config) { c.Mode = settings.ModeOff })
	a := e.gate.Admit(context.Background(), lanetest.Match("p", "preview"))
	a.Release(context.Background())
	if a == nil || a.Outcome().Decision != capgate.DecisionNone || e.acquires.Load() != 0 || len(e.lines.Raw()) != 0 {
		t.Fatalf("off mode: admission %v, acquires %d, lines %d", a, e.acquires.Load(), len(e.lines.Raw()))
	}
	if a.Outcome().Decision == capgate.DecisionRefused || a.Outcome().Counted || a.Err() != nil || a.Outcome().Lanes != nil {
		t.Fatalf("off mode: refused %v, counted %v, error %v, lanes %v", a.Outcome().Decision == capgate.DecisionRefused, a.Outcome().Counted, a.Err(), a.Outcome().Lanes)
	}
	if _, ok := a.Held(); ok {
		t.Fatal("off mode: the admission says it held leases")
	}
	u := e.gate.AdmitWith(context.Background(), lanetest.Match("", "preview"), capgate.AdmitOptions{Unidentified: errors.New("x")})
	u.Release(context.Background())
	if u == nil || u.Outcome().Decision != capgate.DecisionNone || u.Err() != nil || len(e.lines.Raw()) != 0 {
		t.Fatalf("off mode: an unidentified call gave %v, lines %d", u, len(e.lines.Raw()))
	}
}

func TestFailingLogLineNeverFailsTheCall(t *testing.T) {
	e := newFaultEnv(t)
	var calls atomic.Int32
	capgate.SetEmitHook(e.gate, func([]byte) error {
		calls.Add(1)
		panic("broken pipe")
	})
	a := e.gate.Admit(context.Background(), lanetest.Match("p", "preview"))
	a.Release(context.Background())
	if calls.Load() != 1 {
		t.Fatalf("emit called %d times, want 1", calls.Load())
	}
	if n := e.userLane(t, "p"); n != 0 {
		t.Fatalf("lease not released: %d", n)
	}
}

// The renewer tests run in a synctest bubble: fake time, real goroutines.

func TestRenewerKeepsLeasesUntilReleased(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newFaultEnv(t)
		ctx := context.Background()
		a := e.gate.Admit(ctx, lanetest.Match("p", "preview"))
		time.Sleep(70 * time.Second) // past the 60 s lease: only renewals keep it
		synctest.Wait()
		if n := e.renews.Load(); n != 3 {
			t.Fatalf("renewals after 70 s = %d, want 3 (every 20 s)", n)
		}
		if n := e.userLane(t, "p"); n != 1 {
			t.Fatalf("user lane after 70 s = %d, want the renewed lease", n)
		}
		a.Release(ctx)
		time.Sleep(100 * time.Second)
		synctest.Wait()
		if n := e.renews.Load(); n != 3 {
			t.Fatalf("renewals went on after release: %d", n)
		}
		if n := e.userLane(t, "p"); n != 0 {
			t.Fatalf("user lane after release = %d", n)
		}
	})
}

func TestRenewerStopsOnceALeaseIsLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newFaultEnv(t)
		ctx := context.Background()
		a := e.gate.Admit(ctx, lanetest.Match("p", "preview"))
		// Another party removes the call's user lease; renewal must notice,
		// renew nothing, and stop.
		_ = e.mem.Release(ctx, e.lastToken.Load().(string), []string{"ocl:capacity:user:p"})
		time.Sleep(100 * time.Second)
		synctest.Wait()
		if n := e.renews.Load(); n != 1 {
			t.Fatalf("renewals = %d, want exactly 1", n)
		}
		if !a.LeaseLost() {
			t.Fatal("lease_lost not set")
		}
		if n := e.userLane(t, "p"); n != 0 {
			t.Fatal("renew re-created the lost lease")
		}
		a.Release(ctx)
		if rec := a.Record(); !rec.LeaseLost {
			t.Fatal("log record lacks lease_lost")
		}
	})
}

func TestRenewerStopsAfterMaxHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newFaultEnv(t)
		e.cfg.Edit(func(c *settings.Config) { c.MaxHoldSeconds = 60 })
		ctx := context.Background()
		a := e.gate.Admit(ctx, lanetest.Match("p", "preview"))
		defer a.Release(ctx)
		time.Sleep(200 * time.Second)
		synctest.Wait()
		if n := e.renews.Load(); n != 2 {
			t.Fatalf("renewals = %d, want 2 (at 20 s and 40 s; none from 60 s on)", n)
		}
		if n := e.userLane(t, "p"); n != 0 {
			t.Fatalf("user lane = %d: the lease should have expired after max hold", n)
		}
	})
}

func TestRenewalErrorOpensTheWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newFaultEnv(t)
		e.store.RenewFn = func(context.Context, string, []string, time.Duration) (int, error) {
			e.renews.Add(1)
			return 0, errors.New("slow")
		}
		ctx := context.Background()
		a := e.gate.Admit(ctx, lanetest.Match("p", "preview"))
		defer a.Release(ctx)
		time.Sleep(21 * time.Second)
		synctest.Wait()
		if fmt.Sprint(a.Err()) != "slow" || !e.gate.Skipping() || a.Outcome().Decision != capgate.DecisionAdmitted {
			t.Fatalf("after a failed renewal: error %q, skipping %v, decision %q", a.Err(), e.gate.Skipping(), a.Outcome().Decision)
		}
	})
}

func TestRenewalSkipsTheStoreInsideTheWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newFaultEnv(t)
		ctx := context.Background()
		a := e.gate.Admit(ctx, lanetest.Match("p", "preview"))
		defer a.Release(ctx)
		time.Sleep(19 * time.Second)
		e.gate.FailStore() // the store failed for someone else: skip until 34 s
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if n := e.renews.Load(); n != 0 {
			t.Fatalf("renewal at 20 s reached the store inside the window (%d calls)", n)
		}
		time.Sleep(20 * time.Second)
		synctest.Wait()
		if n := e.renews.Load(); n != 1 {
			t.Fatalf("renewal at 40 s: %d store calls, want 1", n)
		}
	})
}

func TestHeadersLeaveTheAPIsRetryAfterAlone(t *testing.T) {
	e := newFaultEnv(t)
	a := e.gate.Admit(context.Background(), lanetest.Match("p", "preview"))
	defer a.Release(context.Background())
	h := http.Header{"Retry-After": {"30"}} // the API's own throttle answered
	answer.SetHeaders(h, a.Outcome())
	if got := h.Get("Retry-After"); got != "30" || h.Get("X-OCL-Capacity-Decision") != "admitted" {
		t.Fatalf("Retry-After %q, decision %q: the API's header must stay", got, h.Get("X-OCL-Capacity-Decision"))
	}
}

type panickingConfig struct{}

func (panickingConfig) Config(context.Context) settings.Config { panic("config bug") }

func TestAPanickingConfigSourceFailsOpen(t *testing.T) {
	e := newFaultEnv(t)
	e.gate.Source = panickingConfig{}
	a := e.gate.Admit(context.Background(), lanetest.Match("p", "preview"))
	a.Release(context.Background())
	if a.Outcome().Decision != capgate.DecisionUnavailable || a.Outcome().Decision == capgate.DecisionRefused || e.acquires.Load() != 0 {
		t.Fatalf("decision %q, acquires %d", a.Outcome().Decision, e.acquires.Load())
	}
	if !strings.Contains(fmt.Sprint(a.Err()), "config bug") {
		t.Fatalf("error %q", a.Err())
	}
}

// A client that hangs up never opens the skip window and never leaves a
// lease behind (found by the fault suite's scenario 7).
func TestClientAbortIsNotAStoreFailure(t *testing.T) {
	e := newFaultEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	a := e.gate.Admit(ctx, lanetest.Match("p", "preview"))
	a.Release(ctx)
	if a.Outcome().Decision != capgate.DecisionUnavailable || e.acquires.Load() != 0 || e.gate.Skipping() {
		t.Fatalf("gone before acquire: decision %q, acquires %d, skipping %v", a.Outcome().Decision, e.acquires.Load(), e.gate.Skipping())
	}

	// Gone while the store had not yet sent the acquire: the store takes
	// nothing and says so with the context's error; that is no store
	// failure either, and nothing is left behind.
	ctx, cancel = context.WithCancel(context.Background())
	e.store.AcquireFn = func(actx context.Context, req capgate.AcquireRequest, counts []int) (bool, error) {
		cancel()
		if err := actx.Err(); err != nil {
			return false, fmt.Errorf("acquire lanes: %w", err) // what a store does before it sends
		}
		return e.mem.Acquire(actx, req, counts)
	}
	b := e.gate.Admit(ctx, lanetest.Match("p", "preview"))
	if b.Outcome().Decision != capgate.DecisionUnavailable || b.Outcome().Holding || e.gate.Skipping() {
		t.Fatalf("gone during acquire: decision %q (%s), holding %v, skipping %v", b.Outcome().Decision, b.Err(), b.Outcome().Holding, e.gate.Skipping())
	}
	b.Release(ctx)
	if n := e.userLane(t, "p"); n != 0 {
		t.Fatalf("user lane = %d after release", n)
	}

	// Gone after the store sent it: the store reports the lease it took
	// (LaneStore.Acquire), and Release gives it back.
	ctx, cancel = context.WithCancel(context.Background())
	e.store.AcquireFn = func(actx context.Context, req capgate.AcquireRequest, counts []int) (bool, error) {
		taken, err := e.mem.Acquire(actx, req, counts)
		cancel()
		return taken, err
	}
	c := e.gate.Admit(ctx, lanetest.Match("p", "preview"))
	if c.Outcome().Decision != capgate.DecisionAdmitted || !c.Outcome().Holding {
		t.Fatalf("gone after the acquire was sent: decision %q (%s)", c.Outcome().Decision, c.Err())
	}
	c.Release(ctx)
	if n := e.userLane(t, "p"); n != 0 {
		t.Fatalf("user lane = %d after release", n)
	}
}

func TestABusyStoreFailsOneCallWithoutTheSkipWindow(t *testing.T) {
	e := newFaultEnv(t)
	e.store.AcquireFn = func(context.Context, capgate.AcquireRequest, []int) (bool, error) {
		return false, fmt.Errorf("acquire lanes: %w", capgate.ErrBusy)
	}
	a := e.gate.Admit(context.Background(), lanetest.Match("p", "preview"))
	a.Release(context.Background())
	if a.Outcome().Decision != capgate.DecisionUnavailable || e.gate.Skipping() {
		t.Fatalf("decision %q, skipping %v: busy must fail one call, not open the window", a.Outcome().Decision, e.gate.Skipping())
	}
}

// TestReleaseContextFollowsTheStoresBound: a call whose client is gone
// still gives its leases back, under a context the request's cancellation
// does not reach; the gate sets a deadline only for a store that does not
// bound its own operations.
func TestReleaseContextFollowsTheStoresBound(t *testing.T) {
	for _, tt := range []struct {
		name         string
		bound        *time.Duration // nil: the store has no Deadline method
		wantDeadline bool
	}{
		{"no bound of its own", nil, true},
		{"bounds its own operations", new(time.Second), false},
		{"never waits", new(time.Duration(0)), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newFaultEnv(t)
			asked, hasDeadline := false, false
			var errAtRelease error
			e.store.ReleaseFn = func(ctx context.Context, token string, keys []string) error {
				asked, errAtRelease = true, ctx.Err()
				_, hasDeadline = ctx.Deadline()
				return e.mem.Release(ctx, token, keys)
			}
			e.store.CapsFn = func() capgate.StoreCaps { return capgate.StoreCaps{} }
			if tt.bound != nil {
				e.store.CapsFn = func() capgate.StoreCaps { return capgate.StoreCaps{Deadline: *tt.bound, Bounded: true} }
			}
			ctx, cancel := context.WithCancel(context.Background())
			a := e.gate.Admit(ctx, lanetest.Match("p", "preview"))
			cancel() // the client hangs up before the call ends
			a.Release(ctx)
			if !asked {
				t.Fatal("the store was not asked to release")
			}
			if errAtRelease != nil {
				t.Errorf("release context done: %v", errAtRelease)
			}
			if hasDeadline != tt.wantDeadline {
				t.Errorf("release context has a deadline: %v, want %v", hasDeadline, tt.wantDeadline)
			}
			if n := e.userLane(t, "p"); n != 0 {
				t.Errorf("user lane %d after release, want 0", n)
			}
		})
	}
}

// TestReleaseLeftStopsAtTheFirstFailure: the leases a killed incarnation
// left are released; once the store fails, the rest are left to expire
// (each further release would wait out the store's deadline), and the
// error says how many were released.
func TestReleaseLeftStopsAtTheFirstFailure(t *testing.T) {
	e := newFaultEnv(t)
	ctx := context.Background()
	left := map[string][]string{}
	for _, user := range []string{"ada", "grace", "linus"} {
		a := e.gate.Admit(ctx, lanetest.Match(user, "preview"))
		if !a.Outcome().Holding {
			t.Fatalf("%s: decision %q, want a lease", user, a.Outcome().Decision)
		}
		token, keys, ok := a.StoreLease()
		if !ok {
			t.Fatalf("%s: no store lease", user)
		}
		left[token] = keys // the call's process dies: nobody releases it
	}
	n, err := e.gate.ReleaseLeft(ctx, left)
	if n != 3 || err != nil {
		t.Fatalf("ReleaseLeft = %d, %v; want 3 released", n, err)
	}
	for _, user := range []string{"ada", "grace", "linus"} {
		if c := e.userLane(t, user); c != 0 {
			t.Errorf("%s's lane holds %d after ReleaseLeft, want 0", user, c)
		}
	}

	e.releases.Store(0)
	e.store.ReleaseFn = func(ctx context.Context, token string, keys []string) error {
		if e.releases.Add(1) == 2 {
			return errRefused
		}
		return e.mem.Release(ctx, token, keys)
	}
	n, err = e.gate.ReleaseLeft(ctx, left)
	if n != 1 || !errors.Is(err, errRefused) || !strings.Contains(err.Error(), "1 of 3 released") {
		t.Fatalf("ReleaseLeft with the store failing on the second = %d, %v; want 1 and the store's error", n, err)
	}
	if r := e.releases.Load(); r != 2 {
		t.Errorf("%d releases sent, want 2: none after the failure", r)
	}
}
