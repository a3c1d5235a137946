package http_test

import (
	"encoding/json"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/capgate/capgate/identity"
	"github.com/capgate/capgate/settings"
)

var hex32 = regexp.MustCompile(`^[0-9a-f]{32}$`)

func TestLexicalMatchIsNotGated(t *testing.T) {
	e := newEnv(t, nil, nil)
	r := e.do(t.Context(), "POST", "/concepts/$match/", twoRows, "Authorization", "Token t-pam")
	if r.StatusCode != 200 || string(r.Body) != `[{"row":0,"results":[]}]` {
		t.Fatalf("got %d %s", r.StatusCode, r.Body)
	}
	if h := capacityHeaders(r.Header); len(h) != 0 {
		t.Errorf("capacity headers on a lexical match: %v", h)
	}
	if id := r.Header.Get("X-Request-ID"); id != "" {
		t.Errorf("X-Request-ID %q added to an ungated call", id)
	}
	reqs := e.up.requests()
	if len(reqs) != 1 || reqs[0].Header.Get("X-Request-ID") != "" || string(reqs[0].Body) != twoRows {
		t.Errorf("upstream got %+v", reqs)
	}
	if l := e.sink.All(t); len(l) != 0 {
		t.Errorf("log lines for an ungated call: %v", l)
	}
}

func TestSemanticMatchIsAdmittedWithTheHeaders(t *testing.T) {
	e := newEnv(t, nil, nil)
	r := e.do(t.Context(), "POST", semanticMatch, twoRows,
		"Authorization", "Token t-pam",
		"X-OCL-Request-Source", strings.Repeat("m", 60),
		"X-OCL-Event-Metadata", `{"algorithm_id":"ocl-semantic","automatch_run_id":"run-1234567890123456789"}`,
		"X-Amzn-Trace-Id", "Self=1-"+hexEpoch(now.Unix()-3)+"-abc;Root=1-00000000-def")
	if r.StatusCode != 200 {
		t.Fatalf("status %d", r.StatusCode)
	}
	want := map[string]string{
		"X-Ocl-Capacity-Decision":              "admitted",
		"X-Ocl-Capacity-Limit":                 "3",
		"X-Ocl-Capacity-In-Flight":             "1",
		"X-Ocl-Capacity-Tier":                  "preview",
		"X-Ocl-Capacity-Tier-Limit":            "2",
		"X-Ocl-Capacity-Tier-In-Flight":        "1",
		"X-Ocl-Capacity-Suggested-Concurrency": "1",
	}
	if got := capacityHeaders(r.Header); !maps.Equal(got, want) {
		t.Errorf("headers\n got %v\nwant %v", got, want)
	}
	cid := r.Header.Get("X-Request-ID")
	if !hex32.MatchString(cid) {
		t.Errorf("X-Request-ID = %q, want 32 hex characters", cid)
	}
	reqs := e.up.requests()
	if len(reqs) != 1 || reqs[0].Header.Get("X-Request-ID") != cid {
		t.Errorf("upstream did not get X-Request-ID %s: %+v", cid, reqs)
	}
	lines := e.sink.Wait(t, 1, waitLimit) // written once the call is released
	if len(lines) != 1 {
		t.Fatalf("%d log lines, want 1", len(lines))
	}
	if m := e.inFlight(); len(m) != 0 {
		t.Errorf("leases left after the call: %v", m)
	}
	l := lines[0]
	for k, v := range map[string]string{
		"event":             "ocl_capacity",
		"decision":          "admitted",
		"mode":              "shadow",
		"enforced":          "false",
		"endpoint":          "$match",
		"semantic":          "true",
		"reranker":          "false",
		"rows":              "2",
		"single_row":        "false",
		"tier":              "preview",
		"user_id":           "pam",
		"in_flight":         "1",
		"limit":             "3",
		"es2_knn_in_flight": "1",
		"es2_knn_limit":     "3",
		"queue_ms":          "3000",
		"task":              "task-1",
		"request_source":    strings.Repeat("m", 50),
		"algorithm_id":      "ocl-semantic",
		"automatch_run_id":  "run-1234567890123456",
		"cid":               cid,
	} {
		if got := jsonText(l[k]); got != v {
			t.Errorf("log %s = %s, want %s", k, got, v)
		}
	}
	if _, ok := l["held_ms"]; !ok {
		t.Error("log line has no held_ms")
	}
	if _, ok := l["retry_after"]; ok {
		t.Error("log line of an admitted call has retry_after")
	}
}

func TestExistingRequestIDIsKept(t *testing.T) {
	e := newEnv(t, nil, nil)
	r := e.do(t.Context(), "POST", semanticMatch, oneRow, "Authorization", "Token t-pam", "X-Request-ID", "abc-123")
	if got := r.Header.Get("X-Request-ID"); got != "abc-123" {
		t.Errorf("response X-Request-ID = %q", got)
	}
	if got := e.up.requests()[0].Header.Get("X-Request-ID"); got != "abc-123" {
		t.Errorf("upstream X-Request-ID = %q", got)
	}
	if l := e.sink.Wait(t, 1, waitLimit); jsonText(l[0]["cid"]) != "abc-123" || jsonText(l[0]["single_row"]) != "true" {
		t.Errorf("log line %v", l[0])
	}
}

func TestShadowRefusesTheSecondCallOfAPreviewUser(t *testing.T) {
	e := newEnv(t, nil, nil)
	ctx := t.Context()
	first := e.async(ctx, "POST", semanticMatch, twoRows, "Authorization", "Token t-pam", "X-Test-Do", "hold")
	e.up.waitEntered(t)

	r := e.do(ctx, "POST", semanticMatch, twoRows, "Authorization", "Token t-pam")
	if r.StatusCode != 200 {
		t.Fatalf("second call: %d", r.StatusCode)
	}
	if d := r.Header.Get(ocl.Decision); d != "shadow-refused" {
		t.Errorf("second call decision %q, want shadow-refused", d)
	}
	if ra := r.Header.Get("Retry-After"); ra != "" {
		t.Errorf("Retry-After %q in shadow mode", ra)
	}
	if got := r.Header.Get(ocl.Lane("In-Flight")); got != "2" {
		t.Errorf("in flight %q, want 2", got)
	}
	e.up.release()
	if f := recv(t, first); f.Err != nil || f.Header.Get(ocl.Decision) != "admitted" {
		t.Errorf("first call: %v %v", f.Err, f.Header)
	}
	if p := e.up.peak(); p != 2 {
		t.Errorf("upstream ran %d calls at once, want 2", p)
	}
	lines := e.sink.Wait(t, 2, waitLimit)
	var decisions []string
	for _, l := range lines {
		decisions = append(decisions, jsonText(l["decision"]))
	}
	slices.Sort(decisions)
	if !slices.Equal(decisions, []string{"admitted", "shadow-refused"}) {
		t.Errorf("decisions logged %v", decisions)
	}
	if m := e.inFlight(); len(m) != 0 {
		t.Errorf("leases left: %v", m)
	}
}

func TestEnforceRefusesBeforeTheAPI(t *testing.T) {
	e := newEnv(t, func(c *settings.Config) {
		c.Mode, c.EnforceFor = settings.ModeEnforce, settings.EnforceAll
	}, nil)
	ctx := t.Context()
	first := e.async(ctx, "POST", semanticMatch, twoRows, "Authorization", "Token t-pam", "X-Test-Do", "hold")
	e.up.waitEntered(t)

	r := e.do(ctx, "POST", semanticMatch, twoRows, "Authorization", "Token t-pam")
	if r.StatusCode != 429 {
		t.Fatalf("status %d, want 429", r.StatusCode)
	}
	const body = `{"detail":"Matching is busy. Please retry in 5 seconds.","error_code":"capacity_exceeded","scope":"user","paused":false,"retry_after":5}`
	if string(r.Body) != body {
		t.Errorf("body\n got %s\nwant %s", r.Body, body)
	}
	if ra, ct := r.Header.Get("Retry-After"), r.Header.Get("Content-Type"); ra != "5" || ct != "application/json" {
		t.Errorf("Retry-After %q, Content-Type %q", ra, ct)
	}
	if d := r.Header.Get(ocl.Decision); d != "refused" {
		t.Errorf("decision %q", d)
	}
	if !hex32.MatchString(r.Header.Get("X-Request-ID")) {
		t.Errorf("the 429 has no X-Request-ID")
	}
	e.up.release()
	recv(t, first)
	if n := len(e.up.requests()); n != 1 {
		t.Errorf("the upstream saw %d calls, want 1: the refused one must never reach it", n)
	}
	lines := e.sink.Wait(t, 2, waitLimit)
	refused := 0
	for _, l := range lines {
		if jsonText(l["decision"]) == "refused" {
			refused++
			if jsonText(l["retry_after"]) != "5" || jsonText(l["scope"]) != "user" || jsonText(l["enforced"]) != "true" {
				t.Errorf("refused line %v", l)
			}
			if _, ok := l["held_ms"]; ok {
				t.Errorf("a refused call held a lease: %v", l)
			}
		}
	}
	if refused != 1 {
		t.Errorf("%d refused lines, want 1", refused)
	}
	if m := e.inFlight(); len(m) != 0 {
		t.Errorf("leases left: %v", m)
	}
}

func TestEnforceForAwareRefusesOnlyAwareClients(t *testing.T) {
	e := newEnv(t, func(c *settings.Config) { c.Mode = settings.ModeEnforce }, nil)
	ctx := t.Context()
	first := e.async(ctx, "POST", semanticMatch, twoRows, "Authorization", "Token t-pam", "X-Test-Do", "hold")
	e.up.waitEntered(t)

	r := e.do(ctx, "POST", semanticMatch, twoRows, "Authorization", "Token t-pam")
	if r.StatusCode != 200 || r.Header.Get(ocl.Decision) != "shadow-refused" {
		t.Errorf("unaware client: %d %s", r.StatusCode, r.Header.Get(ocl.Decision))
	}
	for _, meta := range []string{`{"capacity_aware":"true"}`, `{"capacity_aware":1}`, `{"capacity_aware":"True"}`} {
		r = e.do(ctx, "POST", semanticMatch, twoRows, "Authorization", "Token t-pam", "X-OCL-Event-Metadata", meta)
		if r.StatusCode != 429 || r.Header.Get("Retry-After") == "" {
			t.Errorf("aware client %s: %d", meta, r.StatusCode)
		}
	}
	r = e.do(ctx, "POST", semanticMatch, twoRows, "Authorization", "Token t-pam", "X-OCL-Event-Metadata", `{"capacity_aware":"yes"}`)
	if r.StatusCode != 200 {
		t.Errorf(`capacity_aware "yes": %d`, r.StatusCode)
	}
	e.up.release()
	recv(t, first)
	if n := len(e.up.requests()); n != 3 {
		t.Errorf("upstream saw %d calls, want 3", n)
	}
}

func TestPausedTier(t *testing.T) {
	e := newEnv(t, func(c *settings.Config) {
		c.Mode, c.EnforceFor = settings.ModeEnforce, settings.EnforceAll
		setNumber(c, "tiers.preview", 0)
	}, nil)
	r := e.do(t.Context(), "POST", "/concepts/$rerank/", `{"rows":[{}],"q":"fever"}`, "Authorization", "Token t-pam")
	const body = `{"detail":"Matching is busy. Please retry in 120 seconds.","error_code":"capacity_exceeded","scope":"tier","paused":true,"retry_after":120}`
	if r.StatusCode != 429 || string(r.Body) != body {
		t.Errorf("got %d %s", r.StatusCode, r.Body)
	}
	if ra, s := r.Header.Get("Retry-After"), r.Header.Get(ocl.SuggestedConcurrency); ra != "120" || s != "0" {
		t.Errorf("Retry-After %q, suggested %q", ra, s)
	}
	// Another tier still goes ahead.
	r = e.do(t.Context(), "POST", "/concepts/$rerank/", `{"rows":[{}],"q":"fever"}`, "Authorization", "Token t-cora")
	if r.StatusCode != 200 || r.Header.Get(ocl.Decision) != "admitted" || r.Header.Get(ocl.Tier) != "core" {
		t.Errorf("core user: %d %v", r.StatusCode, capacityHeaders(r.Header))
	}
	if n := len(e.up.requests()); n != 1 {
		t.Errorf("upstream saw %d calls, want 1", n)
	}
}

func TestRerank(t *testing.T) {
	e := newEnv(t, nil, nil)
	r := e.do(t.Context(), "POST", "/concepts/$rerank/", `{"rows":[{}]}`, "Authorization", "Token t-pam")
	if h := capacityHeaders(r.Header); len(h) != 0 {
		t.Errorf("rerank without q gated: %v", h)
	}
	r = e.do(t.Context(), "POST", "/concepts/$rerank", `{"rows":[{},{}],"q":"fever"}`, "Authorization", "Token t-pam")
	if r.Header.Get(ocl.Decision) != "admitted" {
		t.Errorf("rerank with q: %v", capacityHeaders(r.Header))
	}
	l := e.sink.Wait(t, 1, waitLimit)
	if len(l) != 1 || jsonText(l[0]["endpoint"]) != "$rerank" || jsonText(l[0]["rows"]) != "2" ||
		jsonText(l[0]["single_row"]) != "false" || jsonText(l[0]["semantic"]) != "false" {
		t.Errorf("log lines %v", l)
	}
	if _, ok := l[0]["es2_knn_limit"]; ok {
		t.Error("a rerank has an es2_knn lane")
	}
}

// A call with no credential at all passes ungated (the API can't know its
// caller either); one with a credential nobody knows is gated as
// (anonymous).
func TestAnonymousCallsPassUngated(t *testing.T) {
	e := newEnv(t, func(c *settings.Config) {
		c.Mode, c.EnforceFor = settings.ModeEnforce, settings.EnforceAll
		setNumber(c, "tiers.preview", 0)
	}, nil)
	r := e.do(t.Context(), "POST", semanticMatch, twoRows, "Authorization", "")
	if r.StatusCode != 200 || len(capacityHeaders(r.Header)) != 0 {
		t.Errorf("no credential: %d %v", r.StatusCode, capacityHeaders(r.Header))
	}
	if l := e.sink.All(t); len(l) != 0 {
		t.Errorf("log lines for a call with no credential: %v", l)
	}
	r = e.do(t.Context(), "POST", semanticMatch, twoRows, "Authorization", "Token unknown")
	if r.StatusCode != 429 || len(e.up.requests()) != 1 {
		t.Errorf("an unknown token: %d, %d upstream requests; want 429 (preview paused), 1", r.StatusCode, len(e.up.requests()))
	}
	if l := e.sink.Wait(t, 1, waitLimit)[0]; l["user_id"] != identity.AnonymousUser {
		t.Errorf("an unknown token's line of %v; want %q", l["user_id"], identity.AnonymousUser)
	}
}

func TestModeOffIsByteIdentical(t *testing.T) {
	e := newEnv(t, func(c *settings.Config) { c.Mode = settings.ModeOff }, nil)
	ctx := t.Context()
	for _, target := range []string{semanticMatch, "/concepts/$match/", "/concepts/$rerank/"} {
		hdr := []string{"Authorization", "Token t-pam", "Origin", "https://mapper.example"}
		via := e.do(ctx, "POST", target, `{"rows":[{}],"q":"x"}`, hdr...)
		direct := directDo(t, e.up.URL+target, `{"rows":[{}],"q":"x"}`, hdr...)
		if via.StatusCode != direct.StatusCode || string(via.Body) != string(direct.Body) {
			t.Errorf("%s: via %d %s, direct %d %s", target, via.StatusCode, via.Body, direct.StatusCode, direct.Body)
		}
		via.Header.Del("Date")
		direct.Header.Del("Date")
		if !maps.EqualFunc(via.Header, direct.Header, slices.Equal) {
			t.Errorf("%s: headers\n via    %v\n direct %v", target, via.Header, direct.Header)
		}
	}
	for _, r := range e.up.requests() {
		if r.Header.Get("X-Request-ID") != "" {
			t.Errorf("mode off forwarded an X-Request-ID")
		}
	}
	if l := e.sink.All(t); len(l) != 0 {
		t.Errorf("log lines in mode off: %v", l)
	}
}

// hexEpoch is an X-Amzn-Trace-Id stamp.
func hexEpoch(sec int64) string { return strconv.FormatInt(sec, 16) }

// jsonText renders a decoded JSON value as its JSON text (strings bare).
func jsonText(v any) string {
	switch t := v.(type) {
	case nil:
		return "<absent>"
	case string:
		return t
	case json.Number:
		return t.String()
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func directDo(t *testing.T, u, body string, hdr ...string) response {
	t.Helper()
	return send(t, newRequest(t, t.Context(), "POST", u, body, hdr...))
}
