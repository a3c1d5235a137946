package capgate_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/answer"
	"github.com/capgate/capgate/configtest"
	"github.com/capgate/capgate/lanetest"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
)

// hintsEnv is a gate over the memory store in shadow mode, whose task lane
// (2 slots) is the bottleneck, on a clock the test moves. Shadow: the
// hints of a shadow-refused call are those a refused one gets, and no call
// ever waits for a slot. (The headers of a real refusal are tested through
// the gateway, in http.)
func hintsEnv(t *testing.T, policy string) (*hintsGate, *time.Time) {
	t.Helper()
	cfg := settings.Default(nil, settings.ModeShadow)
	configtest.SetNumbers(t, &cfg, "api_heavy.cluster", 9, "api_heavy.per_task", 2)
	configtest.SetNumbers(t, &cfg, "es2_knn", 9, "tiers.core", 9, "per_user.core", 9)
	cfg.RetryAfter.Policy = policy
	e := &hintsGate{t: t, Cfg: settings.NewFixed(cfg)}
	gate, err := capgate.NewGate(memory.New(nil), e.Cfg, nil, "task-a")
	if err != nil {
		t.Fatal(err)
	}
	e.Gate = gate
	now := time.Now() // the store checks the acquire's not-after time against its own clock
	e.Gate.Now = func() time.Time { return now }
	return e, &now
}

type hintsGate struct {
	t    *testing.T
	Gate *capgate.Gate
	Cfg  *settings.Fixed
}

// Admit admits call; the test releases it (releasing twice is harmless).
func (e *hintsGate) Admit(call capgate.Call) *capgate.Admission {
	a := e.Gate.Admit(context.Background(), call)
	e.t.Cleanup(func() { a.Release(context.Background()) })
	return a
}

// holdTwo admits two calls, holds them for d and releases them.
func holdTwo(t *testing.T, e *hintsGate, now *time.Time, d time.Duration) {
	t.Helper()
	a, b := e.Admit(lanetest.Match("u1", "core")), e.Admit(lanetest.Match("u2", "core"))
	if a.Outcome().Decision != capgate.DecisionAdmitted || b.Outcome().Decision != capgate.DecisionAdmitted {
		t.Fatalf("decisions %s, %s; want admitted", a.Outcome().Decision, b.Outcome().Decision)
	}
	*now = now.Add(d)
	a.Release(context.Background())
	b.Release(context.Background())
}

func TestAdaptiveHintsFromTheGatesOwnReleases(t *testing.T) {
	e, now := hintsEnv(t, settings.PolicyAdaptive)

	// No history yet: the fixed formula's answer, and base per slot.
	first := [2]*capgate.Admission{e.Admit(lanetest.Match("u1", "core")), e.Admit(lanetest.Match("u2", "core"))}
	r := e.Admit(lanetest.Match("u3", "core"))
	h := http.Header{}
	answer.SetHeaders(h, r.Outcome())
	if got := r.Outcome().RetryAfter; got != 5 {
		t.Errorf("no history: Retry-After %d, want 5", got)
	}
	if got := h.Get(oclNames.SuggestedSpacing); got != "5000" {
		t.Errorf("no history: spacing %q, want 5000", got)
	}
	r.Release(context.Background())
	*now = now.Add(1300 * time.Millisecond)
	for _, a := range first {
		a.Release(context.Background())
	}

	// Calls held 1.3 s on a 2-slot lane: a slot frees every 650 ms.
	holdTwo(t, e, now, 1300*time.Millisecond)
	a, b := e.Admit(lanetest.Match("u1", "core")), e.Admit(lanetest.Match("u2", "core"))
	defer a.Release(context.Background())
	defer b.Release(context.Background())
	h = http.Header{}
	answer.SetHeaders(h, a.Outcome())
	if got := h.Get(oclNames.SuggestedSpacing); got != "" {
		t.Errorf("admitted call got spacing %q, want none", got)
	}
	r = e.Admit(lanetest.Match("u3", "core"))
	defer r.Release(context.Background())
	if r.Outcome().Decision != capgate.DecisionShadowRefused || r.Outcome().Scope != capgate.LaneName("api_heavy_task") {
		t.Fatalf("third call: %s in %s, want shadow-refused in %s", r.Outcome().Decision, r.Outcome().Scope, capgate.LaneName("api_heavy_task"))
	}
	h = http.Header{}
	answer.SetHeaders(h, r.Outcome())
	if got := r.Outcome().RetryAfter; got != 1 {
		t.Errorf("Retry-After %d, want 1 (650 ms, rounded up)", got)
	}
	if got := h.Get("Retry-After"); got != "" {
		t.Errorf("a shadow-refused call got the Retry-After header %q", got)
	}
	if got := h.Get(oclNames.SuggestedSpacing); got != "650" {
		t.Errorf("spacing %q, want 650", got)
	}
	if sp := r.Outcome().Spacing; sp != 650*time.Millisecond {
		t.Errorf("spacing = %v; want 650ms", sp)
	}
}

func TestFixedPolicyHintsAsBefore(t *testing.T) {
	e, now := hintsEnv(t, settings.PolicyFixed)
	holdTwo(t, e, now, 1300*time.Millisecond)
	a, b := e.Admit(lanetest.Match("u1", "core")), e.Admit(lanetest.Match("u2", "core"))
	defer a.Release(context.Background())
	defer b.Release(context.Background())
	r := e.Admit(lanetest.Match("u3", "core"))
	defer r.Release(context.Background())
	h := http.Header{}
	answer.SetHeaders(h, r.Outcome())
	if got := r.Outcome().RetryAfter; got != 5 {
		t.Errorf("fixed: Retry-After %d, want 5 (base × 1 call ahead)", got)
	}
	if got := h.Get(oclNames.SuggestedSpacing); got != "" {
		t.Errorf("fixed: spacing %q, want none", got)
	}
}

// oclNames are the built-in policy's header names.
var oclNames = policy.OCL().Names.Header()
