package client

import (
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/capgate/capgate/header"
	"github.com/capgate/capgate/policy"
)

func TestHeaderRetryAfter(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"12", 12 * time.Second, true},
		{" 7 ", 7 * time.Second, true},
		{"1.5", 1500 * time.Millisecond, true},
		{"0", 0, true},
		{"86400", 24 * time.Hour, true},
		{"99999999999999999999", math.MaxInt64, true},
		{"Sun, 01 Mar 2026 12:00:30 GMT", 30 * time.Second, true},
		{"Sun, 01 Mar 2026 11:00:00 GMT", 0, true},
		{"", 0, false},
		{"-4", 0, false},
		{"+5", 0, false},
		{"1e3", 0, false},
		{"1.2.3", 0, false},
		{".", 0, false},
		{"soon", 0, false},
		{"NaN", 0, false},
	} {
		got, ok := headerRetryAfter(tc.in, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("headerRetryAfter(%q) = %v, %t; want %v, %t", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestReadRefusalBody(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want refusalBody
	}{
		{`{"detail":"Matching is busy. Please retry in 5 seconds.","error_code":"capacity_exceeded","scope":"user","paused":false,"retry_after":5}`,
			refusalBody{ErrorCode: "capacity_exceeded", Scope: "user", RetryAfter: 5 * time.Second, HasRetry: true}},
		{`{"error_code":"capacity_exceeded","scope":"tier","paused":true,"retry_after":120}`,
			refusalBody{ErrorCode: "capacity_exceeded", Scope: "tier", Paused: true, RetryAfter: 120 * time.Second, HasRetry: true}},
		{`{"error_code":7,"scope":"user","retry_after":"15"}`, refusalBody{Scope: "user"}},
		{`{"retry_after":-1}`, refusalBody{}},
		{`{"retry_after":0.25}`, refusalBody{RetryAfter: 250 * time.Millisecond, HasRetry: true}},
		{`{"detail":"Request was throttled."}`, refusalBody{}},
		// OpenAI's error shape (a policy's names.answers): the code read
		// from the error object.
		{`{"error": {"message": "The API is busy.", "type": "requests", "param": null, "code": "capacity_exceeded"}}`,
			refusalBody{ErrorCode: "capacity_exceeded"}},
		{`{"error": {"code": 429}}`, refusalBody{}},
		{`{"error": "busy"}`, refusalBody{}},
		{`[1,2]`, refusalBody{}},
		{`<html>busy</html>`, refusalBody{}},
		{``, refusalBody{}},
	} {
		if got := readRefusalBody(strings.NewReader(tc.in)); got != tc.want {
			t.Errorf("readRefusalBody(%s) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

func TestParseRefusalKinds(t *testing.T) {
	ocl := policy.OCL().Names.Header()
	now := time.Now()
	resp := func(status int, body string) *http.Response {
		return &http.Response{StatusCode: status, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(body))}
	}
	if r := parseRefusal(resp(429, `{"error_code":"capacity_exceeded","scope":"es2_knn"}`), now, 0, &ocl); r.kind != Capacity || r.scope != "es2_knn" || r.delay != 5*time.Second || r.source != sourceDefault {
		t.Errorf("capacity: %+v", r)
	}
	if r := parseRefusal(resp(429, `{"error_code":"throttled","scope":"user"}`), now, 3, &ocl); r.kind != RateLimit || r.scope != "" || r.delay != 40*time.Second {
		t.Errorf("rate limit: %+v", r)
	}
	if r := parseRefusal(resp(429, ``), now, 9, &ocl); r.kind != RateLimit || r.delay != MaxBackoff {
		t.Errorf("empty 429: %+v", r)
	}
	if r := parseRefusal(resp(503, `{"error_code":"capacity_exceeded","retry_after":600}`), now, 0, &ocl); r.kind != Unavailable || r.delay != time.Minute || r.source != sourceBody {
		t.Errorf("503: %+v", r)
	}
	if r := parseRefusal(resp(503, ``), now, 1, &ocl); r.delay != 12*time.Second {
		t.Errorf("503 without a delay, second retry: %+v", r)
	}
}

// A refusal in a policy's own shape (OpenAI's, with no scope in the
// body): the gate's refusal (its decision header) names the lane in the
// RateLimit field, and a paused one says X-Should-Retry: false.
func TestParseRefusalInAPolicysShape(t *testing.T) {
	names := header.Generic
	now := time.Now()
	body := `{"error": {"message": "The API is busy. Please retry in 2 seconds.", "type": "requests", "param": null, "code": "capacity_exceeded"}}`
	resp := func(h ...string) *http.Response {
		r := &http.Response{StatusCode: 429, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(body))}
		for i := 0; i+1 < len(h); i += 2 {
			r.Header.Set(h[i], h[i+1])
		}
		return r
	}
	r := parseRefusal(resp("Capgate-Decision", "refused", "Retry-After", "2", "RateLimit", `"model";r=0;t=2`, "X-Should-Retry", "true"), now, 0, &names)
	if r.kind != Capacity || r.scope != "model" || r.paused || r.delay != 2*time.Second {
		t.Errorf("full: %+v; want capacity, scope model, 2 s", r)
	}
	r = parseRefusal(resp("Capgate-Decision", "refused", "Retry-After", "120", "RateLimit", `"user";r=0;t=120`, "X-Should-Retry", "false"), now, 0, &names)
	if r.kind != Capacity || r.scope != "user" || !r.paused {
		t.Errorf("paused: %+v; want capacity, scope user, paused", r)
	}
	// The API's own 429 with the same code and no decision header: no
	// scope is made up.
	if r := parseRefusal(resp("RateLimit", `"model";r=0`), now, 0, &names); r.kind != Capacity || r.scope != "" || r.paused {
		t.Errorf("no decision header: %+v; want capacity without a scope", r)
	}
}
