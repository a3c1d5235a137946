package capgate_test

// The config changing while calls wait: limits, mode, enforce_for and
// wait.max_seconds (docs/ARCHITECTURE.md, "Mode and limits that change").

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/config"
	"github.com/capgate/capgate/configtest"
	"github.com/capgate/capgate/lanetest"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/settings"
)

// laneLimit returns the limit a's lane name was judged by.
func laneLimit(a *capgate.Admission, name capgate.LaneName) int {
	for _, l := range a.Outcome().Lanes {
		if l.Name == name {
			return l.Limit
		}
	}
	return -1
}

// TestWaitTakesARaisedLimit: a call waits on its user lane (limit 1, held
// by the user's first call); staff raise the limit to 2. The waiter is
// admitted by its next re-check, with nobody releasing, and judged by the
// new limit. The re-check reads the config in process; it sends the store
// nothing unless the limits changed (TestLostWakeUpIsFoundByThePump).
func TestWaitTakesARaisedLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newWaitEnv(t)
		first, ch := e.queueBehind(t, "p")
		defer first.Release(t.Context())
		time.Sleep(300 * time.Millisecond)
		e.cfg.Edit(func(c *settings.Config) { configtest.SetNumbers(t, c, "per_user.preview", 2) })
		raised := time.Now()
		second := <-ch
		defer second.Release(t.Context())
		mustDecide(t, second, capgate.DecisionAdmitted)
		if d := time.Since(raised); d > capgate.WaitLimitsEvery {
			t.Errorf("admitted %v after the limit rose, want by the next re-check (%v)", d, capgate.WaitLimitsEvery)
		}
		if l := laneLimit(second, capgate.LaneName("user")); l != 2 {
			t.Errorf("user lane limit = %d, want the raised 2", l)
		}
		if n := e.waiting(t, "p"); n != 0 {
			t.Errorf("waiting after the grant = %d, want 0", n)
		}
	})
}

// TestWaitHonoursALoweredLimit: user p runs two calls at its limit of 2 and
// a third waits; staff lower the limit to 1. Once the waiter re-checked,
// the release of one call (1 left, at the new limit) does not let it in;
// the release of the other does.
func TestWaitHonoursALoweredLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newWaitEnv(t)
		e.cfg.Edit(func(c *settings.Config) {
			configtest.SetNumbers(t, c, "api_heavy.cluster", 10, "api_heavy.per_task", 10)
			configtest.SetNumbers(t, c, "es2_knn", 10, "tiers.preview", 10, "per_user.preview", 2)
		})
		var held []*capgate.Admission
		for range 2 {
			a := e.gate.Admit(t.Context(), lanetest.Match("p", "preview"))
			mustDecide(t, a, capgate.DecisionAdmitted)
			held = append(held, a)
		}
		ch := e.admitAsync(t.Context(), lanetest.Match("p", "preview"))
		synctest.Wait()
		if n := e.waiting(t, "p"); n != 1 {
			t.Fatalf("waiting on p's lane = %d, want 1", n)
		}
		e.cfg.Edit(func(c *settings.Config) { configtest.SetNumbers(t, c, "per_user.preview", 1) })
		time.Sleep(capgate.WaitLimitsEvery) // the waiter's next re-check
		synctest.Wait()
		held[0].Release(t.Context())
		synctest.Wait()
		select {
		case a := <-ch:
			a.Release(t.Context())
			t.Fatalf("decided %q with 1 call running at the lowered limit of 1, want still waiting", a.Outcome().Decision)
		default:
		}
		if n := e.waiting(t, "p"); n != 1 {
			t.Fatalf("waiting on p's lane = %d, want 1", n)
		}
		held[1].Release(t.Context())
		third := <-ch
		defer third.Release(t.Context())
		mustDecide(t, third, capgate.DecisionAdmitted)
		if l := laneLimit(third, capgate.LaneName("user")); l != 1 {
			t.Errorf("user lane limit = %d, want the lowered 1", l)
		}
	})
}

// TestWaitEndsWhenItsLanePauses: a lane paused while a call waits on it
// refuses the call by the next re-check, as a paused lane refuses at once
// a call that arrives, with Retry-After retry_after.paused.
func TestWaitEndsWhenItsLanePauses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newWaitEnv(t)
		first, ch := e.queueBehind(t, "p")
		defer first.Release(t.Context())
		e.cfg.Edit(func(c *settings.Config) { configtest.SetNumbers(t, c, "per_user.preview", 0) })
		paused := time.Now()
		second := <-ch
		second.Release(t.Context())
		mustDecide(t, second, capgate.DecisionRefused)
		if d := time.Since(paused); d > capgate.WaitLimitsEvery {
			t.Errorf("refused %v after the lane paused, want by the next re-check (%v)", d, capgate.WaitLimitsEvery)
		}
		if s := second.Outcome().RetryAfter; s != 120 {
			t.Errorf("Retry-After = %d, want retry_after.paused (120)", s)
		}
		if n := e.waiting(t, "p"); n != 0 {
			t.Errorf("waiting after the refusal = %d, want 0", n)
		}
	})
}

// queueBehind admits user's first call (it holds the user lane, limit 1)
// and starts a second that queues behind it: the set-up of every test
// here. The caller releases first.
func (e *waitEnv) queueBehind(t *testing.T, user string) (*capgate.Admission, <-chan *capgate.Admission) {
	t.Helper()
	first := e.gate.Admit(t.Context(), lanetest.Match(user, "preview"))
	mustDecide(t, first, capgate.DecisionAdmitted)
	ch := e.admitAsync(t.Context(), lanetest.Match(user, "preview"))
	synctest.Wait()
	if n := e.waiting(t, user); n != 1 {
		t.Fatalf("waiting on %s's lane = %d, want 1", user, n)
	}
	return first, ch
}

// inLane returns how many leases the store holds in lane key.
func (e *waitEnv) inLane(t *testing.T, key string) int {
	t.Helper()
	counts := make([]int, 1)
	if err := e.store.Count(t.Context(), []string{key}, counts); err != nil {
		t.Fatal(err)
	}
	return counts[0]
}

// TestWaitGoesAheadWhenNoLongerEnforced: a call waits behind a full lane,
// then the config in force stops enforcing it (the mode goes to shadow, as
// the config service serves it when the config database fails; or off; or
// enforce_for no longer covers the call). By its next re-check it leaves
// the waitlist and goes ahead as an unenforced call arriving then would:
// counted, shadow-refused since the lane is still full (admitted if the
// same change raised its limit), and its line says the mode in force and
// that it was not enforced.
func TestWaitGoesAheadWhenNoLongerEnforced(t *testing.T) {
	tests := []struct {
		name string
		set  func(c *settings.Config)
		mode settings.Mode
		want capgate.Decision
	}{
		{"shadow", func(c *settings.Config) { c.Mode = settings.ModeShadow }, settings.ModeShadow, capgate.DecisionShadowRefused},
		{"off", func(c *settings.Config) { c.Mode = settings.ModeOff }, settings.ModeOff, capgate.DecisionShadowRefused},
		{"enforce_for aware", func(c *settings.Config) { c.EnforceFor = settings.EnforceAware },
			settings.ModeEnforce, capgate.DecisionShadowRefused},
		{"shadow and a raised limit", func(c *settings.Config) {
			c.Mode = settings.ModeShadow
			configtest.SetNumbers(t, c, "per_user.preview", 2)
		},
			settings.ModeShadow, capgate.DecisionAdmitted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newWaitEnv(t)
				first, ch := e.queueBehind(t, "p")
				defer first.Release(t.Context())
				// Past the NotAfter of its arrival's acquire, between two
				// re-checks.
				const waited = 5100 * time.Millisecond
				time.Sleep(waited)
				e.cfg.Edit(tt.set)
				changed := time.Now()
				second := <-ch
				if d := time.Since(changed); d > capgate.WaitLimitsEvery {
					t.Errorf("decided %v after the change, want by the next re-check (%v)", d, capgate.WaitLimitsEvery)
				}
				mustDecide(t, second, tt.want)
				if second.Outcome().Enforced {
					t.Error("Enforced() = true after the change, want false")
				}
				if n := e.waiting(t, "p"); n != 0 {
					t.Errorf("waiting after it went ahead = %d, want 0", n)
				}
				// Counted as an unenforced call is: it holds its leases.
				if !second.Outcome().Holding {
					t.Error("Holding() = false, want the leases a shadow call takes")
				}
				if n := e.inLane(t, "ocl:capacity:user:p"); n != 2 {
					t.Errorf("user lane holds %d, want 2 (the first call and this one)", n)
				}
				rec := second.Record()
				if rec.Mode != tt.mode || rec.Enforced {
					t.Errorf("line: mode %q, enforced %v; want mode %q, enforced false", rec.Mode, rec.Enforced, tt.mode)
				}
				if w, ok := second.Outcome().Waited, second.Outcome().Queued; !ok || w != time.Since(changed)+waited {
					t.Errorf("Waited = %v, %v; want the time until it went ahead", w, ok)
				}
				second.Release(t.Context())
				if n := e.inLane(t, "ocl:capacity:user:p"); n != 1 {
					t.Errorf("user lane holds %d after its release, want 1", n)
				}
				if len(e.obs.ended) != 1 {
					t.Errorf("WaitEnded called %d times, want 1", len(e.obs.ended))
				}
			})
		})
	}
}

// TestWaitNoLongerEnforcedTakesARacingGrant: the store granted the ticket
// but the wake-up is lost; the mode then goes to shadow. The waiter's
// re-check leaves the list, finds the grant and takes it (admitted, one
// lease per lane), rather than losing it or taking a second slot.
func TestWaitNoLongerEnforcedTakesARacingGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newWaitEnv(t)
		e.gate.Store = deafStore{e.store.Store}
		first, ch := e.queueBehind(t, "p")
		time.Sleep(100 * time.Millisecond)
		first.Release(t.Context()) // grants the ticket; nobody is woken
		e.cfg.Edit(func(c *settings.Config) { c.Mode = settings.ModeShadow })
		changed := time.Now()
		second := <-ch
		defer second.Release(t.Context())
		if d := time.Since(changed); d > capgate.WaitLimitsEvery {
			t.Errorf("decided %v after the change, want by the next re-check (%v)", d, capgate.WaitLimitsEvery)
		}
		mustDecide(t, second, capgate.DecisionAdmitted)
		if n := e.inLane(t, "ocl:capacity:user:p"); n != 1 {
			t.Errorf("user lane holds %d, want 1: the grant, taken once", n)
		}
		if n := e.waiting(t, "p"); n != 0 {
			t.Errorf("waiting after it went ahead = %d, want 0", n)
		}
	})
}

// TestWaitNoLongerEnforcedWithLocalLanes: with local lanes, a call that
// stops being enforced while it waits is counted there too, whatever they
// hold (this gateway's first call fills the user lane), as an unenforced
// call arriving then is; they don't refuse it.
func TestWaitNoLongerEnforcedWithLocalLanes(t *testing.T) {
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
		first, ch := e.queueBehind(t, "p")
		defer first.Release(t.Context())
		e.cfg.Edit(func(c *settings.Config) { c.Mode = settings.ModeShadow })
		second := <-ch
		mustDecide(t, second, capgate.DecisionShadowRefused)
		if n := localCount(); n != 2 {
			t.Errorf("local count while both run = %d, want 2", n)
		}
		if n := e.inLane(t, "ocl:capacity:user:p"); n != 2 {
			t.Errorf("user lane holds %d while both run, want 2", n)
		}
		second.Release(t.Context())
		if n := localCount(); n != 1 {
			t.Errorf("local count after its release = %d, want 1", n)
		}
	})
}

// failingConfigStore is a config database whose reads fail once down is
// set.
type failingConfigStore struct {
	latest *config.Version
	down   atomic.Bool
}

func (s *failingConfigStore) Latest(context.Context) (*config.Version, error) {
	if s.down.Load() {
		return nil, errors.New("dial tcp 127.0.0.1:5432: connection refused")
	}
	return s.latest, nil
}

func (s *failingConfigStore) LatestWithin(ctx context.Context, _ time.Duration) (*config.Version, error) {
	return s.Latest(ctx)
}
func (s *failingConfigStore) History(context.Context, int) ([]config.Version, error) {
	return nil, errors.New("not kept")
}
func (s *failingConfigStore) Update(context.Context, func(*config.Version) (*config.Version, error)) (*config.Version, error) {
	return nil, errors.New("read only")
}
func (s *failingConfigStore) Ping(context.Context) error { return nil }
func (s *failingConfigStore) Close() error               { return nil }

// TestWaitGoesAheadWhenTheConfigDatabaseFails: the config service serves
// enforce as shadow once it can't read the database (fail open), and a
// call that was already waiting goes ahead then too, instead of getting
// the 429 at max_seconds.
func TestWaitGoesAheadWhenTheConfigDatabaseFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newWaitEnv(t)
		store := &failingConfigStore{latest: &config.Version{ID: 1, Config: e.cfg.Config(t.Context()).Doc()}}
		svc := config.NewService(store, settings.ModeEnforce)
		svc.CacheTTL = time.Second
		svc.Logger = slog.New(slog.DiscardHandler)
		e.gate.Source = svc
		first, ch := e.queueBehind(t, "p")
		defer first.Release(t.Context())
		store.down.Store(true)
		down := time.Now()
		second := <-ch
		defer second.Release(t.Context())
		if d := time.Since(down); d > svc.CacheTTL+capgate.WaitLimitsEvery {
			t.Errorf("decided %v after the database went down, want once the cache ran out (%v) and the next re-check",
				d, svc.CacheTTL)
		}
		mustDecide(t, second, capgate.DecisionShadowRefused)
		if n := e.waiting(t, "p"); n != 0 {
			t.Errorf("waiting after it went ahead = %d, want 0", n)
		}
	})
}

// TestWaitFollowsALoweredMaxSeconds: wait.max_seconds lowered while a call
// waits shortens its wait to the new bound, counted from when it queued
// (at the next re-check when that is already past; 0 ends it there, as 0
// refuses an arriving call at once). A raised one does not lengthen it:
// the caller was told the bound it arrived under (decide's wait header).
func TestWaitFollowsALoweredMaxSeconds(t *testing.T) {
	const changeAt = 5100 * time.Millisecond // between two re-checks
	tests := []struct {
		name   string
		max    int
		refuse time.Duration // when the call is refused, from when it queued
	}{
		{"lowered", 8, 8 * time.Second},
		{"lowered under the time waited", 3, changeAt + 150*time.Millisecond},
		{"lowered to 0", 0, changeAt + 150*time.Millisecond},
		{"raised", 30, 20 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newWaitEnv(t)
				first, ch := e.queueBehind(t, "p")
				defer first.Release(t.Context())
				time.Sleep(changeAt)
				e.cfg.Edit(func(c *settings.Config) { c.Wait.MaxSeconds = tt.max })
				second := <-ch
				second.Release(t.Context())
				mustDecide(t, second, capgate.DecisionRefused)
				if w := second.Outcome().Waited; w != tt.refuse {
					t.Errorf("refused after waiting %v, want %v", w, tt.refuse)
				}
				if n := e.waiting(t, "p"); n != 0 {
					t.Errorf("waiting after the refusal = %d, want 0", n)
				}
			})
		})
	}
}
