package capgate_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
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

// refusalGate is a gate for the refusal-hint table: enforced, user lane
// (preview) 2, task lane 10, everything else out of the way, over a memory
// store behind a mock (so a case can make it fail), on a clock the test
// moves, inside a synctest bubble. other is a second gateway on the same store, to fill a lane the
// first one's local lanes do not see.
type refusalGate struct {
	mem   *memory.Store
	store *mock.LaneStore
	cfg   *settings.Fixed
	gate  *capgate.Gate
	other *capgate.Gate
	now   *time.Time
}

func newRefusalGate(t *testing.T, policy string, waitlist, local bool) *refusalGate {
	t.Helper()
	c := settings.Default(nil, settings.ModeEnforce)
	c.EnforceFor = settings.EnforceAll
	configtest.SetNumbers(t, &c, "api_heavy.cluster", 100, "api_heavy.per_task", 10)
	c.Unidentified = 1
	configtest.SetNumbers(t, &c, "es2_knn", 100, "tiers.preview", 100, "per_user.preview", 2)
	c.RetryAfter.Policy = policy
	c.Wait = settings.Wait{}
	if waitlist {
		// Waiting on, but no room on the list: a full waitlist.
		c.Wait = settings.Wait{MaxSeconds: 20}
	}
	e := &refusalGate{mem: memory.New(nil), cfg: settings.NewFixed(c)}
	e.store = &mock.LaneStore{Base: e.mem}
	var store capgate.LaneStore = e.store
	if waitlist {
		store = e.mem // the mock is no Waitlist
	}
	now := time.Now() // the store checks not-after times by its own clock
	e.now = &now
	var err error
	for i, g := range []**capgate.Gate{&e.gate, &e.other} {
		if *g, err = capgate.NewGate(store, e.cfg, nil, fmt.Sprint("task-", i)); err != nil {
			t.Fatal(err)
		}
		(*g).Now = func() time.Time { return *e.now }
		t.Cleanup(func() { _ = (*g).Close(context.WithoutCancel(t.Context())) })
	}
	if local {
		e.gate.Local = memory.New(nil)
	}
	// History: two calls held 1.2 s in every lane of a $match, so the
	// adaptive hints differ from the fixed ones (a slot of the user lane
	// frees every 600 ms, of the task lane every 120 ms).
	a, b := e.admit(t, e.gate, "seed"), e.admit(t, e.gate, "seed")
	if a.Outcome().Decision != capgate.DecisionAdmitted || b.Outcome().Decision != capgate.DecisionAdmitted {
		t.Fatalf("seed calls: %s, %s", a.Outcome().Decision, b.Outcome().Decision)
	}
	*e.now = e.now.Add(1200 * time.Millisecond)
	a.Release(context.Background())
	b.Release(context.Background())
	return e
}

// admit admits a $match of user through g; released at the end.
func (e *refusalGate) admit(t *testing.T, g *capgate.Gate, user string) *capgate.Admission {
	a := g.Admit(context.Background(), lanetest.Match(user, "preview"))
	t.Cleanup(func() { a.Release(context.Background()) })
	return a
}

// Every refusal path gives the same kinds of hints under one policy: the
// hold-based Retry-After and the spacing when adaptive, base × calls ahead
// and no spacing when fixed.
func TestEveryRefusalCarriesTheSameHints(t *testing.T) {
	paths := []struct {
		name     string
		waitlist bool // the gate waits (over the memory store itself)
		local    bool // the gate keeps local lanes
		scope    capgate.LaneName
		slot     time.Duration // the scope lane's hold ÷ its limit
		refuse   func(t *testing.T, e *refusalGate) *capgate.Admission
	}{
		{"by the store", false, true, capgate.LaneName("user"), 600 * time.Millisecond, func(t *testing.T, e *refusalGate) *capgate.Admission {
			// Another gateway holds the user's two: this one's local lanes
			// see nothing, the store refuses.
			e.admit(t, e.other, "x")
			e.admit(t, e.other, "x")
			return e.admit(t, e.gate, "x")
		}},
		{"by the local lanes", false, true, capgate.LaneName("user"), 600 * time.Millisecond, func(t *testing.T, e *refusalGate) *capgate.Admission {
			e.admit(t, e.gate, "x")
			e.admit(t, e.gate, "x")
			var asked int
			e.store.AcquireFn = func(ctx context.Context, req capgate.AcquireRequest, counts []int) (bool, error) {
				asked++
				return e.mem.Acquire(ctx, req, counts)
			}
			a := e.admit(t, e.gate, "x")
			if asked != 0 {
				t.Errorf("the store was asked %d times, want 0: the local lanes refuse", asked)
			}
			return a
		}},
		{"by the degraded limits", false, true, capgate.LaneName("es2_knn"), 600 * time.Millisecond, func(t *testing.T, e *refusalGate) *capgate.Admission {
			// es2_knn 4 over the two gateways seen: 2 here while the
			// store is down. Three users, so no user lane fills.
			e.cfg.Edit(func(c *settings.Config) { configtest.SetNumbers(t, c, "es2_knn", 4) })
			synctest.Wait()                 // the seed calls' count of the gateways is done
			*e.now = e.now.Add(time.Minute) // and due again
			e.admit(t, e.other, "y")
			e.admit(t, e.gate, "x1")
			synctest.Wait() // the gateways are counted after the store answered
			e.store.AcquireFn = func(context.Context, capgate.AcquireRequest, []int) (bool, error) {
				return false, errors.New("store down")
			}
			if a := e.admit(t, e.gate, "x2"); !a.Outcome().Degraded || a.Outcome().Decision != capgate.DecisionUnavailable {
				t.Fatalf("second call: %s, degraded %v", a.Outcome().Decision, a.Outcome().Degraded)
			}
			a := e.admit(t, e.gate, "x3")
			if !a.Outcome().Degraded {
				t.Error("not degraded")
			}
			return a
		}},
		{"by a full waitlist", true, false, capgate.LaneName("user"), 600 * time.Millisecond, func(t *testing.T, e *refusalGate) *capgate.Admission {
			e.admit(t, e.other, "x")
			e.admit(t, e.other, "x")
			return e.admit(t, e.gate, "x")
		}},
		{"unidentified", false, true, capgate.LaneName("user"), 1200 * time.Millisecond, func(t *testing.T, e *refusalGate) *capgate.Admission {
			// One at once per gateway (unidentified 1): the lane's
			// name is the user lane's, whose hold is 1.2 s.
			cause := errors.New("identity lookup timed out")
			first := e.gate.AdmitWith(context.Background(), lanetest.Match("", "preview"), capgate.AdmitOptions{Unidentified: cause})
			t.Cleanup(func() { first.Release(context.Background()) })
			a := e.gate.AdmitWith(context.Background(), lanetest.Match("", "preview"), capgate.AdmitOptions{Unidentified: cause})
			t.Cleanup(func() { a.Release(context.Background()) })
			return a
		}},
		{"the store too busy", false, false, capgate.LaneName("api_heavy_task"), 120 * time.Millisecond, func(t *testing.T, e *refusalGate) *capgate.Admission {
			e.store.AcquireFn = func(context.Context, capgate.AcquireRequest, []int) (bool, error) {
				return false, fmt.Errorf("acquire: %w", capgate.ErrBusy)
			}
			return e.admit(t, e.gate, "x")
		}},
	}
	for _, policy := range []string{settings.PolicyAdaptive, settings.PolicyFixed} {
		for _, p := range paths {
			t.Run(policy+"/"+p.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					e := newRefusalGate(t, policy, p.waitlist, p.local)
					a := p.refuse(t, e)
					if a.Outcome().Decision != capgate.DecisionRefused || a.Outcome().Scope != p.scope {
						t.Fatalf("decision %s scope %s, want refused on %s", a.Outcome().Decision, a.Outcome().Scope, p.scope)
					}
					h := http.Header{}
					answer.SetHeaders(h, a.Outcome())
					wantRetry, wantSpacing := "5", "" // base × one call ahead
					if policy == settings.PolicyAdaptive {
						wantRetry = fmt.Sprint(int((p.slot + time.Second - 1) / time.Second))
						wantSpacing = fmt.Sprint(p.slot.Milliseconds())
					}
					if got := h.Get("Retry-After"); got != wantRetry {
						t.Errorf("Retry-After %q, want %s", got, wantRetry)
					}
					if got := h.Get(oclNames.SuggestedSpacing); got != wantSpacing {
						t.Errorf("%s %q, want %q", oclNames.SuggestedSpacing, got, wantSpacing)
					}
				})
			})
		}
	}
}
