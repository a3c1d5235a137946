package answer

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
)

// shapedPolicy answers in OpenAI's error shape (a policy of its own, not
// the inference example, whose words may change), with Retry-After-Ms
// and X-Should-Retry.
const shapedPolicy = `version: 1
name: shaped
routes:
  - {name: chat, method: POST, path: {exact: /v1/chat/completions}, fields: {model: {body_string: model}}}
identity: {resolver: tokens, scheme: Bearer, default_tier: free}
lanes:
  - {name: model, scope: key, key: model, routes: [chat], limit: 1}
names:
  header_prefix: Capgate-
  refusal:
    detail: "The \"{scope}\" lane is busy. Please retry in {retry_after} seconds."
    error_code: capacity_exceeded
  log_event: capgate_call
  answers:
    retry_after_ms: true
    should_retry: true
    refused: '{"error": {"message": {detail}, "type": "requests", "param": null, "code": {error_code}, "retry_after_ms": {retry_after_ms}}}'
    4xx: |
      {"error": {"message": {detail}, "type": "invalid_request_error",
                 "param": null, "code": {error_code}, "status": {status}}}
    default: '{"error": {"message": "{detail} (request {request_id})", "type": "server_error", "code": {error_code}}}'
`

func parseShaped(t testing.TB) *policy.Policy {
	t.Helper()
	p, err := policy.Parse("shaped.yaml", []byte(shapedPolicy))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// shapedRefusals returns a refused call of p's model lane (limit 1, one
// call of the model running) and one of a paused lane (limit 0).
func shapedRefusals(t testing.TB, p *policy.Policy) (full, paused *capgate.Admission) {
	t.Helper()
	ctx := context.Background()
	admit := func(limit int, model string) *capgate.Admission {
		cfg := settings.Default(p, settings.ModeEnforce)
		cfg.EnforceFor = settings.EnforceAll
		cfg.Wait.MaxSeconds = 0
		cfg = cfg.WithLimit(0, limit)
		g, err := capgate.NewGate(memory.New(nil), settings.NewFixed(cfg), nil, "t")
		if err != nil {
			t.Fatal(err)
		}
		g.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		r := p.Route("chat")
		f := policy.NewFields(r)
		f.SetString(r.Field("model"), model)
		call := capgate.Call{Route: r, Fields: f, UserID: "fay", Tier: "free", CID: "rid-7"}
		var last *capgate.Admission
		for range 2 {
			last = g.Admit(ctx, call)
			t.Cleanup(func() { last.Release(ctx) })
			if last.Outcome().Decision == capgate.DecisionRefused {
				return last
			}
		}
		t.Fatalf("limit %d: no call refused", limit)
		return nil
	}
	return admit(1, "large"), admit(0, "small")
}

// A refused call's 429 is the policy's template: its detail a text
// template of its own (escaped), the headers Retry-After-Ms (Retry-After
// in ms) and X-Should-Retry (false for a paused lane), all exposed.
func TestRefusalInAPolicysShape(t *testing.T) {
	p := parseShaped(t)
	full, paused := shapedRefusals(t, p)
	for _, tc := range []struct {
		adm   *capgate.Admission
		retry string
	}{{full, "true"}, {paused, "false"}} {
		s := tc.adm.Outcome().RetryAfter
		want := `{"error": {"message": "The \"model\" lane is busy. Please retry in ` + itoa(s) + ` seconds.", "type": "requests", "param": null, "code": "capacity_exceeded", "retry_after_ms": ` + itoa(s*1000) + `}}`
		if got := string(Refusal(tc.adm.Outcome())); got != want {
			t.Errorf("body %s\nwant %s", got, want)
		}
		h := http.Header{}
		SetGated(h, tc.adm.Outcome(), "rid-7")
		if h.Get("Retry-After") != itoa(s) || h.Get("Retry-After-Ms") != itoa(s*1000) || h.Get("X-Should-Retry") != tc.retry {
			t.Errorf("headers %v; want Retry-After %d, Retry-After-Ms %d, X-Should-Retry %s", h, s, s*1000, tc.retry)
		}
		exposed := strings.Split(h.Get(ExposeHeadersKey), ", ")
		if !slices.Contains(exposed, "Retry-After-Ms") || !slices.Contains(exposed, "X-Should-Retry") {
			t.Errorf("expose list %v lacks the retry headers", exposed)
		}
	}
	// An admitted call's response gets neither.
	h := http.Header{}
	SetGated(h, testAdmissions(t)[0].Outcome(), "r")
	if h.Get("Retry-After-Ms") != "" || h.Get("X-Should-Retry") != "" {
		t.Errorf("an admitted call's headers %v", h)
	}
}

// Each of capgate's own answers is the policy's template for its kind (or
// its class's, or the default), with its status, the kind's code, the
// retry headers; the same answers under the built-in policy are capgate's
// own shape, as they always were.
func TestOwnAnswersInAPolicysShape(t *testing.T) {
	p := parseShaped(t)
	fourxx := func(detail, code string, status int) string {
		return `{"error": {"message": ` + quote(detail) + `, "type": "invalid_request_error",
           "param": null, "code": "` + code + `", "status": ` + itoa(status) + `}}
`
	}
	for _, tc := range []struct {
		write      func(http.ResponseWriter, *policy.Policy, Own)
		own        Own
		status     int
		body       string
		retry      string // X-Should-Retry
		builtin    string
		builtinCT  string
		retryAfter string
	}{
		{WriteKeyError, Own{Kind: policy.AnswerKeyInvalid, Detail: `Send one "Idempotency-Key".`, RequestID: "r1"}, 400,
			fourxx(`Send one "Idempotency-Key".`, "idempotency_key_invalid", 400), "false",
			`{"detail":"Send one \"Idempotency-Key\".","error_code":"idempotency_key_invalid"}` + "\n", "application/json", ""},
		{WriteKeyError, Own{Kind: policy.AnswerKeyReused, Detail: "Used.", RequestID: "r1"}, 422,
			fourxx("Used.", "idempotency_key_reused", 422), "false",
			`{"detail":"Used.","error_code":"idempotency_key_reused"}` + "\n", "application/json", ""},
		{WriteKeyError, Own{Kind: policy.AnswerBodyUnreadable, Detail: "NaN.", RequestID: "r1"}, 400,
			fourxx("NaN.", "body_unreadable", 400), "false",
			`{"detail":"NaN.","error_code":"body_unreadable"}` + "\n", "application/json", ""},
		{WriteKeyError, Own{Kind: policy.AnswerKeyWait, Detail: "Still running.", RequestID: "r1"}, 504,
			`{"error": {"message": "Still running. (request r1)", "type": "server_error", "code": "idempotency_wait_timeout"}}`, "true",
			`{"detail":"Still running.","error_code":"idempotency_wait_timeout"}` + "\n", "application/json", ""},
		{WriteError, Own{Kind: policy.AnswerUnverified, Detail: "Unverified.", RequestID: "r2"}, 401,
			fourxx("Unverified.", "credentials_unverified", 401), "false",
			`{"detail":"Unverified.","request_id":"r2"}` + "\n", "application/json", ""},
		{WriteError, Own{Kind: policy.AnswerBusy, Detail: "Busy.", RetryAfter: 1}, 503,
			`{"error": {"message": "Busy. (request )", "type": "server_error", "code": "gateway_busy"}}`, "true",
			`{"detail":"Busy."}` + "\n", "application/json", "1"},
		{WriteError, Own{Kind: policy.AnswerUpstreamUnreachable, Detail: "Unreachable.", RequestID: "r3"}, 502,
			`{"error": {"message": "Unreachable. (request r3)", "type": "server_error", "code": "upstream_unreachable"}}`, "true",
			`{"detail":"Unreachable.","request_id":"r3"}` + "\n", "application/json", ""},
		{WriteError, Own{Kind: policy.AnswerUpstreamTimeout, Detail: "Slow.", RequestID: "r3"}, 504,
			`{"error": {"message": "Slow. (request r3)", "type": "server_error", "code": "upstream_timeout"}}`, "true",
			`{"detail":"Slow.","request_id":"r3"}` + "\n", "application/json", ""},
		{WriteText, Own{Kind: policy.AnswerBusy, Detail: "The gateway is busy. Please retry.", RetryAfter: 1}, 503,
			`{"error": {"message": "The gateway is busy. Please retry. (request )", "type": "server_error", "code": "gateway_busy"}}`, "true",
			"The gateway is busy. Please retry.\n", "text/plain; charset=utf-8", "1"},
		{WriteText, Own{Kind: policy.AnswerBadRequest, Detail: "Bad Request: two Content-Length headers."}, 400,
			fourxx("Bad Request: two Content-Length headers.", "bad_request", 400), "false",
			"Bad Request: two Content-Length headers.\n", "text/plain; charset=utf-8", ""},
		{WriteText, Own{Kind: policy.AnswerInternal, Detail: "Internal Server Error", RequestID: "r4"}, 500,
			`{"error": {"message": "Internal Server Error (request r4)", "type": "server_error", "code": "internal_error"}}`, "true",
			"Internal Server Error\n", "text/plain; charset=utf-8", ""},
	} {
		name := tc.own.Kind.String()
		w := httptest.NewRecorder()
		tc.write(w, p, tc.own)
		h := w.Header()
		if w.Code != tc.status || w.Body.String() != tc.body || h.Get("Content-Type") != "application/json" {
			t.Errorf("%s: %d %s %q\nwant %d %q", name, w.Code, h.Get("Content-Type"), w.Body.String(), tc.status, tc.body)
		}
		if !json.Valid(w.Body.Bytes()) {
			t.Errorf("%s: not JSON: %s", name, w.Body.String())
		}
		ms := ""
		if tc.retryAfter != "" {
			ms = tc.retryAfter + "000"
		}
		if h.Get("X-Should-Retry") != tc.retry || h.Get("Retry-After") != tc.retryAfter || h.Get("Retry-After-Ms") != ms {
			t.Errorf("%s: headers %v; want X-Should-Retry %s, Retry-After %q", name, h, tc.retry, tc.retryAfter)
		}
		for _, bp := range []*policy.Policy{nil, policy.OCL()} {
			w := httptest.NewRecorder()
			tc.write(w, bp, tc.own)
			h := w.Header()
			if w.Code != tc.status || w.Body.String() != tc.builtin || h.Get("Content-Type") != tc.builtinCT {
				t.Errorf("%s built in: %d %s %q\nwant %d %s %q", name, w.Code, h.Get("Content-Type"), w.Body.String(), tc.status, tc.builtinCT, tc.builtin)
			}
			if h.Get("X-Should-Retry") != "" || h.Get("Retry-After-Ms") != "" || h.Get("Retry-After") != tc.retryAfter {
				t.Errorf("%s built in: headers %v", name, h)
			}
		}
	}
	// The decision service's 422 body: the template, or capgate's own
	// shape without the newline.
	o := Own{Kind: policy.AnswerKeyReused, Detail: "Used."}
	if got := string(KeyError(nil, o)); got != `{"detail":"Used.","error_code":"idempotency_key_reused"}` {
		t.Errorf("KeyError built in: %s", got)
	}
	if got := string(KeyError(p, o)); got != fourxx("Used.", "idempotency_key_reused", 422) {
		t.Errorf("KeyError: %s", got)
	}
}

// The refusal path allocates nothing but what the body is written
// into (the gateway's comes from a pool; Refusal's is one slice, sized
// for the body), with a template as without.
func TestRefusalAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	full, _ := shapedRefusals(t, parseShaped(t))
	ocl := testAdmissions(t)[len(testAdmissions(t))-1]
	for _, adm := range []*capgate.Admission{full, ocl} {
		buf := make([]byte, 0, 512)
		if n := testing.AllocsPerRun(100, func() { buf = AppendRefusal(buf[:0], adm.Outcome()) }); n != 0 {
			t.Errorf("%s: AppendRefusal allocates %v times; want 0", adm.Outcome().Policy.Name, n)
		}
		if n := testing.AllocsPerRun(100, func() { _ = Refusal(adm.Outcome()) }); n != 1 {
			t.Errorf("%s: Refusal allocates %v times; want 1 (the body)", adm.Outcome().Policy.Name, n)
		}
		w := discard{h: http.Header{}}
		if n := testing.AllocsPerRun(100, func() { WriteRefusal(w, adm.Outcome()) }); n != 0 {
			t.Errorf("%s: WriteRefusal allocates %v times; want 0", adm.Outcome().Policy.Name, n)
		}
	}
}

// discard is a ResponseWriter that keeps nothing.
type discard struct{ h http.Header }

func (d discard) Header() http.Header         { return d.h }
func (d discard) Write(b []byte) (int, error) { return len(b), nil }
func (d discard) WriteHeader(int)             {}

func itoa(n int) string { return strconv.Itoa(n) }

func quote(s string) string { b, _ := json.Marshal(s); return string(b) }
