package answer

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/header"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
)

func TestRefusal(t *testing.T) {
	got := string(refusal(formatOf(policy.OCL()), capgate.LaneName("user"), false, 5))
	want := `{"detail":"Matching is busy. Please retry in 5 seconds.","error_code":"capacity_exceeded","scope":"user","paused":false,"retry_after":5}`
	if got != want {
		t.Fatalf("body = %s\nwant   %s", got, want)
	}
}

// testAdmissions returns a user's admitted, shadow-refused and refused
// calls (five lanes each, the per-user limit 3) and their releases.
func testAdmissions(t testing.TB) []*capgate.Admission {
	t.Helper()
	ctx := context.Background()
	call := testCall("match", 25, true, false)
	call.UserID, call.Tier, call.CID = "alice", "core", "c"
	var out []*capgate.Admission
	for _, mode := range []settings.Mode{settings.ModeShadow, settings.ModeEnforce} {
		cfg := settings.Default(nil, mode)
		cfg.EnforceFor = settings.EnforceAll
		cfg.Wait.MaxSeconds = 0
		g, err := capgate.NewGate(memory.New(nil), settings.NewFixed(cfg), nil, "task-a")
		if err != nil {
			t.Fatal(err)
		}
		g.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		for range 4 {
			a := g.Admit(ctx, call)
			t.Cleanup(func() { a.Release(ctx) })
			out = append(out, a)
		}
	}
	want := []capgate.Decision{capgate.DecisionAdmitted, capgate.DecisionShadowRefused, capgate.DecisionRefused}
	for _, d := range want {
		if !slices.ContainsFunc(out, func(a *capgate.Admission) bool { return a.Outcome().Decision == d }) {
			t.Fatalf("no %s admission", d)
		}
	}
	return out
}

// ocl is the OCL policy's names as a client reads them.
var ocl = policy.OCL().Names.Header()

// setGatedHeadersStepwise is SetGated as separate h.Set steps,
// the form the one-pass writer must match, for a call of the OCL policy.
func setGatedHeadersStepwise(h http.Header, adm *capgate.Admission, rid string) {
	d := adm.Outcome().Decision
	h.Set(ocl.Decision, string(d))
	lanes, counts := adm.Outcome().Lanes, adm.Outcome().Counts
	for i, l := range lanes {
		switch l.Name {
		case capgate.LaneName("api_heavy"):
			h.Set(ocl.Lane("Limit"), strconv.Itoa(l.Limit))
			h.Set(ocl.Lane("In-Flight"), strconv.Itoa(counts[i]))
		case capgate.LaneName("tier"):
			h.Set(ocl.Lane("Tier-Limit"), strconv.Itoa(l.Limit))
			h.Set(ocl.Lane("Tier-In-Flight"), strconv.Itoa(counts[i]))
		}
	}
	h.Set(ocl.Tier, string(adm.Outcome().Call.Tier))
	if n, ok := adm.Outcome().Suggested, len(adm.Outcome().Lanes) > 0; ok {
		h.Set(ocl.SuggestedConcurrency, strconv.Itoa(n))
	}
	if sp := adm.Outcome().Spacing; sp > 0 {
		h.Set(ocl.SuggestedSpacing, strconv.FormatInt(int64((sp+time.Millisecond-1)/time.Millisecond), 10))
	}
	if s, ok := adm.Outcome().RetryAfter, adm.Outcome().RetryAfter > 0; ok && d == capgate.DecisionRefused {
		h.Set(header.RetryAfter, strconv.Itoa(s))
	}
	i := laneInScope(adm.Outcome().Scope, lanes, counts)
	name := strconv.Quote(string(lanes[i].Name))
	h.Set(header.RateLimitPolicy, name+";q="+strconv.Itoa(lanes[i].Limit)+`;qu="concurrent-requests"`)
	v := name + ";r=" + strconv.Itoa(max(lanes[i].Limit-counts[i], 0))
	if s, ok := adm.Outcome().RetryAfter, adm.Outcome().RetryAfter > 0; ok && adm.Outcome().Decision == capgate.DecisionRefused {
		v += ";t=" + strconv.Itoa(s)
	}
	h.Set(header.RateLimit, v)
	h.Set("Access-Control-Expose-Headers", strings.Join(append(ExposedHeaders(policy.OCL()), rateLimitFields...), ", "))
	h.Set(header.RequestID, rid)
}

// TestOCLNames pins the OCL policy's names on the wire to the ones capgate
// sent before the policy: the headers, the expose list and the 429 body.
func TestOCLNames(t *testing.T) {
	n := formatOf(policy.OCL())
	got := []string{n.Decision, n.Tier, n.SuggestedConcurrency, n.SuggestedSpacing, n.Waited,
		n.Metadata, n.AwareField, n.RequestSource, n.exposeAll}
	want := []string{"X-Ocl-Capacity-Decision", "X-Ocl-Capacity-Tier", "X-Ocl-Capacity-Suggested-Concurrency",
		"X-Ocl-Capacity-Suggested-Spacing-Ms", "X-Ocl-Capacity-Waited-Ms",
		"X-Ocl-Event-Metadata", "capacity_aware", "X-Ocl-Request-Source",
		"X-Ocl-Capacity-Decision, X-Ocl-Capacity-Limit, X-Ocl-Capacity-In-Flight, X-Ocl-Capacity-Tier, " +
			"X-Ocl-Capacity-Tier-Limit, X-Ocl-Capacity-Tier-In-Flight, X-Ocl-Capacity-Suggested-Concurrency, " +
			"X-Ocl-Capacity-Suggested-Spacing-Ms, X-Ocl-Capacity-Waited-Ms, Retry-After, RateLimit-Policy, RateLimit"}
	if !slices.Equal(got, want) {
		t.Errorf("names\n got %q\nwant %q", got, want)
	}
	lanes := map[string]laneHeaders{}
	for i, l := range policy.OCL().Lanes {
		lanes[l.Name] = n.lanes[i]
	}
	wantLanes := map[string]laneHeaders{
		"api_heavy":      {"X-Ocl-Capacity-Limit", "X-Ocl-Capacity-In-Flight"},
		"tier":           {"X-Ocl-Capacity-Tier-Limit", "X-Ocl-Capacity-Tier-In-Flight"},
		"api_heavy_task": {}, "es2_knn": {}, "user": {},
	}
	if !reflect.DeepEqual(lanes, wantLanes) {
		t.Errorf("lane headers\n got %v\nwant %v", lanes, wantLanes)
	}
	if !n.rateLimit {
		t.Error("the OCL policy sends no RateLimit fields")
	}
	if got, want := string(refusal(n, capgate.LaneName("api_heavy"), true, 30)),
		`{"detail":"Matching is busy. Please retry in 30 seconds.","error_code":"capacity_exceeded","scope":"api_heavy","paused":true,"retry_after":30}`; got != want {
		t.Errorf("body = %s\nwant   %s", got, want)
	}
}

func TestSetGatedMatchesStepwise(t *testing.T) {
	for i, adm := range testAdmissions(t) {
		got := http.Header{"Content-Type": {"application/json"}}
		want := got.Clone()
		SetGated(got, adm.Outcome(), "rid-1")
		setGatedHeadersStepwise(want, adm, "rid-1")
		if !reflect.DeepEqual(got, want) {
			t.Errorf("call %d (%s):\n got %v\nwant %v", i, adm.Outcome().Decision, got, want)
		}
		// Each value is a slice of its own: appending to one leaves the
		// others as they were.
		got.Add(ocl.Decision, "x")
		got.Add(ocl.Lane("Limit"), "y")
		if got.Get(ocl.Lane("Limit")) != want.Get(ocl.Lane("Limit")) || len(got[ocl.Lane("In-Flight")]) != 1 {
			t.Errorf("call %d: appending to one value changed another: %v", i, got)
		}
	}
}

func TestSetGatedKeepsTheAPIsExposeList(t *testing.T) {
	adm := testAdmissions(t)[0]
	h := http.Header{}
	h.Add("Access-Control-Expose-Headers", "X-Total-Count, x-ocl-capacity-decision")
	SetGated(h, adm.Outcome(), "r")
	want := "X-Total-Count, x-ocl-capacity-decision, " + strings.Join(slices.Concat(ExposedHeaders(policy.OCL())[1:], rateLimitFields), ", ")
	if got := h.Values("Access-Control-Expose-Headers"); len(got) != 1 || got[0] != want {
		t.Errorf("expose list %q\nwant %q", got, want)
	}
}

func TestSetGatedAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	adm := testAdmissions(t)[1]
	h := http.Header{}
	SetGated(h, adm.Outcome(), "r") // the keys are in the map from here on
	// The text of the values and their slices: two, however many values.
	if n := testing.AllocsPerRun(100, func() {
		delete(h, ExposeHeadersKey) // else it is the API's list, to be merged
		SetGated(h, adm.Outcome(), "r")
	}); n > 2 {
		t.Errorf("SetGated allocates %v times; want at most 2", n)
	}
	if n := testing.AllocsPerRun(100, func() { SetHeaders(h, adm.Outcome()) }); n > 2 {
		t.Errorf("SetHeaders allocates %v times; want at most 2", n)
	}
}

// A policy's refusal detail has its {retry_after} replaced by the seconds
// wherever it stands, and is JSON-quoted; the error code too.
func TestRefusalOfAPolicy(t *testing.T) {
	p, err := policy.Parse("busy.yaml", []byte(`version: 1
name: busy
routes:
  - {name: run, method: POST, path: {exact: /run}}
identity: {resolver: tokens, scheme: Bearer, default_tier: free}
lanes:
  - {name: cluster, scope: cluster, routes: [run], limit: 2}
names:
  header_prefix: Capgate-
  refusal:
    detail: "{retry_after} s: \"busy\" <now>; retry in {retry_after} seconds"
    error_code: "too \"busy\""
  log_event: capgate_call
`))
	if err != nil {
		t.Fatal(err)
	}
	got := string(refusal(formatOf(p), capgate.LaneName("cluster"), false, 7))
	want := `{"detail":"7 s: \"busy\" <now>; retry in 7 seconds","error_code":"too \"busy\"","scope":"cluster","paused":false,"retry_after":7}`
	if got != want {
		t.Fatalf("body = %s\nwant   %s", got, want)
	}
	if !json.Valid([]byte(got)) {
		t.Errorf("not JSON: %s", got)
	}
}

// testCall returns a call of the OCL policy's route ("match" or "rerank")
// of rows rows, with the $match flags semantic and reranker.
func testCall(route string, rows int, semantic, reranker bool) capgate.Call {
	r := policy.OCL().Route(route)
	f := policy.NewFields(r)
	for name, b := range map[string]bool{"semantic": semantic, "reranker": reranker} {
		if i := r.Field(name); i >= 0 {
			f.SetBool(i, b)
		}
	}
	f.SetInt(r.Field("rows"), rows)
	return capgate.Call{Route: r, Fields: f}
}
