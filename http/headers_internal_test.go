package http

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/header"
	"github.com/capgate/capgate/memory"
)

func TestRefusalBody(t *testing.T) {
	got := string(refusalBody(capgate.LaneUser, false, 5))
	want := `{"detail":"Matching is busy. Please retry in 5 seconds.","error_code":"capacity_exceeded","scope":"user","paused":false,"retry_after":5}`
	if got != want {
		t.Fatalf("body = %s\nwant   %s", got, want)
	}
}

// testAdmissions returns a user's admitted, shadow-refused and refused
// calls (five lanes each, the per-user limit 3) and their releases.
func testAdmissions(t *testing.T) []*capgate.Admission {
	t.Helper()
	ctx := context.Background()
	call := capgate.Call{Endpoint: capgate.EndpointMatch, Rows: 25, Semantic: true, UserID: "alice",
		Tier: capgate.TierCore, CID: "c"}
	var out []*capgate.Admission
	for _, mode := range []capgate.Mode{capgate.ModeShadow, capgate.ModeEnforce} {
		cfg := capgate.DefaultConfig(mode)
		cfg.EnforceFor = capgate.EnforceAll
		cfg.Wait.MaxSeconds = 0
		g, err := capgate.NewGate(memory.New(nil), capgate.NewFixedConfig(cfg), nil, "task-a")
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
		if !slices.ContainsFunc(out, func(a *capgate.Admission) bool { return a.Decision() == d }) {
			t.Fatalf("no %s admission", d)
		}
	}
	return out
}

// setGatedHeadersStepwise is setGatedHeaders as separate h.Set steps,
// the form the one-pass writer must match.
func setGatedHeadersStepwise(h http.Header, adm *capgate.Admission, rid string) {
	d := adm.Decision()
	h.Set(header.Decision, string(d))
	lanes, counts := adm.Lanes(), adm.Counts()
	for i, l := range lanes {
		switch l.Name {
		case capgate.LaneAPIHeavy:
			h.Set(header.Limit, strconv.Itoa(l.Limit))
			h.Set(header.InFlight, strconv.Itoa(counts[i]))
		case capgate.LaneTier:
			h.Set(header.TierLimit, strconv.Itoa(l.Limit))
			h.Set(header.TierInFlight, strconv.Itoa(counts[i]))
		}
	}
	h.Set(header.Tier, string(adm.Call().Tier))
	if n, ok := adm.Suggested(); ok {
		h.Set(header.SuggestedConcurrency, strconv.Itoa(n))
	}
	if ms, ok := adm.SpacingMS(); ok {
		h.Set(header.SuggestedSpacing, strconv.FormatInt(ms, 10))
	}
	if s, ok := adm.RetryAfter(); ok && d == capgate.DecisionRefused {
		h.Set(header.RetryAfter, strconv.Itoa(s))
	}
	i := laneInScope(adm.Scope(), lanes, counts)
	name := strconv.Quote(string(lanes[i].Name))
	h.Set(header.RateLimitPolicy, name+";q="+strconv.Itoa(lanes[i].Limit)+`;qu="concurrent-requests"`)
	v := name + ";r=" + strconv.Itoa(max(lanes[i].Limit-counts[i], 0))
	if s, ok := adm.RetryAfter(); ok && adm.Refused() {
		v += ";t=" + strconv.Itoa(s)
	}
	h.Set(header.RateLimit, v)
	h.Set("Access-Control-Expose-Headers", strings.Join(append(ExposedHeaders(), rateLimitFields...), ", "))
	h.Set(header.RequestID, rid)
}

func TestSetGatedHeadersMatchesStepwise(t *testing.T) {
	for i, adm := range testAdmissions(t) {
		got := http.Header{"Content-Type": {"application/json"}}
		want := got.Clone()
		setGatedHeaders(got, adm, "rid-1")
		setGatedHeadersStepwise(want, adm, "rid-1")
		if !reflect.DeepEqual(got, want) {
			t.Errorf("call %d (%s):\n got %v\nwant %v", i, adm.Decision(), got, want)
		}
		// Each value is a slice of its own: appending to one leaves the
		// others as they were.
		got.Add(header.Decision, "x")
		got.Add(header.Limit, "y")
		if got.Get(header.Limit) != want.Get(header.Limit) || len(got[header.InFlight]) != 1 {
			t.Errorf("call %d: appending to one value changed another: %v", i, got)
		}
	}
}

func TestSetGatedHeadersKeepsTheAPIsExposeList(t *testing.T) {
	adm := testAdmissions(t)[0]
	h := http.Header{}
	h.Add("Access-Control-Expose-Headers", "X-Total-Count, x-ocl-capacity-decision")
	setGatedHeaders(h, adm, "r")
	want := "X-Total-Count, x-ocl-capacity-decision, " + strings.Join(slices.Concat(ExposedHeaders()[1:], rateLimitFields), ", ")
	if got := h.Values("Access-Control-Expose-Headers"); len(got) != 1 || got[0] != want {
		t.Errorf("expose list %q\nwant %q", got, want)
	}
}

func TestSetGatedHeadersAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	adm := testAdmissions(t)[1]
	h := http.Header{}
	setGatedHeaders(h, adm, "r") // the keys are in the map from here on
	// The text of the values and their slices: two, however many values.
	if n := testing.AllocsPerRun(100, func() {
		delete(h, exposeHeadersKey) // else it is the API's list, to be merged
		setGatedHeaders(h, adm, "r")
	}); n > 2 {
		t.Errorf("setGatedHeaders allocates %v times; want at most 2", n)
	}
	if n := testing.AllocsPerRun(100, func() { SetHeaders(h, adm) }); n > 2 {
		t.Errorf("SetHeaders allocates %v times; want at most 2", n)
	}
}

func TestCloneHeaderWith(t *testing.T) {
	h := http.Header{"A": {"1", "2"}, "B": nil, "X-Request-Id": {"old"}}
	got := cloneHeaderWith(h, header.RequestID, "new")
	want := http.Header{"A": {"1", "2"}, "B": nil, "X-Request-Id": {"new"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	got["A"][0] = "changed"
	got.Add("A", "3")
	if !reflect.DeepEqual(h, http.Header{"A": {"1", "2"}, "B": nil, "X-Request-Id": {"old"}}) {
		t.Errorf("the copy shares values with the original: %v", h)
	}
	if got.Get(header.RequestID) != "new" {
		t.Errorf("appending to A changed X-Request-Id: %v", got)
	}
}
