package policy_test

import (
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/capgate/capgate/policy"
)

const generic = `version: 1
name: g
routes:
  - name: infer
    method: POST
    path: {pattern: "/v1/models/{model}/infer", trailing_slash: optional}
    when:
      - header_present: x-tenant
    fields:
      model: {path_segment: model}
      tenant: {header: X-Tenant}
      inputs: {body_array_len: input}
      stream: {query_truthy: stream}
    seats:
      per_model: {field: inputs, per: 16, max: 4}
      cluster: 2
  - name: admin
    method: DELETE
    path: {prefix: /admin/}
    fields:
      who: {body_string: who}
classes:
  - {name: streamed, routes: [infer], field: stream, equals: true}
identity:
  resolver: header
  scheme: Token
  default_tier: all
lanes:
  - {name: cluster, scope: cluster, routes: [infer, admin], limit: 10}
  - {name: per_model, scope: key, key: model, routes: [infer], limit: 4}
  - {name: per_tenant, scope: key, key: tenant, routes: [infer], limit: 2, only_if: stream}
  - {name: per_user, scope: key, key: user, routes: [infer, admin], limit: {all: 1}}
names:
  header_prefix: Capgate-
  ratelimit: true
  refusal: {detail: "busy", error_code: busy}
  log_event: capgate_call
`

func mustParse(t testing.TB, src string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse("t.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestEvaluateGeneric(t *testing.T) {
	p := mustParse(t, generic)
	ev := policy.NewEvaluator(p, "/api/")
	tenant := http.Header{"X-Tenant": {"acme"}}
	inputs := func(n int) []byte {
		return []byte(`{"input":[` + strings.TrimSuffix(strings.Repeat(`"x",`, n), ",") + `]}`)
	}
	for _, tc := range []struct {
		name   string
		req    policy.Request
		route  string
		fields map[string]string
		seats  map[string]int
		lanes  string
	}{
		{name: "pattern", req: policy.Request{Method: "POST", Path: "/api/v1/models/llama/infer", RawQuery: "stream=1", Header: tenant, Body: inputs(40)},
			route: "infer", fields: map[string]string{"model": "llama", "tenant": "acme", "inputs": "40", "stream": "true"},
			seats: map[string]int{"per_model": 3, "cluster": 2, "per_user": 1}, lanes: "cluster,per_model,per_tenant,per_user"},
		{name: "seats capped", req: policy.Request{Method: "POST", Path: "/api/v1/models/m/infer/", Header: tenant, Body: inputs(100)},
			route: "infer", fields: map[string]string{"model": "m", "inputs": "100", "stream": "false"}, seats: map[string]int{"per_model": 4},
			lanes: "cluster,per_model,per_user"},
		{name: "no body, one seat", req: policy.Request{Method: "POST", Path: "/api/v1/models/m/infer", Header: tenant},
			route: "infer", fields: map[string]string{"inputs": "0"}, seats: map[string]int{"per_model": 1}, lanes: "cluster,per_model,per_user"},
		// A body the API may read and capgate can't: never the cheap call.
		{name: "unreadable body", req: policy.Request{Method: "POST", Path: "/api/v1/models/m/infer", Header: tenant, BodyUnreadable: true, Body: inputs(40)},
			route: "infer", fields: map[string]string{"inputs": "0"}, seats: map[string]int{"per_model": 4}, lanes: "cluster,per_model,per_user"},
		{name: "NaN", req: policy.Request{Method: "POST", Path: "/api/v1/models/m/infer", Header: tenant, Body: []byte(`{"input":["x"],"t":NaN}`)},
			route: "infer", fields: map[string]string{"inputs": "0"}, seats: map[string]int{"per_model": 4}, lanes: "cluster,per_model,per_user"},
		{name: "unreadable query", req: policy.Request{Method: "POST", Path: "/api/v1/models/m/infer", Header: tenant, QueryUnreadable: true},
			route: "infer", fields: map[string]string{"stream": "true"}, lanes: "cluster,per_model,per_tenant,per_user"},
		{name: "no tenant header", req: policy.Request{Method: "POST", Path: "/api/v1/models/m/infer"}},
		{name: "empty segment", req: policy.Request{Method: "POST", Path: "/api/v1/models//infer", Header: tenant}},
		{name: "extra segment", req: policy.Request{Method: "POST", Path: "/api/v1/models/a/b/infer", Header: tenant}},
		{name: "two slashes", req: policy.Request{Method: "POST", Path: "/api/v1/models/a/infer//", Header: tenant}},
		{name: "outside the mount", req: policy.Request{Method: "POST", Path: "/v1/models/a/infer", Header: tenant}},
		{name: "prefix", req: policy.Request{Method: "DELETE", Path: "/api/admin/x", Body: []byte(`{"who":"b\u00e9a","who2":1}`)},
			route: "admin", fields: map[string]string{"who": "béa"}, lanes: "cluster,per_user"},
		{name: "prefix, no more", req: policy.Request{Method: "DELETE", Path: "/api/admin"}},
		{name: "method", req: policy.Request{Method: "GET", Path: "/api/admin/x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f policy.Fields
			r := ev.Evaluate(&tc.req, &f)
			if tc.route == "" {
				if r != nil {
					t.Fatalf("matched %s; want none", r.Name)
				}
				if ev.MayMatch(&tc.req) && tc.req.Header != nil && tc.name != "no tenant header" {
					t.Errorf("MayMatch true for a request no route's path matches")
				}
				return
			}
			if r == nil || r.Name != tc.route {
				t.Fatalf("route = %v; want %s", r, tc.route)
			}
			if !ev.MayMatch(&tc.req) {
				t.Error("MayMatch false for a request a route matches")
			}
			for name, want := range tc.fields {
				if got, ok := f.ByName(name); !ok || got != want {
					t.Errorf("field %s = %q, %v; want %q", name, got, ok, want)
				}
			}
			for lane, want := range tc.seats {
				if got := r.SeatsIn(lane, &f); got != want {
					t.Errorf("seats in %s = %d; want %d", lane, got, want)
				}
			}
			var lanes []string
			for _, l := range p.LanesOf(r) {
				if l.TakesCall(r, &f) {
					lanes = append(lanes, l.Name)
				}
			}
			if got := strings.Join(lanes, ","); got != tc.lanes {
				t.Errorf("lanes = %s; want %s", got, tc.lanes)
			}
		})
	}
	// A repeated header reads as gunicorn joins it.
	var f policy.Fields
	r := ev.Evaluate(&policy.Request{Method: "POST", Path: "/api/v1/models/m/infer", Header: http.Header{"X-Tenant": {"a", "b"}}}, &f)
	if got, _ := f.ByName("tenant"); got != "a,b" {
		t.Errorf("tenant of a repeated header = %q; want a,b", got)
	}
	if got := p.HeadersRead(); len(got) != 1 || got[0] != "X-Tenant" {
		t.Errorf("HeadersRead = %v; want [X-Tenant]", got)
	}
	r = ev.Evaluate(&policy.Request{Method: "POST", Path: "/api/v1/models/m/infer", RawQuery: "stream=TRUE", Header: tenant}, &f)
	if !p.Classes[0].Has(r, &f) || !f.Equal(r.Field("model"), "m") || f.Equal(r.Field("model"), "n") {
		t.Error("class or Equal wrong for a streamed call of model m")
	}
}

// The example of docs/POLICY.md and examples/inference: the three heavy
// routes by the JSON body's model, everything else untouched.
func TestInferenceExample(t *testing.T) {
	data, err := os.ReadFile("../examples/inference/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := mustParse(t, string(data))
	if got := p.Identity; got.Resolver != "tokens" || got.Scheme != "Bearer" || got.TierOf(false, []string{"pro"}) != "pro" || got.TierOf(true, nil) != "free" {
		t.Errorf("identity = %+v", got)
	}
	var keys []string
	for _, l := range p.Lanes {
		keys = append(keys, l.Limit.ConfigKeys(p.Tiers())...)
	}
	if got := strings.Join(keys, " "); got != "lanes.cluster lanes.model lanes.user.pro lanes.user.free" {
		t.Errorf("config keys = %s", got)
	}
	if l := p.Lane("user"); l.Limit.PerTier["free"] != 1 || l.Limit.PerTier["pro"] != 3 || p.Lane("cluster").Limit.Value != 8 || p.Lane("model").Limit.Value != 8 ||
		len(p.Lane("model").KeyLimits) != 1 || p.Lane("model").KeyLimits["large"] != 4 {
		t.Error("limits are not cluster 8, model 8 (large 4), user free 1 / pro 3")
	}
	for _, r := range p.Routes {
		if !r.CostFromBody() || r.OnClientGone != policy.ClientGoneCancel || r.UnreadableBody != policy.UnreadableRefuse {
			t.Errorf("route %s: its cost not from its body, or not cancelled when its client goes, or not refusing a body it can't read", r.Name)
		}
	}
	if id := p.Idempotency; id.RetryHeader != "X-Stainless-Retry-Count" || strings.Join(id.FingerprintHeaders, ",") != "Openai-Organization,Openai-Project" {
		t.Errorf("idempotency %+v", id)
	}
	ev := policy.NewEvaluator(p, "")
	body := []byte(`{"model":"llama-3-8b","messages":[{"role":"user","content":"hi"}]}`)
	for _, tc := range []struct {
		method, path, route string
	}{
		{"POST", "/v1/chat/completions", "chat"},
		{"POST", "/v1/completions", "completions"},
		{"POST", "/v1/embeddings", "embeddings"},
		{"GET", "/v1/models", ""},
		{"GET", "/v1/chat/completions", ""},
		{"POST", "/v1/chat/completions/", ""},
		{"POST", "/health", ""},
	} {
		var f policy.Fields
		r := ev.Evaluate(&policy.Request{Method: tc.method, Path: tc.path, Body: body}, &f)
		if r != nil {
			if m, _ := f.ByName("model"); m != "llama-3-8b" {
				t.Errorf("%s %s: model %q", tc.method, tc.path, m)
			}
			if len(p.LanesOf(r)) != 3 {
				t.Errorf("%s takes %d lanes; want 3", r.Name, len(p.LanesOf(r)))
			}
		} else if tc.route != "" {
			t.Errorf("%s %s: no route; want %s", tc.method, tc.path, tc.route)
		} else {
			continue
		}
		if r.Name != tc.route {
			t.Errorf("%s %s: route %s; want %q", tc.method, tc.path, r.Name, tc.route)
		}
	}
}

// Seats of the inference example: embeddings cost ceil(texts / 16)
// seats, at most 4, in the model lane (the gate caps a call's seats at the
// lane's limit), and one elsewhere; chat and completions a seat per 512
// tokens of max_tokens (1024 when absent), at most 8.
func TestSeatsOfTheEmbeddingsExample(t *testing.T) {
	data, err := os.ReadFile("../examples/inference/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	src := string(data)
	p := mustParse(t, src)
	ev := policy.NewEvaluator(p, "")
	for _, tc := range []struct {
		body  string
		seats int
	}{
		{`{"model":"e5","input":[` + strings.TrimSuffix(strings.Repeat(`"x",`, 40), ",") + `]}`, 3},
		{`{"model":"e5","input":[` + strings.TrimSuffix(strings.Repeat(`"x",`, 8), ",") + `]}`, 1},
		{`{"model":"e5","input":[` + strings.TrimSuffix(strings.Repeat(`"x",`, 200), ",") + `]}`, 4},
		{`{"model":"e5","input":"one string"}`, 1},
		{`{"model":"e5","input":[[1,2,3],[4,5]]}`, 1},
		{`{"model":"e5","input":[` + strings.Repeat(`[1,2],`, 32) + `[3]]}`, 3},
	} {
		var f policy.Fields
		r := ev.Evaluate(&policy.Request{Method: "POST", Path: "/v1/embeddings", Body: []byte(tc.body)}, &f)
		if r == nil {
			t.Fatal("embeddings did not match")
		}
		if got := r.SeatsIn("model", &f); got != tc.seats {
			t.Errorf("%.40s…: %d seats in model; want %d", tc.body, got, tc.seats)
		}
		if got := r.SeatsIn("cluster", &f); got != 1 {
			t.Errorf("%d seats in cluster; want 1", got)
		}
	}
	for body, seats := range map[string]int{
		`{"model":"m","messages":[]}`:                    2,
		`{"model":"m","messages":[],"max_tokens":100}`:   1,
		`{"model":"m","messages":[],"max_tokens":1025}`:  3,
		`{"model":"m","messages":[],"max_tokens":32000}`: 8,
	} {
		for _, path := range []string{"/v1/chat/completions", "/v1/completions"} {
			var f policy.Fields
			r := ev.Evaluate(&policy.Request{Method: "POST", Path: path, Body: []byte(body)}, &f)
			if got := r.SeatsIn("model", &f); got != seats {
				t.Errorf("%s %s: %d seats in model; want %d", path, body, got, seats)
			}
		}
	}
}

// costly is a policy whose cost is in the body: a lane keyed by the
// body's model, seats from max_tokens (a body_int with a default) and from
// the texts of an embeddings input.
const costly = `version: 1
name: c
routes:
  - name: chat
    method: POST
    path: {exact: /chat}
    fields:
      model: {body_string: model}
      max_tokens: {body_int: max_tokens, default: 1024}
    seats:
      model: {field: max_tokens, per: 512, max: 8}
  - name: embed
    method: POST
    path: {exact: /embed}
    fields:
      model: {body_string: model}
      inputs: {body_texts: input}
    seats:
      model: {field: inputs, per: 16, max: 4}
    unreadable_body: max
  - name: plain
    method: POST
    path: {exact: /plain}
    fields:
      n: {body_int: n}
identity: {resolver: tokens, scheme: Bearer, default_tier: free}
lanes:
  - {name: model, scope: key, key: model, routes: [chat, embed], limit: 16}
  - {name: all, scope: cluster, routes: [chat, embed, plain], limit: 16}
names:
  header_prefix: Capgate-
  refusal: {detail: "busy", error_code: busy}
  log_event: capgate_call
`

// The cost fields read the body as a Python API does: body_int an
// integer (or 512.0, or "512"), its default when absent or null, capped
// at MaxBodyInt; body_texts the texts of an input (token ids are one
// text). A body or a cost field capgate can't read as the API would makes
// the call unread (BodyKnown false): its seats its most, its model
// UnreadableValue; never the cheap call.
func TestEvaluateCostFields(t *testing.T) {
	p := mustParse(t, costly)
	ev := policy.NewEvaluator(p, "")
	if !p.Route("chat").CostFromBody() || !p.Route("embed").CostFromBody() || p.Route("plain").CostFromBody() {
		t.Error("CostFromBody: want chat and embed, not plain")
	}
	if p.Route("embed").UnreadableBody != policy.UnreadableMax || p.Route("chat").UnreadableBody != policy.UnreadableRefuse {
		t.Error("unreadable_body: want embed max, chat refuse (the default)")
	}
	for _, tc := range []struct {
		path, body string
		field      string // the int field
		n, seats   int
		model      string
		known      bool
	}{
		{"/chat", `{"model":"m","max_tokens":100}`, "max_tokens", 100, 1, "m", true},
		{"/chat", `{"model":"m","max_tokens":1025}`, "max_tokens", 1025, 3, "m", true},
		{"/chat", `{"model":"m"}`, "max_tokens", 1024, 2, "m", true},
		{"/chat", `{"model":"m","max_tokens":null}`, "max_tokens", 1024, 2, "m", true},
		{"/chat", `{"model":"m","max_tokens":512.0}`, "max_tokens", 512, 1, "m", true},
		{"/chat", `{"model":"m","max_tokens":"2048"}`, "max_tokens", 2048, 4, "m", true},
		{"/chat", `{"model":"m","max_tokens":99999999999999999999999999}`, "max_tokens", policy.MaxBodyInt, 8, "m", true},
		{"/chat", `{"model":"m","max_tokens":-5}`, "max_tokens", 0, 1, "m", true},
		{"/chat", ``, "max_tokens", 1024, 2, "", true},
		{"/chat", `[1]`, "max_tokens", 1024, 2, "", true},
		// What the API may read and capgate can't.
		{"/chat", `{"model":"m","max_tokens":5e2}`, "max_tokens", 0, 8, "m", false},
		{"/chat", `{"model":"m","max_tokens":"5 "}`, "max_tokens", 0, 8, "m", false},
		{"/chat", `{"model":"m","max_tokens":true}`, "max_tokens", 0, 8, "m", false},
		{"/chat", `{"model":"m","max_tokens":1,"temperature":NaN}`, "max_tokens", 0, 8, policy.UnreadableValue, false},
		{"/chat", `{"model":"m","max_tokens":Infinity}`, "max_tokens", 0, 8, policy.UnreadableValue, false},
		{"/chat", "\xff\xfe{\x00}\x00", "max_tokens", 0, 8, policy.UnreadableValue, false},
		{"/embed", `{"model":"e","input":"one text"}`, "inputs", 1, 1, "e", true},
		{"/embed", `{"model":"e","input":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18]}`, "inputs", 1, 1, "e", true},
		{"/embed", `{"model":"e","input":[[1,2],[3],[4]]}`, "inputs", 3, 1, "e", true},
		{"/embed", `{"model":"e","input":["a","b"]}`, "inputs", 2, 1, "e", true},
		{"/embed", `{"model":"e","input":[]}`, "inputs", 0, 1, "e", true},
		{"/embed", `{"model":"e","input":{"a":1}}`, "inputs", 0, 1, "e", true},
		{"/embed", `{"model":"e","input":["a"],"x":NaN}`, "inputs", 0, 4, policy.UnreadableValue, false},
		// A route whose cost is not in its body reads NaN as before: no
		// fields, predicates failing.
		{"/plain", `{"n":NaN}`, "n", 0, 1, "", true},
		{"/plain", `{"n":"x"}`, "n", 0, 1, "", true},
	} {
		req := policy.Request{Method: "POST", Path: tc.path, Body: []byte(tc.body)}
		if tc.body == "" {
			req.Body = nil
		}
		var f policy.Fields
		r := ev.Evaluate(&req, &f)
		if r == nil {
			t.Fatalf("%s %s: no route", tc.path, tc.body)
		}
		n, _ := f.ByName(tc.field)
		model, _ := f.ByName("model")
		lane := "model"
		if r.Name == "plain" {
			lane = "all"
		}
		if n != itoa(tc.n) || r.SeatsIn(lane, &f) != tc.seats || model != tc.model || f.BodyKnown() != tc.known {
			t.Errorf("%s %q: %s %s, seats %d, model %q, known %v; want %d, %d, %q, %v", tc.path, tc.body, tc.field, n,
				r.SeatsIn(lane, &f), model, f.BodyKnown(), tc.n, tc.seats, tc.model, tc.known)
		}
	}
	// A call the decision service is told of without max_tokens costs
	// what the policy says such a call costs: the field's default.
	nf := policy.NewFields(p.Route("chat"))
	if n, _ := nf.ByName("max_tokens"); n != "1024" || p.Route("chat").SeatsIn("model", &nf) != 2 {
		t.Errorf("NewFields: max_tokens %s, seats %d; want the default 1024, 2 seats", n, p.Route("chat").SeatsIn("model", &nf))
	}
	// An unreadable body (past --max-body-bytes, compressed) likewise.
	var f policy.Fields
	r := ev.Evaluate(&policy.Request{Method: "POST", Path: "/chat", BodyUnreadable: true}, &f)
	if m, _ := f.ByName("model"); r.SeatsIn("model", &f) != 8 || m != policy.UnreadableValue || f.BodyKnown() {
		t.Errorf("an unreadable body: seats %d, model %q; want 8 under %s", r.SeatsIn("model", &f), m, policy.UnreadableValue)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
