package lanetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/answer"
	"github.com/capgate/capgate/configtest"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
	"github.com/capgate/capgate/status"
)

// RunGate runs the gate's scenarios (the original
// implementation's gate tests) on top of the stores open makes.
func RunGate(t *testing.T, open Factory) { runGate(t, open, nil) }

// RunGateWithLocalLanes runs RunGate's scenarios with local lanes on the
// gate (Gate.Local, a fresh store of local's for each: an in-process
// memory.Store): while the store works they must not change a single
// decision, count or header.
func RunGateWithLocalLanes(t *testing.T, open Factory, local func() capgate.LaneStore) {
	runGate(t, open, local)
}

func runGate(t *testing.T, open Factory, local func() capgate.LaneStore) {
	cases := []struct {
		name string
		fn   func(t *testing.T, e *Env)
	}{
		{"AdmitsAndCountsInEveryLane", testAdmitsAndCounts},
		{"SingleRowReserve", testSingleRowReserve},
		{"PerTaskLanes", testPerTaskLanes},
		{"TierCeilings", testTierCeilings},
		{"ES2KNNOnlyForSemantic", testES2KNNOnlySemantic},
		{"ShadowNeverRefuses", testShadowNeverRefuses},
		{"EnforceRefusesWithoutLease", testEnforceRefuses},
		{"EnforceForAware", testEnforceForAware},
		{"OffModeDoesNothing", testOffMode},
		{"PausedTier", testPausedTier},
		{"PausedLaneIsTheScope", testPausedScope},
		{"RetryAfterGrowsAndCaps", testRetryAfterGrowth},
		{"SuggestedConcurrency", testSuggested},
		{"StaleLeaseExpires", testStaleLease},
		{"ShortLeaseNeverShortensTTL", testTTLNeverShortened},
		{"LateAcquireTakesNoLease", testGateLateAcquire},
		{"Headers", testHeaders},
		{"LogLine", testLogLine},
		{"Status", testStatus},
		{"ConcurrentEnforceNeverExceedsLimit", testConcurrentLimit},
		{"WaitGoesAheadWhenNoLongerEnforced", testWaitNoLongerEnforced},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := NewEnv(t, open)
			if local != nil {
				e.Gate.Local = local()
			}
			c.fn(t, e)
		})
	}
}

func wantDecision(t *testing.T, a *capgate.Admission, want capgate.Decision) {
	t.Helper()
	if a == nil {
		t.Fatalf("admission is nil, want decision %q", want)
	}
	if got := a.Outcome().Decision; got != want {
		t.Fatalf("decision = %q, want %q (error %q)", got, want, a.Err())
	}
}

// wantFull releases a (a refused call: its lanes hold nothing) and checks
// the full lanes its log line names.
func wantFull(t *testing.T, e *Env, a *capgate.Admission, want ...string) {
	t.Helper()
	a.Release(context.Background())
	lines := e.Sink.All(t)
	if len(lines) == 0 {
		t.Fatal("no log line")
	}
	var got []string
	if full, ok := lines[len(lines)-1]["full"].([]any); ok {
		for _, f := range full {
			got = append(got, fmt.Sprint(f))
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("full = %v, want %v", got, want)
	}
}

func testAdmitsAndCounts(t *testing.T, e *Env) {
	a := e.Admit(Match("ea", "early_access"))
	wantDecision(t, a, capgate.DecisionAdmitted)
	if !a.Outcome().Holding {
		t.Fatal("admitted call holds no lease")
	}
	wantLimits := map[capgate.LaneName]int{"api_heavy": 3, "api_heavy_task": 2, "es2_knn": 3, "tier": 3, "user": 2}
	if got := LaneLimits(a); !reflect.DeepEqual(got, wantLimits) {
		t.Fatalf("limits = %v, want %v", got, wantLimits)
	}
	for _, l := range a.Outcome().Lanes {
		if got := LaneCounts(a)[l.Name]; got != 1 {
			t.Errorf("count[%s] = %d, want 1", l.Name, got)
		}
		if m := e.Store.Members(t, l.Key); len(m) != 1 {
			t.Errorf("%s holds %v, want one member", l.Key, m)
		}
		if ttl := e.Store.TTL(t, l.Key); ttl <= 0 {
			t.Errorf("%s TTL = %v, want > 0", l.Key, ttl)
		}
	}
	a.Release(context.Background())
	a.Release(context.Background()) // harmless
	for _, l := range a.Outcome().Lanes {
		if m := e.Store.Members(t, l.Key); len(m) != 0 {
			t.Errorf("after release %s holds %v", l.Key, m)
		}
	}
	if n := len(e.Sink.Raw()); n != 1 {
		t.Fatalf("log lines = %d, want 1", n)
	}
}

func testSingleRowReserve(t *testing.T, e *Env) {
	e.Enforce(func(c *settings.Config) {
		configtest.SetNumbers(t, c, "api_heavy.cluster", 2, "api_heavy.per_task", 5, "reserve_single_row", 1)
	})
	bulk1 := e.Admit(Match("c1", "core"))
	wantDecision(t, bulk1, capgate.DecisionAdmitted)
	if got := LaneLimits(bulk1)["api_heavy"]; got != 1 {
		t.Fatalf("bulk api_heavy limit = %d, want 1", got)
	}
	bulk2 := e.Admit(Match("c2", "core"))
	wantDecision(t, bulk2, capgate.DecisionRefused)
	wantFull(t, e, bulk2, "api_heavy")

	single := Match("c3", "core")
	SetRows(&single, 1)
	one := e.Admit(single)
	wantDecision(t, one, capgate.DecisionAdmitted)
	if got := LaneLimits(one)["api_heavy"]; got != 2 {
		t.Fatalf("single-row api_heavy limit = %d, want 2", got)
	}
	rerank := OCLCall("rerank", 1, false, false, "c4", "core")
	wantDecision(t, e.Admit(rerank), capgate.DecisionRefused)
}

func testPerTaskLanes(t *testing.T, e *Env) {
	e.Enforce(func(c *settings.Config) {
		configtest.SetNumbers(t, c, "api_heavy.cluster", 4, "api_heavy.per_task", 1, "reserve_single_row", 0)
	})
	wantDecision(t, e.Admit(Match("c1", "core")), capgate.DecisionAdmitted)
	second := e.Admit(Match("c2", "core"))
	wantDecision(t, second, capgate.DecisionRefused)
	wantFull(t, e, second, "api_heavy_task")
	onB := e.AdmitOn(e.TaskGate("task-b"), Match("c3", "core"))
	wantDecision(t, onB, capgate.DecisionAdmitted)
	if got := LaneCounts(onB)["api_heavy"]; got != 2 {
		t.Fatalf("api_heavy count on task-b = %d, want 2", got)
	}
}

func bigLimits(t *testing.T) func(c *settings.Config) {
	return func(c *settings.Config) {
		configtest.SetNumbers(t, c, "api_heavy.cluster", 10, "api_heavy.per_task", 10, "es2_knn", 10)
	}
}

func testTierCeilings(t *testing.T, e *Env) {
	e.Enforce(bigLimits(t))
	wantDecision(t, e.Admit(Match("p1", "preview")), capgate.DecisionAdmitted)
	wantDecision(t, e.Admit(Match("p2", "preview")), capgate.DecisionAdmitted)
	third := e.Admit(Match("p3", "preview"))
	wantDecision(t, third, capgate.DecisionRefused)
	wantFull(t, e, third, "tier")
	if got := LaneCounts(third)["tier"]; got != 2 {
		t.Fatalf("refused call's tier count = %d, want 2 (it doesn't count itself)", got)
	}
	ea := e.Admit(Match("ea", "early_access"))
	wantDecision(t, ea, capgate.DecisionAdmitted)
	if got := LaneCounts(ea)["tier"]; got != 1 {
		t.Fatalf("early_access tier count = %d, want 1", got)
	}
}

func testES2KNNOnlySemantic(t *testing.T, e *Env) {
	e.Enforce(func(c *settings.Config) { bigLimits(t)(c); configtest.SetNumbers(t, c, "es2_knn", 1) })
	first := e.Admit(Match("c1", "core"))
	wantDecision(t, first, capgate.DecisionAdmitted)
	if _, ok := LaneLimits(first)["es2_knn"]; !ok {
		t.Fatal("semantic call has no es2_knn lane")
	}
	second := e.Admit(Match("c2", "core"))
	wantDecision(t, second, capgate.DecisionRefused)
	wantFull(t, e, second, "es2_knn")
	lex := e.Admit(Lexical("c3", "core"))
	wantDecision(t, lex, capgate.DecisionAdmitted)
	if _, ok := LaneLimits(lex)["es2_knn"]; ok {
		t.Fatal("lexical call has an es2_knn lane")
	}
}

func testShadowNeverRefuses(t *testing.T, e *Env) {
	e.Admit(Match("p", "preview"))
	a := e.Admit(Match("p", "preview"))
	wantDecision(t, a, capgate.DecisionShadowRefused)
	if !a.Outcome().Holding || a.Outcome().Decision == capgate.DecisionRefused {
		t.Fatalf("shadow-refused call: holding %v refused %v, want true false", a.Outcome().Holding, a.Outcome().Decision == capgate.DecisionRefused)
	}
	wantFull(t, e, a, "user")
	if got := LaneCounts(a)["user"]; got != 2 {
		t.Fatalf("user count = %d, want 2", got)
	}
	if s, ok := a.Outcome().RetryAfter, a.Outcome().RetryAfter > 0; !ok || s != 5 {
		t.Fatalf("retry after = %d %v, want 5", s, ok)
	}
	h := http.Header{}
	answer.SetHeaders(h, a.Outcome())
	if v := h.Get("Retry-After"); v != "" {
		t.Fatalf("shadow-refused call sends Retry-After %q", v)
	}
}

func testEnforceRefuses(t *testing.T, e *Env) {
	e.Enforce(nil)
	first := e.Admit(Match("p", "preview"))
	a := e.Admit(Match("p", "preview"))
	wantDecision(t, a, capgate.DecisionRefused)
	if a.Outcome().Holding {
		t.Fatal("refused call holds a lease")
	}
	if got := LaneCounts(a)["user"]; got != 1 {
		t.Fatalf("user count = %d, want 1", got)
	}
	if m := e.Store.Members(t, e.Key(capgate.LaneName("user"), "p")); len(m) != 1 {
		t.Fatalf("user lane holds %v, want the first call only", m)
	}
	want := `{"detail":"Matching is busy. Please retry in 5 seconds.","error_code":"capacity_exceeded","scope":"user","paused":false,"retry_after":5}`
	if got := string(answer.Refusal(a.Outcome())); got != want {
		t.Fatalf("body = %s\nwant   %s", got, want)
	}
	first.Release(context.Background())
	wantDecision(t, e.Admit(Match("p", "preview")), capgate.DecisionAdmitted)
}

func testEnforceForAware(t *testing.T, e *Env) {
	e.Cfg.Edit(func(c *settings.Config) { c.Mode = settings.ModeEnforce })
	e.Admit(Match("p", "preview"))
	unaware := e.Admit(Match("p", "preview"))
	wantDecision(t, unaware, capgate.DecisionShadowRefused)
	if unaware.Outcome().Enforced {
		t.Fatal("unaware call is enforced")
	}
	call := Match("p", "preview")
	call.Aware = true
	aware := e.Admit(call)
	wantDecision(t, aware, capgate.DecisionRefused)
	if !aware.Outcome().Enforced {
		t.Fatal("aware call is not enforced")
	}
}

func testOffMode(t *testing.T, e *Env) {
	e.Cfg.Edit(func(c *settings.Config) { c.Mode = settings.ModeOff })
	a := e.Gate.Admit(context.Background(), Match("p", "preview"))
	if a == nil || a.Outcome().Decision != capgate.DecisionNone {
		t.Fatalf("off mode admission = %v, want one with no decision", a)
	}
	h := http.Header{}
	answer.SetHeaders(h, a.Outcome())
	a.Release(context.Background())
	if len(h) != 0 {
		t.Fatalf("off mode set headers %v", h)
	}
	keys, err := e.Store.Keys(context.Background(), e.Gate.KeyPrefix)
	if err != nil || len(keys) != 0 {
		t.Fatalf("off mode touched the store: keys %v, err %v", keys, err)
	}
	if n := len(e.Sink.Raw()); n != 0 {
		t.Fatalf("off mode wrote %d log lines", n)
	}
}

func testPausedTier(t *testing.T, e *Env) {
	e.Enforce(func(c *settings.Config) { configtest.SetNumbers(t, c, "tiers.preview", 0) })
	a := e.Admit(Match("p", "preview"))
	wantDecision(t, a, capgate.DecisionRefused)
	wantFull(t, e, a, "tier")
	if s := a.Outcome().RetryAfter; s != 120 {
		t.Fatalf("retry after = %d, want 120", s)
	}
	if n, ok := a.Outcome().Suggested, len(a.Outcome().Lanes) > 0; !ok || n != 0 {
		t.Fatalf("suggested = %d %v, want 0", n, ok)
	}
	want := `{"detail":"Matching is busy. Please retry in 120 seconds.","error_code":"capacity_exceeded","scope":"tier","paused":true,"retry_after":120}`
	if got := string(answer.Refusal(a.Outcome())); got != want {
		t.Fatalf("body = %s\nwant   %s", got, want)
	}
}

func testPausedScope(t *testing.T, e *Env) {
	e.Enforce(func(c *settings.Config) {
		configtest.SetNumbers(t, c, "reserve_single_row", 0, "api_heavy.cluster", 1, "api_heavy.per_task", 5, "tiers.preview", 0)
	})
	wantDecision(t, e.Admit(Match("c", "core")), capgate.DecisionAdmitted)
	a := e.Admit(Match("p", "preview"))
	wantDecision(t, a, capgate.DecisionRefused)
	wantFull(t, e, a, "api_heavy", "tier")
	if got := a.Outcome().Scope; got != capgate.LaneName("tier") {
		t.Fatalf("scope = %q, want tier (a paused lane wins)", got)
	}
	want := `{"detail":"Matching is busy. Please retry in 120 seconds.","error_code":"capacity_exceeded","scope":"tier","paused":true,"retry_after":120}`
	if got := string(answer.Refusal(a.Outcome())); got != want {
		t.Fatalf("body = %s\nwant   %s", got, want)
	}
}

func testRetryAfterGrowth(t *testing.T, e *Env) {
	e.Cfg.Edit(func(c *settings.Config) {
		configtest.SetNumbers(t, c, "tiers.core", 10, "per_user.core", 10, "api_heavy.cluster", 10, "api_heavy.per_task", 10)
	})
	var got []int
	for i := 1; i <= 12; i++ {
		a := e.Admit(Lexical("c", "core"))
		if i >= 9 {
			s := a.Outcome().RetryAfter
			got = append(got, s)
		}
	}
	if want := []int{0, 5, 10, 15}; !slices.Equal(got, want) {
		t.Fatalf("retry after of calls 9..12 = %v, want %v (0 = none)", got, want)
	}
	e.Cfg.Edit(func(c *settings.Config) { c.RetryAfter = settings.RetryAfter{Base: 5, Max: 12, Paused: 120} })
	if s := e.Admit(Lexical("c", "core")).Outcome().RetryAfter; s != 12 {
		t.Fatalf("capped retry after = %d, want 12", s)
	}
}

func testSuggested(t *testing.T, e *Env) {
	suggested := func(a *capgate.Admission) int {
		t.Helper()
		n, ok := a.Outcome().Suggested, len(a.Outcome().Lanes) > 0
		if !ok {
			t.Fatal("no suggested concurrency")
		}
		return n
	}
	if got := suggested(e.Admit(Match("c1", "core"))); got != 3 {
		t.Fatalf("core alone: suggested %d, want 3", got)
	}
	if got := suggested(e.Admit(Match("c2", "core"))); got != 2 {
		t.Fatalf("second core user: suggested %d, want 2", got)
	}
	e.Admit(Match("c3", "core")) // the cluster's bulk limit (3) is now full
	if got := suggested(e.Admit(Match("p", "preview"))); got != 1 {
		t.Fatalf("preview with the cluster full: suggested %d, want 1", got)
	}
}

func testStaleLease(t *testing.T, e *Env) {
	key := e.Key(capgate.LaneName("user"), "p")
	e.Store.SetLease(t, key, "deadworker00000000000000000000000", -time.Hour)
	a := e.Admit(Match("p", "preview"))
	wantDecision(t, a, capgate.DecisionAdmitted)
	if m := e.Store.Members(t, key); len(m) != 1 || m[0] == "deadworker00000000000000000000000" {
		t.Fatalf("user lane = %v, want only the new call's token", m)
	}
}

func testTTLNeverShortened(t *testing.T, e *Env) {
	api := e.Key(capgate.LaneName("api_heavy"), "")
	e.Store.SetLease(t, api, "longcall000000000000000000000000", 600*time.Second)
	e.Store.SetTTL(t, api, 1200*time.Second)
	a := e.Admit(Match("p", "preview"))
	wantDecision(t, a, capgate.DecisionAdmitted)
	if ttl := e.Store.TTL(t, api); ttl <= 600*time.Second {
		t.Fatalf("api_heavy TTL = %v, want > 600s (never shortened)", ttl)
	}
	if ttl := e.Store.TTL(t, e.Key(capgate.LaneName("user"), "p")); ttl <= 60*time.Second {
		t.Fatalf("user TTL = %v, want > 60s (2 × lease)", ttl)
	}
}

func testGateLateAcquire(t *testing.T, e *Env) {
	// Late by far more than any store deadline plus the 2 s of slack.
	e.Gate.Now = func() time.Time { return time.Now().Add(-time.Hour) }
	a := e.Admit(Match("p", "preview"))
	wantDecision(t, a, capgate.DecisionUnavailable)
	if a.Outcome().Holding {
		t.Fatal("late acquire holds a lease")
	}
	if err := a.Err(); err == nil || !strings.Contains(err.Error(), "no lease was taken") {
		t.Fatalf("error = %q, want it to say no lease was taken", err)
	}
	if m := e.Store.Members(t, e.Key(capgate.LaneName("api_heavy"), "")); len(m) != 0 {
		t.Fatalf("api_heavy holds %v after a late acquire", m)
	}
	// The skip window is open (by the gate's clock): the next call does
	// not ask the store.
	if b := e.Admit(Match("p", "preview")); !errors.Is(b.Err(), capgate.ErrSkipped) {
		t.Fatalf("after a late acquire: next call's error %q, want %q (the skip window open)", b.Err(), capgate.ErrSkipped)
	}
}

func testHeaders(t *testing.T, e *Env) {
	e.Enforce(nil)
	ok := e.Admit(Match("p", "preview"))
	h := http.Header{}
	answer.SetHeaders(h, ok.Outcome())
	want := http.Header{
		"X-Ocl-Capacity-Decision":              {"admitted"},
		"X-Ocl-Capacity-Limit":                 {"3"},
		"X-Ocl-Capacity-In-Flight":             {"1"},
		"X-Ocl-Capacity-Tier":                  {"preview"},
		"X-Ocl-Capacity-Tier-Limit":            {"2"},
		"X-Ocl-Capacity-Tier-In-Flight":        {"1"},
		"X-Ocl-Capacity-Suggested-Concurrency": {"1"},
	}
	if !reflect.DeepEqual(h, want) {
		t.Fatalf("admitted headers = %v\nwant %v", h, want)
	}
	refused := e.Admit(Match("p", "preview"))
	h = http.Header{}
	answer.SetHeaders(h, refused.Outcome())
	if h.Get("X-OCL-Capacity-Decision") != "refused" || h.Get("Retry-After") != "5" {
		t.Fatalf("refused headers = %v, want decision refused and Retry-After 5", h)
	}
}

func testLogLine(t *testing.T, e *Env) {
	e.Admit(Match("p", "preview"))
	call := OCLCall("match", 25, true, true, "p", "preview")
	call.Metadata[0], call.Metadata[1], call.RequestSource = "ocl-semantic", "77", "automatch" // algorithm_id, automatch_run_id
	call.QueueMS, call.HasQueueMS = 3000, true
	call.CID = "cid-1"
	a := e.Admit(call)
	a.Release(context.Background())
	lines := e.Sink.All(t)
	if len(lines) != 1 {
		t.Fatalf("log lines = %d, want 1", len(lines))
	}
	got := lines[0]
	for _, k := range []string{"held_ms", "ts"} {
		if _, ok := got[k]; !ok {
			t.Fatalf("log line lacks %s: %v", k, got)
		}
		delete(got, k)
	}
	want := map[string]any{
		"event": "ocl_capacity", "decision": "shadow-refused", "mode": "shadow", "enforced": false,
		"endpoint": "$match", "semantic": true, "reranker": true, "rows": n(25), "single_row": false,
		"tier": "preview", "user_id": "p", "scope": "user", "full": []any{"user"},
		"in_flight": n(2), "limit": n(3), "task_in_flight": n(2), "task_limit": n(2),
		"es2_knn_in_flight": n(2), "es2_knn_limit": n(3), "tier_in_flight": n(2), "tier_limit": n(2),
		"user_in_flight": n(2), "user_limit": n(1), "suggested": n(1), "retry_after": n(5),
		"queue_ms": n(3000), "task": "task-a", "request_source": "automatch",
		"algorithm_id": "ocl-semantic", "automatch_run_id": "77", "cid": "cid-1",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("log line = %v\nwant       %v", got, want)
	}
	raw := e.Sink.Raw()[0]
	order := []string{`"event"`, `"decision"`, `"mode"`, `"enforced"`, `"endpoint"`, `"semantic"`, `"reranker"`,
		`"rows"`, `"single_row"`, `"tier"`, `"user_id"`, `"scope"`, `"full"`, `"in_flight"`, `"limit"`,
		`"task_in_flight"`, `"task_limit"`, `"es2_knn_in_flight"`, `"es2_knn_limit"`, `"tier_in_flight"`,
		`"tier_limit"`, `"user_in_flight"`, `"user_limit"`, `"suggested"`, `"retry_after"`, `"held_ms"`,
		`"queue_ms"`, `"task"`, `"request_source"`, `"algorithm_id"`, `"automatch_run_id"`, `"cid"`, `"ts"`}
	last := -1
	for _, k := range order {
		i := strings.Index(raw, k+":")
		if i <= last {
			t.Fatalf("field %s out of order in %s", k, raw)
		}
		last = i
	}
}

func n(i int) any { return json.Number(fmt.Sprint(i)) }

func testStatus(t *testing.T, e *Env) {
	e.Admit(Match("p", "preview"))
	e.Admit(Lexical("c", "core"))
	st := e.Gate.Status(context.Background(), e.Cfg.Config(context.Background()))
	if st.Store != status.OK {
		t.Fatalf("status store = %q", st.Store)
	}
	if got := SharedLane(t, st, "api_heavy"); !reflect.DeepEqual(got, status.Lane{InFlight: 2, Limit: 4, BulkLimit: Int(3)}) {
		t.Fatalf("api_heavy = %+v", got)
	}
	if got := SharedLane(t, st, "es2_knn"); !reflect.DeepEqual(got, status.Lane{InFlight: 1, Limit: 3}) {
		t.Fatalf("es2_knn = %+v", got)
	}
	tasks, tiers, users := Entries(t, st, "api_heavy_task"), Entries(t, st, "tier"), Entries(t, st, "user")
	if want := map[string]status.Lane{"task-a": {InFlight: 2, Limit: 2}}; !reflect.DeepEqual(tasks, want) {
		t.Fatalf("tasks = %v, want %v", tasks, want)
	}
	if tiers["preview"] != (status.Lane{InFlight: 1, Limit: 2}) ||
		tiers["core"] != (status.Lane{InFlight: 1, Limit: 4}) ||
		len(tiers) != 4 {
		t.Fatalf("tiers = %v", tiers)
	}
	// A user's lane has no limit of its own in the status (the user's tier
	// is not read): in flight and waiting only.
	if want := map[string]status.Lane{"p": {InFlight: 1}, "c": {InFlight: 1}}; !reflect.DeepEqual(users, want) {
		t.Fatalf("users = %v, want %v", users, want)
	}
	// A gate built by hand over the same store and keys reads the same
	// (the CLI's capacity status does that).
	bare := &capgate.Gate{Store: e.Gate.Store, KeyPrefix: e.Gate.KeyPrefix, TaskID: "other"}
	if got := bare.Status(context.Background(), e.Cfg.Config(context.Background())); !reflect.DeepEqual(got, st) {
		t.Fatalf("a bare gate's Status = %+v, want the gate's %+v", got, st)
	}
}

// testConcurrentLimit hammers one lane with limit 3 from 64 goroutines in
// enforce mode and checks, by its own count, that no more than 3 calls ever
// hold it at once.
func testConcurrentLimit(t *testing.T, e *Env) {
	const limit, workers, rounds = 3, 64, 30
	e.Enforce(func(c *settings.Config) {
		configtest.SetNumbers(t, c, "api_heavy.cluster", limit, "api_heavy.per_task", 1000, "reserve_single_row", 0, "es2_knn", 1000)
		for _, tier := range policy.OCL().Tiers() {
			configtest.SetNumbers(t, c, "tiers."+tier, 1000, "per_user."+tier, 1000)
		}
	})
	// A store may shed load under 64 callers (the Redis store's bounded
	// queue fails at once when full): such calls are unavailable, which is
	// fine here, and must not close the gate to the rest for 15 s.
	e.Gate.SkipFor = 0
	var holders, peak, admitted, unavailable atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for range rounds {
				a := e.Gate.Admit(context.Background(), Match(fmt.Sprint("u", w), "core"))
				if a.Outcome().Decision == capgate.DecisionAdmitted {
					h := holders.Add(1)
					for p := peak.Load(); h > p && !peak.CompareAndSwap(p, h); p = peak.Load() {
					}
					admitted.Add(1)
					holders.Add(-1)
				} else if a.Outcome().Decision == capgate.DecisionUnavailable {
					unavailable.Add(1)
				} else if a.Outcome().Decision != capgate.DecisionRefused {
					t.Errorf("decision %q (%s)", a.Outcome().Decision, a.Err())
				}
				a.Release(context.Background())
			}
		})
	}
	wg.Wait()
	if p := peak.Load(); p > limit {
		t.Fatalf("%d calls held the lane at once, limit %d", p, limit)
	}
	if admitted.Load() == 0 {
		t.Fatal("no call was admitted")
	}
	if n := unavailable.Load(); n > 0 {
		t.Logf("%d of %d calls unavailable (the store shed load)", n, workers*rounds)
	}
	if m := e.Store.Members(t, e.Key(capgate.LaneName("api_heavy"), "")); len(m) != 0 {
		t.Fatalf("lane not empty after the run: %v", m)
	}
}
