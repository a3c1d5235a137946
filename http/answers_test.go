package http_test

import (
	"encoding/json"
	"strconv"
	"testing"

	capgatehttp "github.com/capgate/capgate/http"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
)

// shapedPolicy answers in OpenAI's error shape with Retry-After-Ms and
// X-Should-Retry (a policy of its own: the inference example's words may
// change), refusing credentials it can't verify.
const shapedPolicy = `version: 1
name: shaped
routes:
  - name: chat
    method: POST
    path: {exact: /v1/chat/completions}
    fields:
      model: {body_string: model}
      max_tokens: {body_int: max_tokens, default: 16}
    seats:
      model: {field: max_tokens, per: 512, max: 4}
identity: {resolver: tokens, scheme: Bearer, default_tier: free, unverified: refuse}
lanes:
  - {name: model, scope: key, key: model, routes: [chat], limit: 1}
names:
  header_prefix: Capgate-
  refusal:
    detail: "The API is busy. Please retry in {retry_after} seconds."
    error_code: capacity_exceeded
  log_event: capgate_call
  answers:
    retry_after_ms: true
    should_retry: true
    refused: '{"error": {"message": {detail}, "type": "requests", "code": {error_code}}}'
    4xx: '{"error": {"message": {detail}, "type": "invalid_request_error", "code": {error_code}}}'
    5xx: '{"error": {"message": {detail}, "type": "server_error", "code": {error_code}}}'
`

// openAIError is OpenAI's error body.
type openAIError struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    string `json:"code"`
	} `json:"error"`
}

// Through the gateway, every answer capgate writes itself is in the
// policy's shape: the 429, the 400 of a body it can't read and of a bad
// key, the 422 of a reused key, the 401 of credentials it can't verify,
// the 400 of a request it can't forward, the 502 of an API it can't
// reach, the 503 of full buffers; each with its code, its message and the
// retry headers.
func TestGatewayAnswersInThePolicysShape(t *testing.T) {
	p, err := policy.Parse("shaped.yaml", []byte(shapedPolicy))
	if err != nil {
		t.Fatal(err)
	}
	e := newPolicyEnv(t, p, func(c *settings.Config) {
		c.Mode, c.EnforceFor = settings.ModeEnforce, settings.EnforceAll
		c.Idempotency.Mode = settings.IdempotencyKey
	}, nil)
	ctx := t.Context()
	auth := []string{"Authorization", "Bearer t-pam"}
	check := func(name string, r response, status int, typ, code, retry string) openAIError {
		t.Helper()
		var b openAIError
		if err := json.Unmarshal(r.Body, &b); err != nil || r.StatusCode != status || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s: %d %s %s (%v); want %d, JSON", name, r.StatusCode, r.Header.Get("Content-Type"), r.Body, err, status)
			return b
		}
		if b.Error.Type != typ || b.Error.Code != code || b.Error.Message == "" {
			t.Errorf("%s: %s; want type %s, code %s and a message", name, r.Body, typ, code)
		}
		if got := r.Header.Get("X-Should-Retry"); got != retry {
			t.Errorf("%s: X-Should-Retry %q; want %q", name, got, retry)
		}
		return b
	}

	// The 429: a call of the model running, the next refused at once.
	held := e.async(ctx, "POST", "/v1/chat/completions", `{"model":"m"}`, append(auth, "X-Test-Do", "hold", "Idempotency-Key", "k1")...)
	e.up.waitEntered(t)
	r := e.do(ctx, "POST", "/v1/chat/completions", `{"model":"m"}`, auth...)
	b := check("refused", r, 429, "requests", "capacity_exceeded", "true")
	s, err := strconv.Atoi(r.Header.Get("Retry-After"))
	if err != nil || s < 1 || r.Header.Get("Retry-After-Ms") != strconv.Itoa(s*1000) ||
		b.Error.Message != "The API is busy. Please retry in "+strconv.Itoa(s)+" seconds." {
		t.Errorf("refused: Retry-After %q, Retry-After-Ms %q, message %q", r.Header.Get("Retry-After"), r.Header.Get("Retry-After-Ms"), b.Error.Message)
	}
	// The 422: the held call's key sent with another request.
	check("idempotency_key_reused", e.do(ctx, "POST", "/v1/chat/completions", `{"model":"other"}`,
		append(auth, "Idempotency-Key", "k1")...), 422, "invalid_request_error", "idempotency_key_reused", "false")
	e.up.release()
	recv(t, held)

	check("body_unreadable", e.do(ctx, "POST", "/v1/chat/completions", `{"model":"m","temperature":NaN}`, auth...),
		400, "invalid_request_error", "body_unreadable", "false")
	check("idempotency_key_invalid", e.do(ctx, "POST", "/v1/chat/completions", `{"model":"m"}`,
		append(auth, "Idempotency-Key", "a", "Idempotency-Key", "b")...), 400, "invalid_request_error", "idempotency_key_invalid", "false")
	r = e.do(ctx, "POST", "/v1/chat/completions", `{"model":"m"}`, "Authorization", "Bearer forged")
	check("credentials_unverified", r, 401, "invalid_request_error", "credentials_unverified", "false")
	if r.Header.Get("WWW-Authenticate") != "Bearer" {
		t.Errorf("401: WWW-Authenticate %q", r.Header.Get("WWW-Authenticate"))
	}
	check("bad_request", e.do(ctx, "POST", "/v1/chat/completions", `{"model":"m"}`, append(auth, "Connection", "Authorization")...),
		400, "invalid_request_error", "bad_request", "false")
	if n := len(e.up.requests()); n != 1 {
		t.Errorf("%d requests reached the upstream; want 1 (the held call)", n)
	}

	e.up.Close()
	check("upstream_unreachable", e.do(ctx, "POST", "/v1/chat/completions", `{"model":"m"}`, auth...),
		502, "server_error", "upstream_unreachable", "true")
}

// The gateway's buffers full: a 503 in the policy's shape with
// Retry-After: 1 and Retry-After-Ms: 1000.
func TestGatewayBusyInThePolicysShape(t *testing.T) {
	p, err := policy.Parse("shaped.yaml", []byte(shapedPolicy))
	if err != nil {
		t.Fatal(err)
	}
	e := newPolicyEnv(t, p, nil, func(c *capgatehttp.GatewayConfig) {
		c.Classifier.Budget = capgatehttp.NewBudget(1)
	})
	r := e.do(t.Context(), "POST", "/v1/chat/completions", `{"model":"m"}`, "Authorization", "Bearer t-pam")
	var b openAIError
	if err := json.Unmarshal(r.Body, &b); err != nil || r.StatusCode != 503 || b.Error.Code != "gateway_busy" || b.Error.Type != "server_error" {
		t.Errorf("%d %s; want 503, gateway_busy", r.StatusCode, r.Body)
	}
	if r.Header.Get("Retry-After") != "1" || r.Header.Get("Retry-After-Ms") != "1000" || r.Header.Get("X-Should-Retry") != "true" {
		t.Errorf("headers %v", r.Header)
	}
}
