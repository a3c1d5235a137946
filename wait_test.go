package capgate_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
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

// waitStore is a memory store whose Pump can be made to fail.
type waitStore struct {
	*memory.Store
	failPump atomic.Bool
}

// Caps declares the store itself as the waitlist, so the gate's pumps go
// through Pump here.
func (s *waitStore) Caps() capgate.StoreCaps {
	c := s.Store.Caps()
	c.Waitlist = s
	return c
}

func (s *waitStore) Pump(ctx context.Context, t capgate.Ticket) (capgate.JoinResult, error) {
	if s.failPump.Load() {
		return capgate.JoinResult{}, errors.New("pump waitlist: connection reset")
	}
	return s.Store.Pump(ctx, t)
}

// waitObserver records the waits the gate reports.
type waitObserver struct {
	mu      sync.Mutex
	started int
	ended   []time.Duration
}

func (o *waitObserver) Admitted(*capgate.Admission)    {}
func (o *waitObserver) Released(*capgate.Admission)    {}
func (o *waitObserver) StoreError(string, error)       {}
func (o *waitObserver) StoreSkipped(string)            {}
func (o *waitObserver) WaitStarted(*capgate.Admission) { o.mu.Lock(); o.started++; o.mu.Unlock() }
func (o *waitObserver) WaitEnded(_ *capgate.Admission, d time.Duration) {
	o.mu.Lock()
	o.ended = append(o.ended, d)
	o.mu.Unlock()
}

// waitEnv is a gate in enforce for all calls, preview users limited to one
// call each and waiting on for 20 s, over a memory store. Run it inside a
// synctest bubble: the gate's timers are then the bubble's.
type waitEnv struct {
	store *waitStore
	gate  *capgate.Gate
	cfg   *settings.Fixed
	lines *mock.Sink
	obs   *waitObserver
}

func newWaitEnv(t *testing.T) *waitEnv {
	t.Helper()
	c := settings.Default(nil, settings.ModeEnforce)
	c.EnforceFor = settings.EnforceAll
	c.Wait = settings.Wait{MaxSeconds: 20, MaxWaiting: 10, MaxWaitingPerUser: 5}
	e := &waitEnv{store: &waitStore{Store: memory.New(nil)}, cfg: settings.NewFixed(c),
		lines: &mock.Sink{}, obs: &waitObserver{}}
	gate, err := capgate.NewGate(e.store, e.cfg, e.lines, "task-a")
	if err != nil {
		t.Fatal(err)
	}
	e.gate = gate
	e.gate.Observer = e.obs
	// A release the skip window holds back is retried in the background
	// until the gate closes (a goroutine the bubble must see end).
	t.Cleanup(func() { _ = e.gate.Close(context.WithoutCancel(t.Context())) })
	return e
}

// admitAsync admits call on a goroutine of the bubble; the result comes
// on the channel.
func (e *waitEnv) admitAsync(ctx context.Context, call capgate.Call) <-chan *capgate.Admission {
	ch := make(chan *capgate.Admission, 1)
	go func() { ch <- e.gate.Admit(ctx, call) }()
	return ch
}

func (e *waitEnv) waiting(t *testing.T, user string) int {
	t.Helper()
	counts := make([]int, 1)
	if err := e.store.Waiting(t.Context(), "ocl:capacity", []string{"ocl:capacity:user:" + user}, counts); err != nil {
		t.Fatal(err)
	}
	return counts[0]
}

func mustDecide(t *testing.T, a *capgate.Admission, want capgate.Decision) {
	t.Helper()
	if a.Outcome().Decision != want {
		t.Fatalf("decision = %q (error %q), want %q", a.Outcome().Decision, a.Err(), want)
	}
}

func TestWaitTakesTheFreedSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newWaitEnv(t)
		first := e.gate.Admit(t.Context(), lanetest.Match("p", "preview"))
		mustDecide(t, first, capgate.DecisionAdmitted)
		start := time.Now()
		ch := e.admitAsync(t.Context(), lanetest.Match("p", "preview"))
		synctest.Wait()
		if n := e.waiting(t, "p"); n != 1 {
			t.Fatalf("waiting on p's lane = %d, want 1", n)
		}
		time.Sleep(1500 * time.Millisecond) // the bubble's clock: the first call runs 1.5 s
		first.Release(t.Context())
		second := <-ch
		defer second.Release(t.Context())
		mustDecide(t, second, capgate.DecisionAdmitted)
		waited, ok := second.Outcome().Waited, second.Outcome().Queued
		if !ok || waited != time.Since(start) || waited != 1500*time.Millisecond {
			t.Errorf("Waited = %v, %v; want 1.5s, true", waited, ok)
		}
		h := http.Header{}
		answer.SetHeaders(h, second.Outcome())
		if got := h.Get(oclNames.Waited); got != "1500" {
			t.Errorf("%s = %q, want 1500", oclNames.Waited, got)
		}
		if got := h.Get("Retry-After"); got != "" {
			t.Errorf("Retry-After = %q on an admitted call", got)
		}
		second.Release(t.Context())
		rec := second.Record()
		if rec.WaitMS == nil || *rec.WaitMS != 1500 || rec.HeldMS == nil || *rec.HeldMS != 0 {
			t.Errorf("record wait_ms %v, held_ms %v; want 1500 and 0 (held from the grant)", rec.WaitMS, rec.HeldMS)
		}
		if raw := e.lines.Raw(); len(raw) != 2 || !strings.Contains(raw[1], `,"wait_ms":1500,`) {
			t.Errorf("log lines %q, want the second with wait_ms 1500", raw)
		}
		if e.obs.started != 1 || len(e.obs.ended) != 1 || e.obs.ended[0] != 1500*time.Millisecond {
			t.Errorf("observer saw %d starts, ends %v; want 1, [1.5s]", e.obs.started, e.obs.ended)
		}
	})
}

func TestWaitEndsAtMaxSecondsWithTheRefusal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newWaitEnv(t)
		first := e.gate.Admit(t.Context(), lanetest.Match("p", "preview"))
		defer first.Release(t.Context())
		start := time.Now()
		second := e.gate.Admit(t.Context(), lanetest.Match("p", "preview"))
		second.Release(t.Context())
		mustDecide(t, second, capgate.DecisionRefused)
		if d := time.Since(start); d != 20*time.Second {
			t.Errorf("refused after %v, want max_seconds (20s)", d)
		}
		if s, ok := second.Outcome().RetryAfter, second.Outcome().RetryAfter > 0; !ok || s < 1 {
			t.Errorf("RetryAfter = %d, %v; want a Retry-After", s, ok)
		}
		if w, ok := second.Outcome().Waited, second.Outcome().Queued; !ok || w != 20*time.Second {
			t.Errorf("Waited = %v, %v; want 20s", w, ok)
		}
		if n := e.waiting(t, "p"); n != 0 {
			t.Errorf("waiting after the refusal = %d, want 0", n)
		}
	})
}

func TestWaitClientGoneLeavesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newWaitEnv(t)
		first := e.gate.Admit(t.Context(), lanetest.Match("p", "preview"))
		defer first.Release(t.Context())
		ctx, cancel := context.WithCancel(t.Context())
		ch := e.admitAsync(ctx, lanetest.Match("p", "preview"))
		synctest.Wait()
		start := time.Now()
		cancel()
		second := <-ch
		second.Release(t.Context())
		if time.Since(start) != 0 {
			t.Errorf("left after %v, want at once", time.Since(start))
		}
		mustDecide(t, second, capgate.DecisionUnavailable)
		if !strings.Contains(fmt.Sprint(second.Err()), "caller gone while waiting") {
			t.Errorf("error = %q, want caller gone while waiting", second.Err())
		}
		if n := e.waiting(t, "p"); n != 0 {
			t.Errorf("waiting after the client left = %d, want 0", n)
		}
		if e.gate.Skipping() {
			t.Error("a client that left opened the skip window")
		}
	})
}

func TestWaitStoreFailureFailsOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newWaitEnv(t)
		first := e.gate.Admit(t.Context(), lanetest.Match("p", "preview"))
		defer first.Release(t.Context())
		e.store.failPump.Store(true)
		second := e.gate.Admit(t.Context(), lanetest.Match("p", "preview"))
		second.Release(t.Context())
		mustDecide(t, second, capgate.DecisionUnavailable)
		if !strings.Contains(fmt.Sprint(second.Err()), "connection reset") {
			t.Errorf("error = %q, want the store's", second.Err())
		}
		if !e.gate.Skipping() {
			t.Error("a store failure while waiting did not open the skip window")
		}
	})
}

// TestNoWait checks the calls that never wait: they are decided at once,
// exactly as without waiting.
func TestNoWait(t *testing.T) {
	aware := lanetest.Match("p", "preview")
	aware.Aware = true
	tests := []struct {
		name string
		set  func(c *settings.Config)
		call capgate.Call
		want capgate.Decision
	}{
		{"shadow", func(c *settings.Config) { c.Mode = settings.ModeShadow }, aware, capgate.DecisionShadowRefused},
		{"unenforced", func(c *settings.Config) { c.EnforceFor = settings.EnforceAware },
			lanetest.Match("p", "preview"), capgate.DecisionShadowRefused},
		{"max_seconds 0", func(c *settings.Config) { c.Wait.MaxSeconds = 0 }, aware, capgate.DecisionRefused},
		{"max_waiting 0", func(c *settings.Config) { c.Wait.MaxWaiting, c.Wait.MaxWaitingPerUser = 0, 0 }, aware, capgate.DecisionRefused},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newWaitEnv(t)
				first := e.gate.Admit(t.Context(), aware)
				defer first.Release(t.Context())
				e.cfg.Edit(tt.set)
				start := time.Now()
				a := e.gate.Admit(t.Context(), tt.call)
				a.Release(t.Context())
				mustDecide(t, a, tt.want)
				if d := time.Since(start); d != 0 {
					t.Errorf("decided after %v, want at once", d)
				}
				if ok := a.Outcome().Queued; ok || e.obs.started != 0 {
					t.Error("the call waited")
				}
			})
		})
	}
}

func TestPausedLaneNeverWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newWaitEnv(t)
		e.cfg.Edit(func(c *settings.Config) { configtest.SetNumbers(t, c, "tiers.preview", 0) })
		start := time.Now()
		a := e.gate.Admit(t.Context(), lanetest.Match("p", "preview"))
		a.Release(t.Context())
		mustDecide(t, a, capgate.DecisionRefused)
		if d := time.Since(start); d != 0 {
			t.Errorf("decided after %v, want at once", d)
		}
		if s := a.Outcome().RetryAfter; s != 120 {
			t.Errorf("Retry-After = %d, want retry_after.paused (120)", s)
		}
	})
}

// TestWaitRoundRobinThroughTheGate: user a has three calls waiting, b one;
// as slots free, b's call is served second.
func TestWaitRoundRobinThroughTheGate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newWaitEnv(t)
		e.cfg.Edit(func(c *settings.Config) {
			configtest.SetNumbers(t, c, "api_heavy.cluster", 2, "api_heavy.per_task", 5) // bulk limit 1
			configtest.SetNumbers(t, c, "per_user.core", 5)
		})
		holder := e.gate.Admit(t.Context(), lanetest.Match("h", "core"))
		mustDecide(t, holder, capgate.DecisionAdmitted)
		type result struct {
			user string
			a    *capgate.Admission
		}
		done := make(chan result, 4)
		for _, u := range []string{"a", "a", "a", "b"} {
			go func() { done <- result{u, e.gate.Admit(t.Context(), lanetest.Match(u, "core"))} }()
			synctest.Wait() // each joins in this order
		}
		prev := holder
		var order []string
		for range 4 {
			prev.Release(t.Context())
			r := <-done
			mustDecide(t, r.a, capgate.DecisionAdmitted)
			order = append(order, r.user)
			prev = r.a
		}
		prev.Release(t.Context())
		if got := strings.Join(order, ""); got != "abaa" {
			t.Errorf("served %s, want abaa", got)
		}
	})
}

func TestStatusShowsWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newWaitEnv(t)
		first := e.gate.Admit(t.Context(), lanetest.Match("p", "preview"))
		ch := e.admitAsync(t.Context(), lanetest.Match("p", "preview"))
		synctest.Wait()
		c := e.cfg.Config(t.Context())
		st := e.gate.Status(t.Context(), c)
		api, user, tier := lanetest.SharedLane(t, st, "api_heavy"), lanetest.Entries(t, st, "user")["p"], lanetest.Entries(t, st, "tier")["preview"]
		if api.Waiting != 1 || user.Waiting != 1 || tier.Waiting != 1 {
			t.Errorf("status while one call waits: api_heavy %+v, user %+v, tier %+v; want 1 waiting each",
				api, user, tier)
		}
		first.Release(t.Context())
		second := <-ch
		second.Release(t.Context())
		if api := lanetest.SharedLane(t, e.gate.Status(t.Context(), c), "api_heavy"); api.Waiting != 0 {
			t.Errorf("status after: api_heavy waiting %d, want 0", api.Waiting)
		}
	})
}

// TestWaitWithLocalLanes checks that local lanes don't refuse a call that
// may wait: finding this gateway's share of a lane full is a reason to
// queue. The call that waited counts in the local lanes once it holds its
// slot, and leaves them at its release.
func TestWaitWithLocalLanes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newWaitEnv(t)
		local := memory.New(nil)
		e.gate.Local = local
		localCount := func() int {
			t.Helper()
			counts := make([]int, 1)
			if err := local.Count(t.Context(), []string{"ocl:capacity:user:p"}, counts); err != nil {
				t.Fatal(err)
			}
			return counts[0]
		}
		first := e.gate.Admit(t.Context(), lanetest.Match("p", "preview"))
		mustDecide(t, first, capgate.DecisionAdmitted)
		ch := e.admitAsync(t.Context(), lanetest.Match("p", "preview"))
		synctest.Wait()
		if n := e.waiting(t, "p"); n != 1 {
			t.Fatalf("waiting on p's lane = %d, want 1 (local lanes refused instead of queueing?)", n)
		}
		if n := localCount(); n != 1 {
			t.Fatalf("local count while the second waits = %d, want 1", n)
		}
		first.Release(t.Context())
		second := <-ch
		mustDecide(t, second, capgate.DecisionAdmitted)
		if n := localCount(); n != 1 {
			t.Errorf("local count while the second runs = %d, want 1", n)
		}
		second.Release(t.Context())
		if n := localCount(); n != 0 {
			t.Errorf("local count after both = %d, want 0", n)
		}
	})
}

// deafStore is a memory store whose wake-ups never arrive, as when a
// pub/sub message is lost.
type deafStore struct{ *memory.Store }

// Caps declares the store itself as the waitlist, so the gate watches
// through Watch here.
func (s deafStore) Caps() capgate.StoreCaps {
	c := s.Store.Caps()
	c.Waitlist = s
	return c
}

func (s deafStore) Watch(context.Context, string, string) (<-chan struct{}, func(), error) {
	return make(chan struct{}), func() {}, nil
}

// TestLostWakeUpIsFoundByThePump: without the wake-up, the waiter finds
// its grant at its next pump, before the grant's claim time runs out.
func TestLostWakeUpIsFoundByThePump(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newWaitEnv(t)
		e.gate.Store = deafStore{memory.New(nil)}
		first := e.gate.Admit(t.Context(), lanetest.Match("p", "preview"))
		ch := e.admitAsync(t.Context(), lanetest.Match("p", "preview"))
		synctest.Wait()
		time.Sleep(500 * time.Millisecond)
		first.Release(t.Context())
		second := <-ch
		defer second.Release(t.Context())
		mustDecide(t, second, capgate.DecisionAdmitted)
		if w := second.Outcome().Waited; w != capgate.WaitPumpEvery {
			t.Errorf("waited %v, want %v: the first pump after the grant", w, capgate.WaitPumpEvery)
		}
	})
}
