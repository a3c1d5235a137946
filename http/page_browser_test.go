package http_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/config"
	capgatehttp "github.com/capgate/capgate/http"
	"github.com/capgate/capgate/internal/browsertest"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
	"github.com/capgate/capgate/sqlite"
	"github.com/capgate/capgate/status"
)

// The status page in headless Chromium, over the staff API of this
// package (no gateway in front: the calls in flight are held on the gate
// directly). cmd/capgate's TestStatusPageInChromium drives it through a
// real gateway under the OCL policy; the tests here lay it out under a
// policy too. CAPGATE_CHROMIUM names the browser (default: chromium on
// PATH), CAPGATE_REQUIRE_BROWSER=1 fails instead of skipping without one;
// scripts/browser-deps.sh installs it.

// pageBrowser is one headless Chromium tab (browsertest.Browser), its
// context at hand for chromedp's actions.
type pageBrowser struct {
	*browsertest.Browser
	ctx context.Context
}

// startPageBrowser starts Chromium within ctx; it skips the test when
// there is none (or it will not start). The browser is closed at cleanup.
func startPageBrowser(t *testing.T, ctx context.Context) *pageBrowser {
	t.Helper()
	b := browsertest.Start(t, ctx)
	return &pageBrowser{Browser: b, ctx: b.Context()}
}

// pageWait bounds each wait for the page to show something; the page
// polls every 2 s, and a wait ends as soon as it shows it.
const pageWait = 15 * time.Second

func (b *pageBrowser) do(t *testing.T, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, pageWait)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates expr in the page.
func eval[T any](t *testing.T, b *pageBrowser, expr string) T {
	t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// text returns the trimmed text of the element sel selects, or "<none>".
func (b *pageBrowser) text(t *testing.T, sel string) string {
	t.Helper()
	return eval[string](t, b, fmt.Sprintf(`(() => { const e = document.querySelector(%s); return e ? e.textContent.trim() : "<none>"; })()`, jsString(sel)))
}

// waitText waits until the text of sel contains want (equals it when
// exact).
func (b *pageBrowser) waitText(t *testing.T, sel, want string, exact bool) {
	t.Helper()
	cond := "t.includes(want)"
	if exact {
		cond = "t === want"
	}
	expr := fmt.Sprintf(`(() => { const e = document.querySelector(%s); const want = %s; if (!e) return false;
		const t = e.textContent.trim(); return %s; })()`, jsString(sel), jsString(want), cond)
	_, err := chromedp.Run(b.ctx, chromedp.Poll[chromedp.Void](expr,
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(pageWait)))
	if err != nil {
		t.Fatalf("waiting for %s to show %q: %v; it shows %q", sel, want, err, b.text(t, sel))
	}
}

// waitTrue waits until expr is true in the page.
func (b *pageBrowser) waitTrue(t *testing.T, expr string) {
	t.Helper()
	_, err := chromedp.Run(b.ctx, chromedp.Poll[chromedp.Void](expr,
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(pageWait)))
	if err != nil {
		t.Fatalf("waiting for %s: %v", expr, err)
	}
}

// waitHidden waits until the element sel selects is hidden (or shown).
func (b *pageBrowser) waitHidden(t *testing.T, sel string, hidden bool) {
	t.Helper()
	expr := fmt.Sprintf(`(() => { const e = document.querySelector(%s); return !!e && e.hidden === %v; })()`, jsString(sel), hidden)
	_, err := chromedp.Run(b.ctx, chromedp.Poll[chromedp.Void](expr,
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(pageWait)))
	if err != nil {
		t.Fatalf("waiting for %s to be hidden=%v: %v", sel, hidden, err)
	}
}

func jsString(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\r", `\r`, "\u2028", `\u2028`, "\u2029", `\u2029`)
	return `"` + r.Replace(s) + `"`
}

func clearField(id string) chromedp.Action[chromedp.Void] {
	return chromedp.Evaluate[chromedp.Void](`document.getElementById(` + jsString(id) + `).value = ""`)
}

// pageServer is the staff API over a config store in a temporary SQLite
// file, with the lanes of a gate on the memory store and this gateway's
// recent decisions.
type pageServer struct {
	*httptest.Server
	configs *config.Service
	gate    *capgate.Gate
	recent  *status.Recent
}

// newPageServer serves the staff API under policy p: staff-token is staff
// (root), user-token is not.
func newPageServer(t *testing.T, p *policy.Policy) *pageServer {
	t.Helper()
	store, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "capgate.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	configs := newConfigService(store)
	configs.SetPolicy(p)
	gate, err := capgate.NewGate(memory.New(nil), configs, nil, "task1")
	if err != nil {
		t.Fatal(err)
	}
	gate.Logger = slog.New(slog.DiscardHandler)
	s := &pageServer{configs: configs, gate: gate, recent: status.NewRecent(nil)}
	h := capgatehttp.NewStaffHandler(configs, tokens{
		"staff-token": {UserID: "root", Staff: true},
		"user-token":  {UserID: "alice", Groups: []string{"core_user"}},
	})
	h.Status = func(ctx context.Context, cfg settings.Config) status.Snapshot {
		st := gate.Status(ctx, cfg)
		st.Decisions = s.recent.Decisions()
		return st
	}
	h.Logger = slog.New(slog.DiscardHandler)
	s.Server = httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s
}

// hold admits call as user of tier and keeps it in flight until cleanup
// or the release returned; the decision is recorded for the page.
func (s *pageServer) hold(t *testing.T, call capgate.Call, user, tier string) (release func()) {
	t.Helper()
	call.UserID, call.Tier = user, tier
	ctx := context.WithoutCancel(t.Context())
	a := s.gate.Admit(ctx, call)
	var lanes []string
	for _, l := range a.Outcome().Lanes {
		lanes = append(lanes, string(l.Name))
	}
	scope := ""
	if a.Outcome().Decision == capgate.DecisionRefused || a.Outcome().Decision == capgate.DecisionShadowRefused {
		scope = string(a.Outcome().Scope)
	}
	s.recent.Record(tier, string(a.Outcome().Decision), lanes, scope)
	var once sync.Once
	release = func() { once.Do(func() { a.Release(ctx) }) }
	t.Cleanup(release)
	return release
}

// signIn loads the page and signs in as staff.
func signIn(t *testing.T, b *pageBrowser, s *pageServer, first string) {
	t.Helper()
	b.do(t, "load the page", chromedp.Navigate(s.URL+"/capacity/"), chromedp.WaitVisible(chromedp.CSS("#token")))
	b.do(t, "sign in", chromedp.SendKeys(chromedp.CSS("#token"), "staff-token"),
		chromedp.Click(chromedp.CSS("#login-form button")), chromedp.WaitVisible(chromedp.CSS(first)))
}

// TestStatusPageOCLInChromium: under the built-in policy the page lays
// out the lanes it always did: api_heavy with its bulk limit, es2_knn,
// the four tiers, the task and the busiest users, the decisions by tier
// in the tiers' order, and the form's twelve limits, in the order it
// always had.
func TestStatusPageOCLInChromium(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 55*time.Second)
	defer cancel()
	b := startPageBrowser(t, ctx)
	s := newPageServer(t, policy.OCL())

	b.do(t, "load the page", chromedp.Navigate(s.URL+"/capacity/"), chromedp.WaitVisible(chromedp.CSS("#token")))
	if !eval[bool](t, b, `document.getElementById("app").hidden`) {
		t.Fatal("anonymous: the data part is shown")
	}
	b.do(t, "sign in as a user", chromedp.SendKeys(chromedp.CSS("#token"), "user-token"),
		chromedp.Click(chromedp.CSS("#login-form button")))
	b.waitText(t, "#login-error", "That account is not staff: You do not have permission to perform this action. (403)", true)
	b.do(t, "clear the token", clearField("token"))
	signIn(t, b, s, "#lane-api_heavy")

	rows := func(sel string) string {
		return strings.Join(eval[[]string](t, b, `Array.from(document.querySelectorAll(`+jsString(sel)+`)).map((e) => e.id)`), " ")
	}
	b.waitText(t, "#lane-api_heavy .count", "0 / 4", true)
	if got, want := rows("#lanes tbody tr"), "lane-api_heavy lane-es2_knn lane-tier-staff lane-tier-core lane-tier-early_access lane-tier-preview"; got != want {
		t.Errorf("lane rows %q; want %q", got, want)
	}
	for sel, want := range map[string]string{
		"#lane-api_heavy th":          "api_heavy (bulk calls up to 3)",
		"#lane-es2_knn th":            "es2_knn",
		"#lane-es2_knn .count":        "0 / 3",
		"#lane-tier-preview th":       "tier preview",
		"#lane-tier-preview .count":   "0 / 2",
		"#lane-tier-staff .count":     "0 / 4",
		"#tasks-none":                 "No task has calls in flight.",
		"#users-none":                 "No user has calls in flight.",
		"#users-h":                    "Busiest users",
		"#binding":                    "No lane is full: no call waits.",
		"#live-summary":               "Mode shadow. api_heavy 0 of 4, es2_knn 0 of 3.",
		"#store":                      "memory (in-process: this gateway only) · ok",
		"#decisions-none":             "No call decided in the last 15 minutes.",
		`[id="config-tiers.preview"]`: "tiers.preview22",
	} {
		if got := b.text(t, sel); got != want {
			t.Errorf("%s = %q; want %q", sel, got, want)
		}
	}
	if got, want := rows("#limit-fields input"), "f-api_heavy-cluster f-api_heavy-per_task f-es2_knn f-reserve_single_row "+
		"f-tiers-staff f-tiers-core f-tiers-early_access f-tiers-preview f-per_user-staff f-per_user-core f-per_user-early_access f-per_user-preview"; got != want {
		t.Errorf("limit fields %q\nwant %q", got, want)
	}
	if got := eval[string](t, b, `document.getElementById("f-per_user-core").value`); got != "3" {
		t.Errorf("per_user.core field = %q; want 3", got)
	}
	if unlabelled := eval[[]string](t, b, `Array.from(document.querySelectorAll("input, select, textarea"))
		.filter((e) => !e.labels || e.labels.length === 0).map((e) => e.id)`); len(unlabelled) > 0 {
		t.Errorf("controls without a label: %v", unlabelled)
	}

	// linus (preview: one at a time) twice: the second is shadow-refused
	// in his user lane.
	rerank := capgatehttp.OCLCall("rerank", 2, false, false)
	first, second := s.hold(t, rerank, "linus", "preview"), s.hold(t, rerank, "linus", "preview")
	b.waitText(t, "#user-linus .count", "2", true)
	b.waitText(t, "#dec-lane-user .dec-shadow-refused", "1 / 1 / 1", true)
	first()
	second()

	// Three $rerank calls held: api_heavy's bulk limit (3) is full, the
	// task and the users are listed, the decisions counted by tier.
	var releases []func()
	for _, u := range []struct{ user, tier string }{{"ken", "core"}, {"grace", "core"}, {"linus", "preview"}} {
		releases = append(releases, s.hold(t, rerank, u.user, u.tier))
	}
	b.waitText(t, "#lane-api_heavy .count", "3 / 4", true)
	b.waitText(t, "#binding", "Full: api_heavy (bulk calls up to 3): 3 / 4. In shadow nothing waits; in enforce calls would wait on this lane.", true)
	b.waitText(t, "#lane-api_heavy.binding .binding-mark", "full: enforce would make calls wait here", true)
	for sel, want := range map[string]string{
		"#lane-tier-core .count":                "2 / 4",
		"#lane-tier-preview .count":             "1 / 2",
		"#lane-es2_knn .count":                  "0 / 3",
		"#task-task1 th":                        "task1",
		"#task-task1 .count":                    "3 / 4",
		"#user-grace .count":                    "1",
		"#dec-tier-core .dec-admitted":          "2 / 2 / 2",
		"#dec-tier-preview .dec-admitted":       "2 / 2 / 2",
		"#dec-tier-preview .dec-shadow-refused": "1 / 1 / 1",
		"#dec-lane-api_heavy .dec-admitted":     "4 / 4 / 4",
		"#live-summary":                         "Mode shadow. api_heavy 3 of 4, es2_knn 0 of 3.",
	} {
		b.waitText(t, sel, want, true)
	}
	if got, want := rows("#users tbody tr"), "user-grace user-ken user-linus"; got != want {
		t.Errorf("users %q; want %q", got, want)
	}
	if got, want := rows("#decisions-table tbody tr"), "dec-tier-core dec-tier-preview dec-lane-api_heavy dec-lane-api_heavy_task dec-lane-tier dec-lane-user"; got != want {
		t.Errorf("decision rows %q; want %q", got, want)
	}
	if n := eval[int](t, b, `document.querySelectorAll("tr.binding").length`); n != 1 {
		t.Errorf("%d rows marked binding; want 1", n)
	}
	if !eval[bool](t, b, `document.getElementById("tasks-none").hidden && document.getElementById("users-none").hidden`) {
		t.Error("the empty notes of the tasks and users are shown")
	}
	for _, r := range releases {
		r()
	}
	b.waitText(t, "#binding", "No lane is full: no call waits.", true)

	// A limit raised through the form; a bad value refused inline.
	b.do(t, "change a limit", clearField("f-api_heavy-cluster"),
		chromedp.SendKeys(chromedp.CSS("#f-api_heavy-cluster"), "6"),
		chromedp.SendKeys(chromedp.CSS("#f-note"), "more room"),
		chromedp.Click(chromedp.CSS("#save")))
	b.waitText(t, "#change-result", "Saved version 1: api_heavy.cluster 4 → 6.", true)
	b.waitText(t, "#lane-api_heavy .count", "0 / 6", true)
	b.waitText(t, `[id="config-api_heavy.cluster"] td`, "6", true)
	b.do(t, "send a bad value", clearField("f-es2_knn"),
		chromedp.SendKeys(chromedp.CSS("#f-es2_knn"), "-1"),
		chromedp.SendKeys(chromedp.CSS("#f-note"), "a bad value"),
		chromedp.Click(chromedp.CSS("#save")))
	b.waitText(t, "#change-errors", `"es2_knn" must be a whole number from 0 to 100000.`, false)
	if got := eval[string](t, b, `document.getElementById("f-es2_knn").getAttribute("aria-invalid")`); got != "true" {
		t.Errorf("es2_knn aria-invalid = %q; want true", got)
	}

	if p := b.Problems(); len(p) > 0 {
		t.Errorf("the page had errors:\n%s", strings.Join(p, "\n"))
	}
}

// inferenceCall returns a call of the inference policy's route of model,
// of one seat (256 tokens, for a route that counts max_tokens).
func inferenceCall(p *policy.Policy, route, model string) capgate.Call {
	r := p.Route(route)
	f := policy.NewFields(r)
	f.SetString(r.Field("model"), model)
	f.SetInt(r.Field("max_tokens"), 256)
	return capgate.Call{Route: r, Fields: f}
}

// TestStatusPageInferenceInChromium: under the inference example the page
// shows its cluster lane, no tasks, its busiest users and the busiest
// models with their limit, the model lane that is full as the one calls
// wait on, the decisions of its tiers, and the form's fields of its
// config keys.
func TestStatusPageInferenceInChromium(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 55*time.Second)
	defer cancel()
	b := startPageBrowser(t, ctx)
	// The example with one limit for every model, 2 seats: the page's
	// keyed lane then lists only the models with calls in flight.
	src := strings.Replace(string(inferencePolicy(t).Source()), "    limit: 8\n    key_limits: {large: 4}\n", "    limit: 2\n", 1)
	p, err := policy.Parse("inference.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	s := newPageServer(t, p)
	signIn(t, b, s, "#lane-cluster")
	ids := func(sel string) string {
		return strings.Join(eval[[]string](t, b, `Array.from(document.querySelectorAll(`+jsString(sel)+`)).map((e) => e.id)`), " ")
	}
	b.waitText(t, "#lane-cluster .count", "0 / 8", true)
	b.waitTrue(t, `document.getElementById("f-lanes-cluster").value === "8"`)
	if got, want := ids("#lanes tbody tr"), "lane-cluster"; got != want {
		t.Errorf("lane rows %q; want %q", got, want)
	}
	if got, want := ids("#limit-fields input"), "f-lanes-cluster f-lanes-model f-lanes-user-pro f-lanes-user-free"; got != want {
		t.Errorf("limit fields %q; want %q", got, want)
	}
	if got := eval[[]string](t, b, `["f-lanes-cluster", "f-lanes-model", "f-lanes-user-pro", "f-lanes-user-free"]
		.map((id) => document.getElementById(id).value)`); strings.Join(got, " ") != "8 2 3 1" {
		t.Errorf("limit fields hold %q; want 8 2 3 1", got)
	}
	for sel, want := range map[string]string{
		"#lane-cluster th":  "cluster",
		"#users-h":          "Busiest users",
		"#users-none":       "No user has calls in flight.",
		"#keyed-model-h":    "Lane model: busiest by model",
		"#keyed-model-none": "No model has calls in flight.",
		"#live-summary":     "Mode shadow. cluster 0 of 8.",
	} {
		if got := b.text(t, sel); got != want {
			t.Errorf("%s = %q; want %q", sel, got, want)
		}
	}
	if !eval[bool](t, b, `document.getElementById("tasks-box").hidden && !document.getElementById("users-box").hidden`) {
		t.Error("a policy without a task lane shows the tasks, or its user lane is hidden")
	}

	// Two calls of llama and one of e5 held: llama's lane is full.
	releases := []func(){
		s.hold(t, inferenceCall(p, "chat", "llama"), "priya", "pro"),
		s.hold(t, inferenceCall(p, "completions", "llama"), "priya", "pro"),
		s.hold(t, inferenceCall(p, "embeddings", "e5"), "pam", "free"),
	}
	b.waitText(t, "#lane-cluster .count", "3 / 8", true)
	for sel, want := range map[string]string{
		"#entry-model-llama .name":                 "llama",
		"#entry-model-llama .count":                "2 / 2",
		"#entry-model-e5 .count":                   "1 / 2",
		"#user-priya .count":                       "2",
		"#user-pam .count":                         "1",
		"#binding":                                 "Full: model llama: 2 / 2. In shadow nothing waits; in enforce calls would wait on this lane.",
		"#entry-model-llama.binding .binding-mark": "full: enforce would make calls wait here",
		"#dec-tier-pro .dec-admitted":              "2 / 2 / 2",
		"#dec-tier-free .dec-admitted":             "1 / 1 / 1",
		"#dec-lane-model .dec-admitted":            "3 / 3 / 3",
	} {
		b.waitText(t, sel, want, true)
	}
	if got, want := ids("#keyed-model tbody tr"), "entry-model-llama entry-model-e5"; got != want {
		t.Errorf("model rows %q; want %q", got, want)
	}
	if got, want := ids("#decisions-table tbody tr"), "dec-tier-pro dec-tier-free dec-lane-cluster dec-lane-model dec-lane-user"; got != want {
		t.Errorf("decision rows %q; want %q", got, want)
	}
	for _, r := range releases {
		r()
	}
	b.waitText(t, "#keyed-model-none", "No model has calls in flight.", true)
	b.waitHidden(t, "#keyed-model-none", false)
	b.waitText(t, "#binding", "No lane is full: no call waits.", true)

	// A limit of the policy's changed through the form.
	b.do(t, "change a limit", clearField("f-lanes-user-free"),
		chromedp.SendKeys(chromedp.CSS("#f-lanes-user-free"), "2"),
		chromedp.SendKeys(chromedp.CSS("#f-note"), "free users may run two"),
		chromedp.Click(chromedp.CSS("#save")))
	b.waitText(t, "#change-result", "Saved version 1: lanes.user.free 1 → 2.", true)
	b.waitText(t, `[id="config-lanes.user.free"] td`, "2", true)

	// A lane keyed by model paused (limit 0): named as paused, with whose
	// calls it refuses; in shadow, what enforce would do.
	b.do(t, "pause the model lane", clearField("f-lanes-model"),
		chromedp.SendKeys(chromedp.CSS("#f-lanes-model"), "0"),
		chromedp.SendKeys(chromedp.CSS("#f-note"), "models paused"),
		chromedp.Click(chromedp.CSS("#save")))
	b.waitText(t, "#paused li", "Paused: model refuses ", false)
	b.waitText(t, "#paused li", " calls of every caller — in shadow they go ahead (shadow-refused); enforce would refuse them.", false)

	if p := b.Problems(); len(p) > 0 {
		t.Errorf("the page had errors:\n%s", strings.Join(p, "\n"))
	}
}
