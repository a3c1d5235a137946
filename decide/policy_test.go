package decide_test

import (
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
)

// inferencePolicy is examples/inference/policy.yaml.
func inferencePolicy(t *testing.T) *policy.Policy {
	t.Helper()
	p, err := policy.Load("../examples/inference/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// newInferenceEnv serves the inference policy in enforce for every call,
// waiting off.
func newInferenceEnv(t *testing.T) *env {
	t.Helper()
	p := inferencePolicy(t)
	return newEnv(t, "", func(c *settings.Config) {
		d := settings.Default(p, settings.ModeEnforce)
		d.EnforceFor, d.Wait.MaxSeconds = settings.EnforceAll, 0
		*c = d
	})
}

// An app names the call by its route and fields; the service plans the
// policy's lanes: a model's lane is keyed by the field, and the answer's
// headers and 429 are the policy's names.
func TestRouteAndFieldsOfAPolicy(t *testing.T) {
	e := newInferenceEnv(t)
	body := func(user, model string) string {
		return `{"user":"` + user + `","groups":["pro"],"route":"chat","fields":{"model":"` + model + `"}}`
	}
	a := e.post(t, t.Context(), body("ann", "large"), "")
	b := e.post(t, t.Context(), body("bob", "large"), "")
	for _, s := range []*stream{a, b} {
		if s.d.Decision != "admitted" || !s.d.Held {
			t.Fatalf("%+v: want admitted and held", s.d)
		}
	}
	if got := a.d.Headers["Capgate-Decision"]; got != "admitted" {
		t.Errorf("headers %v: want Capgate-Decision admitted", a.d.Headers)
	}
	// The model lane is full for "large" (its own limit, 4 seats: two
	// calls that name no max_tokens, 2 seats each), not for "small".
	c := e.post(t, t.Context(), body("cy", "large"), "")
	if c.d.Decision != "refused" || c.d.Status != 429 {
		t.Fatalf("third call of a model: %+v; want refused, 429", c.d)
	}
	// The body and headers are the gateway's: OpenAI's error shape, the
	// scope in RateLimit, Retry-After in ms, a retry worth making.
	var refusal struct {
		Error struct{ Message, Type, Code string }
	}
	ra := c.d.Headers["Retry-After"]
	if err := json.Unmarshal(c.d.Body, &refusal); err != nil || refusal.Error.Code != "capacity_exceeded" ||
		refusal.Error.Type != "requests" || refusal.Error.Message != "The API is busy. Please retry in "+ra+" seconds." {
		t.Errorf("429 body %s (%v); want OpenAI's shape in the policy's words", c.d.Body, err)
	}
	if c.d.Headers["Ratelimit"] != `"model";r=0;t=`+ra || c.d.Headers["Retry-After-Ms"] != ra+"000" || c.d.Headers["X-Should-Retry"] != "true" {
		t.Errorf("429 headers %v; want the scope model, Retry-After-Ms, X-Should-Retry", c.d.Headers)
	}
	if d := e.post(t, t.Context(), body("cy", "small"), ""); d.d.Decision != "admitted" {
		t.Errorf("another model: %+v; want admitted", d.d)
	}
	counts := make([]int, 1)
	if err := e.store.Count(t.Context(), []string{"capgate:inference:model:large"}, counts); err != nil || counts[0] != 4 {
		t.Errorf("capgate:inference:model:large holds %d (%v); want 4 seats (the policy's key prefix and the field's value)", counts[0], err)
	}
	a.close()
	b.close()
}

// A route or field the policy lacks, or a field of the wrong type, is
// refused with a message naming what is valid; "endpoint" names a route
// by its log name (the first protocol's word).
func TestRouteAndFieldsRefused(t *testing.T) {
	p := inferencePolicy(t)
	e := newEnv(t, "", func(c *settings.Config) { *c = settings.Default(p, settings.ModeEnforce) })
	for _, tc := range []struct{ body, want string }{
		{`{"user":"u","route":"chats"}`, `\"route\" \"chats\": want \"chat\", \"completions\" or \"embeddings\"`},
		{`{"user":"u","endpoint":"$match","rows":1}`, `\"endpoint\" \"$match\": want \"chat\", \"completions\" or \"embeddings\"`},
		{`{"user":"u"}`, `\"route\" is required`},
		{`{"user":"u","route":"chat","endpoint":"chat"}`, `not both`},
		{`{"user":"u","route":"chat","fields":{"modl":"x"}}`, `route \"chat\" has no such field (its fields: model, max_tokens)`},
		{`{"user":"u","route":"chat","fields":{"model":3}}`, `\"fields.model\" must be a string`},
		{`{"user":"u","route":"chat","tier":"gold"}`, `want one of [pro free]`},
	} {
		s := e.post(t, t.Context(), tc.body, "")
		b, _ := io.ReadAll(s.resp.Body)
		if s.resp.StatusCode != 400 || !strings.Contains(string(b), tc.want) {
			t.Errorf("%s: %d %s; want 400 containing %s", tc.body, s.resp.StatusCode, b, tc.want)
		}
	}
	if s := e.post(t, t.Context(), `{"user":"u","endpoint":"chat","fields":{"model":"m"}}`, ""); s.d.Decision != "admitted" {
		t.Errorf("endpoint naming a route by its log name: %+v; want admitted", s.d)
	}
}

// Why: a seats field near 2^63 wrapped ceil(n / per) negative and became 1
// seat: an embeddings call of 2^63-1 inputs took 1 seat beside a chat call
// that should have been refused. It now takes the most it can (its max 4,
// capped at the model lane's limit 2). A number past int64 is refused.
func TestSeatsFieldAtTheInt64Edge(t *testing.T) {
	p, err := policy.Load("../testdata/embeddings-policy.yaml") // the seats tests' own policy
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, "", func(c *settings.Config) {
		d := settings.Default(p, settings.ModeEnforce)
		d.EnforceFor, d.Wait.MaxSeconds = settings.EnforceAll, 0
		*c = d
	})
	emb := e.post(t, t.Context(), `{"user":"ann","groups":["pro"],"route":"embeddings","fields":{"model":"e5","inputs":9223372036854775807}}`, "")
	if emb.d.Decision != "admitted" || !emb.d.Held {
		t.Fatalf("the embeddings call: %+v; want admitted and held", emb.d)
	}
	counts := make([]int, 1)
	if err := e.store.Count(t.Context(), []string{p.Names.KeyPrefix + ":model:e5"}, counts); err != nil || counts[0] != 2 {
		t.Errorf("model e5 holds %d seats (%v); want 2", counts[0], err)
	}
	if chat := e.post(t, t.Context(), `{"user":"bob","groups":["pro"],"route":"chat","fields":{"model":"e5"}}`, ""); chat.d.Decision != "refused" {
		t.Errorf("a chat call to e5 beside it: %+v; want refused", chat.d)
	}
	s := e.post(t, t.Context(), `{"user":"cy","route":"embeddings","fields":{"model":"e6","inputs":9223372036854775808}}`, "")
	if b, _ := io.ReadAll(s.resp.Body); s.resp.StatusCode != 400 || !strings.Contains(string(b), "fields.inputs") {
		t.Errorf("inputs past int64: %d %s; want 400 naming the field", s.resp.StatusCode, b)
	}
	emb.close()
}

// A repeat_key used for another request is answered as the gateway
// answers it under the policy: the inference example's 422 in OpenAI's
// error shape, X-Should-Retry false.
func TestRepeatKeyReusedInThePolicysShape(t *testing.T) {
	p := inferencePolicy(t)
	e := newEnv(t, "", func(c *settings.Config) {
		d := settings.Default(p, settings.ModeEnforce)
		d.EnforceFor, d.Wait.MaxSeconds = settings.EnforceAll, 0
		d.Idempotency.Mode = settings.IdempotencyKey
		*c = d
	})
	call := func(rid, fp string) string {
		return `{"user":"ann","route":"chat","fields":{"model":"m"},"request_id":"` + rid +
			`","repeat_key":"k1","fingerprint":"` + fp + `"}`
	}
	first := e.post(t, t.Context(), call("rid-1", "f1"), "")
	if !first.d.Held {
		t.Fatalf("first: %+v, want held", first.d)
	}
	s := e.post(t, t.Context(), call("rid-2", "f2"), "")
	// The template, compacted on the line (the body is JSON in JSON).
	want := `{"error":{"message":"This repeat_key was used for a different request.","type":"invalid_request_error","param":null,"code":"idempotency_key_reused"}}`
	if s.d.Decision != "reused" || s.d.Status != 422 || string(s.d.Body) != want {
		t.Errorf("other fingerprint: %s %d %s\nwant reused, 422, %s", s.d.Decision, s.d.Status, s.d.Body, want)
	}
	if s.d.Headers["X-Should-Retry"] != "false" || s.d.Headers["X-Request-Id"] != "rid-2" {
		t.Errorf("headers %v; want X-Should-Retry false, the request id", s.d.Headers)
	}
	first.close()
}
