package http_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/answer"
	capgatehttp "github.com/capgate/capgate/http"
	"github.com/capgate/capgate/identity"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/mock"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
)

// The gateway under a policy other than OCL: the inference example
// (examples/inference/policy.yaml), whose routes, lanes and names are
// none of OCL's.

// inferencePolicy loads the inference example.
func inferencePolicy(t testing.TB) *policy.Policy {
	t.Helper()
	p, err := policy.Load("../examples/inference/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// unreadable is a request body that fails the test if it is read.
type unreadable struct{ t *testing.T }

func (b unreadable) Read([]byte) (int, error) {
	b.t.Error("the body was read")
	return 0, errors.New("read")
}
func (unreadable) Close() error { return nil }

func TestClassifierInferencePolicy(t *testing.T) {
	p := inferencePolicy(t)
	const chat = `{"model":"llama-3-70b","messages":[{"role":"user","content":"hi"}]}`
	tests := []struct {
		name, method, target, body string
		prefix                     string
		route, model               string // route "": not heavy
	}{
		{name: "chat", method: "POST", target: "/v1/chat/completions", body: chat, route: "chat", model: "llama-3-70b"},
		{name: "completions", method: "POST", target: "/v1/completions", body: `{"model":"m1","prompt":"x"}`, route: "completions", model: "m1"},
		{name: "embeddings", method: "POST", target: "/v1/embeddings", body: `{"input":"x","model":"e5"}`, route: "embeddings", model: "e5"},
		{name: "the last model wins", method: "POST", target: "/v1/embeddings", body: `{"model":"a","model":"b"}`, route: "embeddings", model: "b"},
		{name: "an escaped model", method: "POST", target: "/v1/chat/completions", body: `{"model":"ll\u0061ma"}`, route: "chat", model: "llama"},
		{name: "a query", method: "POST", target: "/v1/chat/completions?stream=true", body: chat, route: "chat", model: "llama-3-70b"},
		{name: "no model: still heavy", method: "POST", target: "/v1/chat/completions", body: `{"messages":[]}`, route: "chat"},
		{name: "model not a string", method: "POST", target: "/v1/chat/completions", body: `{"model":7}`, route: "chat"},
		{name: "not JSON: still heavy, counted under (unreadable)", method: "POST", target: "/v1/completions", body: `model=m1`, route: "completions", model: "(unreadable)"},
		{name: "no body", method: "POST", target: "/v1/completions", route: "completions"},
		{name: "post in lower case", method: "post", target: "/v1/embeddings", body: `{"model":"e5"}`, route: "embeddings", model: "e5"},
		{name: "a GET of a route's path", method: "GET", target: "/v1/chat/completions", body: chat},
		{name: "exact path: no trailing slash", method: "POST", target: "/v1/chat/completions/", body: chat},
		{name: "another path", method: "POST", target: "/v1/chat", body: chat},
		{name: "an OCL call", method: "POST", target: "/concepts/$match/?semantic=true", body: `{"rows":[1]}`},
		{name: "prefix", method: "POST", target: "/llm/v1/chat/completions", body: chat, prefix: "/llm", route: "chat", model: "llama-3-70b"},
		{name: "prefix missing", method: "POST", target: "/v1/chat/completions", body: chat, prefix: "/llm"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &capgatehttp.Classifier{PathPrefix: tt.prefix}
			c.SetPolicy(p)
			r := httptest.NewRequest(tt.method, tt.target, strings.NewReader(tt.body))
			call, heavy := c.Classify(r)
			route, model := "", ""
			if heavy {
				if call.Route == nil || p.Route(call.Route.Name) != call.Route {
					t.Fatalf("heavy with route %v, not one of the policy's", call.Route)
				}
				route = call.Route.Name
				var ok bool
				if model, ok = call.Fields.ByName("model"); !ok {
					t.Errorf("route %s has no model field", route)
				}
			}
			if heavy != (tt.route != "") || route != tt.route || model != tt.model {
				t.Errorf("Classify = route %q model %q heavy %v; want route %q model %q", route, model, heavy, tt.route, tt.model)
			}
			if b, err := io.ReadAll(r.Body); err != nil || string(b) != tt.body {
				t.Errorf("body after Classify = %q, %v; want %q", b, err, tt.body)
			}
			r.Body.Close()
		})
	}
}

// A light request's body is never read: no route could match it by its
// method and path, so the gateway leaves it to the API untouched.
func TestClassifierInferenceLeavesLightBodiesAlone(t *testing.T) {
	c := &capgatehttp.Classifier{}
	c.SetPolicy(inferencePolicy(t))
	for _, tc := range []struct{ method, target string }{
		{"GET", "/v1/models"},
		{"GET", "/v1/models/llama-3-70b"},
		{"POST", "/v1/models"},
		{"GET", "/v1/chat/completions"},
		{"POST", "/health"},
	} {
		r := httptest.NewRequest(tc.method, tc.target, nil)
		body := unreadable{t}
		r.Body = body
		capgatehttp.NormalizeRequest(r)
		if _, maybe := c.HeavyPath(r); maybe {
			t.Errorf("%s %s: HeavyPath = true", tc.method, tc.target)
		}
		if call, heavy := c.Classify(r); heavy || call.Route != nil {
			t.Errorf("%s %s: Classify = %v, heavy; want light", tc.method, tc.target, call.Route.Name)
		}
		if r.Body != body {
			t.Errorf("%s %s: the body was replaced", tc.method, tc.target)
		}
	}
}

// SetPolicy switches the policy a Classifier evaluates from the next
// request on; the zero Classifier evaluates the built-in one.
func TestClassifierSetPolicy(t *testing.T) {
	inf := inferencePolicy(t)
	const match, chat = "/concepts/$match/?semantic=true", "/v1/chat/completions"
	classify := func(c *capgatehttp.Classifier, target, body string) string {
		call, heavy := c.Classify(httptest.NewRequest("POST", target, strings.NewReader(body)))
		if !heavy {
			return ""
		}
		return call.Route.Name
	}
	c := &capgatehttp.Classifier{}
	if c.Policy() != policy.OCL() {
		t.Fatalf("the zero Classifier's policy is %q; want the built-in one", c.Policy().Name)
	}
	if got := classify(c, match, `{"rows":[1]}`); got != "match" {
		t.Errorf("OCL $match = %q; want match", got)
	}
	if got := classify(c, chat, `{"model":"m"}`); got != "" {
		t.Errorf("chat under OCL = %q; want light", got)
	}
	c.SetPolicy(inf)
	if c.Policy() != inf {
		t.Fatalf("Policy after SetPolicy = %q", c.Policy().Name)
	}
	if got := classify(c, match, `{"rows":[1]}`); got != "" {
		t.Errorf("$match under inference = %q; want light", got)
	}
	if got := classify(c, chat, `{"model":"m"}`); got != "chat" {
		t.Errorf("chat under inference = %q; want chat", got)
	}
	c.SetPolicy(policy.OCL())
	if got := classify(c, match, `{"rows":[1]}`); got != "match" {
		t.Errorf("$match back under OCL = %q; want match", got)
	}

	// While in use: every answer is one policy's or the other's.
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 200 {
				got := classify(c, chat, `{"model":"m"}`)
				if got != "" && got != "chat" {
					t.Errorf("chat = %q", got)
				}
			}
		})
	}
	for i := range 200 {
		if i%2 == 0 {
			c.SetPolicy(inf)
		} else {
			c.SetPolicy(policy.OCL())
		}
	}
	wg.Wait()
}

// inferenceEnv is a gateway under the inference policy in enforce/all, its
// users pam (free) and pro (tier pro), the model lane at 2 seats
// (lanes.model: two calls of up to 512 tokens fill a model), with cfg
// changing the limits.
func inferenceEnv(t *testing.T, cfg func(*settings.Config)) *env {
	t.Helper()
	ids, err := identity.NewTokens([]identity.TokenEntry{
		{Token: "t-pam", Username: "pam"},
		{Token: "t-pro", Username: "priya", AuthGroups: []string{"pro"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return newPolicyEnv(t, inferencePolicy(t), func(c *settings.Config) {
		c.Mode, c.EnforceFor = settings.ModeEnforce, settings.EnforceAll
		setNumber(c, "lanes.model", 2)
		if cfg != nil {
			cfg(c)
		}
	}, func(c *capgatehttp.GatewayConfig) { c.Identify = ids })
}

const chatBody = `{"model":"llama-3-70b","messages":[{"role":"user","content":"hi"}],"max_tokens":256}`

func TestGatewayInferencePolicyHeaders(t *testing.T) {
	e := inferenceEnv(t, nil)
	r := e.do(t.Context(), "POST", "/v1/chat/completions", chatBody, "Authorization", "Bearer t-pro",
		"Origin", "https://app.example")
	if r.StatusCode != 200 {
		t.Fatalf("status %d %s", r.StatusCode, r.Body)
	}
	want := map[string]string{
		"Capgate-Decision":  "admitted",
		"Capgate-Limit":     "8",
		"Capgate-In-Flight": "1",
		"Capgate-Tier":      "pro",
		// The lane with the least room: the model's (2, one taken).
		"Ratelimit-Policy": `"model";q=2;qu="concurrent-requests"`,
		"Ratelimit":        `"model";r=1`,
	}
	for k, v := range want {
		if got := r.Header.Get(k); got != v {
			t.Errorf("%s = %q; want %q", k, got, v)
		}
	}
	for k := range r.Header {
		if strings.HasPrefix(k, "X-Ocl-") {
			t.Errorf("an OCL header under the inference policy: %s", k)
		}
	}
	if got, want := r.Header.Get("Access-Control-Expose-Headers"), "X-Total-Count, "+
		strings.Join(append(answer.ExposedHeaders(inferencePolicy(t)), "RateLimit-Policy", "RateLimit"), ", "); got != want {
		t.Errorf("expose list %q\nwant %q", got, want)
	}
	wantList := []string{"Capgate-Decision", "Capgate-Limit", "Capgate-In-Flight", "Capgate-Tier",
		"Capgate-Suggested-Concurrency", "Capgate-Suggested-Spacing-Ms", "Capgate-Waited-Ms", "Retry-After",
		"Retry-After-Ms", "X-Should-Retry"}
	if got := answer.ExposedHeaders(inferencePolicy(t)); strings.Join(got, ",") != strings.Join(wantList, ",") {
		t.Errorf("ExposedHeaders = %q; want %q", got, wantList)
	}

	// The line: the policy's event and route key, the model field, each
	// lane under its default log keys.
	l := e.sink.Wait(t, 1, waitLimit)[0]
	for k, v := range map[string]string{"event": "capgate_call", "route": "chat", "model": "llama-3-70b",
		"decision": "admitted", "tier": "pro", "user_id": "priya",
		"cluster_in_flight": "1", "cluster_limit": "8", "model_in_flight": "1", "model_limit": "2",
		"user_in_flight": "1", "user_limit": "3"} {
		if got := jsonText(l[k]); got != v {
			t.Errorf("line %s = %s; want %s (line %v)", k, got, v, l)
		}
	}
	for _, k := range []string{"endpoint", "rows", "semantic", "in_flight", "limit"} {
		if _, ok := l[k]; ok {
			t.Errorf("line has OCL's %s: %v", k, l)
		}
	}
	if m := e.inFlight(); len(m) != 0 {
		t.Errorf("leases left: %v", m)
	}
}

// A light request (GET /v1/models) passes untouched: no capacity header,
// no line.
func TestGatewayInferencePolicyLightPasses(t *testing.T) {
	e := inferenceEnv(t, func(c *settings.Config) { setNumber(c, "lanes.user.free", 0) })
	r := e.do(t.Context(), "GET", "/v1/models", "", "Authorization", "Bearer t-pam")
	if r.StatusCode != 200 || len(policyHeaders(r.Header)) != 0 {
		t.Fatalf("GET /v1/models = %d %v; want 200 and no capacity header", r.StatusCode, policyHeaders(r.Header))
	}
	if reqs := e.up.requests(); len(reqs) != 1 || reqs[0].Path != "/v1/models" {
		t.Errorf("upstream got %v", reqs)
	}
	if n := len(e.sink.All(t)); n != 0 {
		t.Errorf("%d log lines for a light call", n)
	}
}

// policyHeaders returns the response's Capgate-* and RateLimit headers and
// Retry-After.
func policyHeaders(h http.Header) map[string]string {
	m := map[string]string{}
	for k := range h {
		if strings.HasPrefix(k, "Capgate-") || strings.HasPrefix(k, "Ratelimit") || k == "Retry-After" {
			m[k] = h.Get(k)
		}
	}
	return m
}

// openAIRefusal is the inference example's 429 body (OpenAI's error
// shape) of a refusal of Retry-After ra.
func openAIRefusal(ra string) string {
	return `{"error": {"message": "The API is busy. Please retry in ` + ra +
		` seconds.", "type": "requests", "param": null, "code": "capacity_exceeded"}}`
}

func TestGatewayInferencePolicyRefusal(t *testing.T) {
	// A paused lane (lanes.user.free 0).
	e := inferenceEnv(t, func(c *settings.Config) { setNumber(c, "lanes.user.free", 0) })
	r := e.do(t.Context(), "POST", "/v1/chat/completions", chatBody, "Authorization", "Bearer t-pam")
	if r.StatusCode != 429 || len(e.up.requests()) != 0 {
		t.Fatalf("status %d, %d upstream requests; want 429 and none", r.StatusCode, len(e.up.requests()))
	}
	// In OpenAI's error shape; a paused lane: no retry can succeed.
	ra := r.Header.Get("Retry-After")
	if want := openAIRefusal(ra); ra == "" || string(r.Body) != want {
		t.Errorf("429 body %s (Retry-After %q)\nwant %s", r.Body, ra, want)
	}
	if r.Header.Get("Capgate-Decision") != "refused" || r.Header.Get("Capgate-Tier") != "free" ||
		r.Header.Get("Content-Type") != "application/json" || r.Header.Get("Retry-After-Ms") != ra+"000" ||
		r.Header.Get("X-Should-Retry") != "false" || r.Header.Get("Ratelimit") != `"user";r=0;t=`+ra {
		t.Errorf("429 headers %v", r.Header)
	}
	l := e.sink.Wait(t, 1, waitLimit)[0]
	if l["event"] != "capgate_call" || l["decision"] != "refused" || l["scope"] != "user" || l["route"] != "chat" {
		t.Errorf("line %v", l)
	}

	// A full lane: the model's (2) with the user's (pro: 3) room to spare.
	e = inferenceEnv(t, nil)
	var held []<-chan response
	for range 2 {
		held = append(held, e.async(t.Context(), "POST", "/v1/chat/completions", chatBody,
			"Authorization", "Bearer t-pro", "X-Test-Do", "hold"))
		e.up.waitEntered(t)
	}
	r = e.do(t.Context(), "POST", "/v1/completions", `{"model":"llama-3-70b"}`, "Authorization", "Bearer t-pro")
	ra = r.Header.Get("Retry-After")
	if want := openAIRefusal(ra); r.StatusCode != 429 || string(r.Body) != want {
		t.Errorf("429 %d body %s\nwant %s", r.StatusCode, r.Body, want)
	}
	if r.Header.Get("X-Should-Retry") != "true" || r.Header.Get("Ratelimit") != `"model";r=0;t=`+ra {
		t.Errorf("429 headers %v", r.Header)
	}
	if n, err := strconv.Atoi(ra); err != nil || n < 1 {
		t.Errorf("Retry-After %q", ra)
	}
	if got := r.Header.Get("Capgate-In-Flight"); got != "2" {
		t.Errorf("Capgate-In-Flight = %q; want 2", got)
	}
	// Another model has room.
	if r := e.do(t.Context(), "POST", "/v1/embeddings", `{"model":"e5"}`, "Authorization", "Bearer t-pro"); r.StatusCode != 200 {
		t.Errorf("another model: status %d %s", r.StatusCode, r.Body)
	}
	e.up.release()
	for _, ch := range held {
		if r := recv(t, ch); r.StatusCode != 200 {
			t.Errorf("held call: %d", r.StatusCode)
		}
	}
}

// The client-metadata header the policy names (Capgate-Client) says the
// client handles refusals: with enforce_for aware, only such a call is
// refused; OCL's X-OCL-Event-Metadata means nothing here.
func TestGatewayInferencePolicyAwareClient(t *testing.T) {
	e := inferenceEnv(t, func(c *settings.Config) {
		c.EnforceFor = settings.EnforceAware
		setNumber(c, "lanes.user.free", 0)
	})
	for _, tc := range []struct {
		hdr, value string
		want       int
	}{
		{"X-OCL-Event-Metadata", `{"capacity_aware":true}`, 200},
		{"Capgate-Client", `{"capacity_aware":true}`, 429},
		{"Capgate-Client", `{"capacity_aware":"no"}`, 200},
	} {
		r := e.do(t.Context(), "POST", "/v1/chat/completions", chatBody, "Authorization", "Bearer t-pam", tc.hdr, tc.value)
		if r.StatusCode != tc.want {
			t.Errorf("%s: %s: status %d; want %d", tc.hdr, tc.value, r.StatusCode, tc.want)
		}
	}
}

// A policy whose routes read request headers: a Connection header naming
// one of them is refused (400) as one naming a header capgate reads
// itself, since the proxy would drop it after capgate read it.
func TestConnectionNamingAHeaderThePolicyReadsIs400(t *testing.T) {
	p, err := policy.Parse("tenants.yaml", []byte(`version: 1
name: tenants
routes:
  - name: generate
    method: POST
    path: {exact: /v1/generate}
    when:
      - header_present: X-Priority
    fields:
      tenant: {header: X-Tenant}
identity:
  resolver: tokens
  scheme: Bearer
  default_tier: free
lanes:
  - name: tenant
    scope: key
    key: tenant
    routes: [generate]
    limit: 1
names:
  header_prefix: Capgate-
  refusal:
    detail: "Busy; retry in {retry_after} seconds."
    error_code: busy
  log_event: capgate_call
`))
	if err != nil {
		t.Fatal(err)
	}
	ids, err := identity.NewTokens([]identity.TokenEntry{{Token: "t-pam", Username: "pam"}})
	if err != nil {
		t.Fatal(err)
	}
	e := newPolicyEnv(t, p, func(c *settings.Config) {
		c.Mode, c.EnforceFor = settings.ModeEnforce, settings.EnforceAll
	}, func(c *capgatehttp.GatewayConfig) { c.Identify = ids })
	for _, named := range []string{"X-Tenant", "x-priority", "keep-alive, X-Tenant"} {
		r := e.do(t.Context(), "POST", "/v1/generate", `{}`, "Authorization", "Bearer t-pam",
			"X-Priority", "1", "X-Tenant", "acme", "Connection", named)
		if r.StatusCode != http.StatusBadRequest {
			t.Errorf("Connection: %s: status %d; want 400", named, r.StatusCode)
		}
	}
	if n := len(e.up.requests()); n != 0 {
		t.Errorf("%d requests reached the upstream", n)
	}
	// A header no route reads may still be named, and is dropped.
	r := e.do(t.Context(), "POST", "/v1/generate", `{}`, "Authorization", "Bearer t-pam",
		"X-Priority", "1", "X-Tenant", "acme", "Connection", "X-Drop-Me", "X-Drop-Me", "1")
	if reqs := e.up.requests(); r.StatusCode != 200 || len(reqs) != 1 || reqs[0].Header.Get("X-Drop-Me") != "" {
		t.Errorf("Connection: X-Drop-Me: status %d, upstream %v", r.StatusCode, reqs)
	}
	// The route reads the headers: the tenant keys the lane, and without
	// X-Priority the call is light.
	held := e.async(t.Context(), "POST", "/v1/generate", `{}`, "Authorization", "Bearer t-pam",
		"X-Priority", "1", "X-Tenant", "acme", "X-Test-Do", "hold")
	e.up.waitEntered(t)
	for _, tc := range []struct {
		hdr  []string
		want int
	}{
		{[]string{"X-Priority", "1", "X-Tenant", "acme"}, 429},
		{[]string{"X-Priority", "1", "X-Tenant", "globex"}, 200},
		{[]string{"X-Tenant", "acme"}, 200},
	} {
		r := e.do(t.Context(), "POST", "/v1/generate", `{}`, append([]string{"Authorization", "Bearer t-pam"}, tc.hdr...)...)
		if r.StatusCode != tc.want {
			t.Errorf("%v: status %d; want %d", tc.hdr, r.StatusCode, tc.want)
		}
	}
	e.up.release()
	recv(t, held)

	// Under OCL, whose routes read no header, naming X-Tenant is fine.
	o := newEnv(t, nil, nil)
	if r := o.do(t.Context(), "POST", semanticMatch, oneRow, "Authorization", "Token t-pam",
		"Connection", "X-Tenant", "X-Tenant", "acme"); r.StatusCode != 200 {
		t.Errorf("OCL, Connection: X-Tenant: status %d; want 200", r.StatusCode)
	}
}

// The middleware alone, as a library user wires it: a gate under the
// inference policy and a Classifier set to it. Its answers carry the
// policy's names. (Without WithClassifier it classifies by the built-in
// policy, whatever the gate's: the chat call then passes ungated.)
func TestMiddlewareInferencePolicy(t *testing.T) {
	p := inferencePolicy(t)
	cfg := settings.Default(p, settings.ModeEnforce)
	cfg.EnforceFor = settings.EnforceAll
	setNumber(&cfg, "lanes.user.free", 0)
	sink := &mock.Sink{}
	gate, err := capgate.NewGate(memory.New(nil), settings.NewFixed(cfg), sink, "t")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := identity.NewTokens([]identity.TokenEntry{{Token: "t-pam", Username: "pam"}})
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran++ })
	c := &capgatehttp.Classifier{}
	c.SetPolicy(p)
	m, err := capgatehttp.NewMiddleware(next, gate, ids, capgatehttp.WithClassifier(c))
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(chatBody))
	r.Header.Set("Authorization", "Bearer t-pam")
	r.Header.Set("Origin", "https://app.example")
	w := httptest.NewRecorder()
	m.ServeHTTP(w, r)
	want := openAIRefusal("120")
	if w.Code != 429 || w.Body.String() != want || ran != 0 {
		t.Fatalf("got %d %s (handler ran %d times)\nwant 429 %s", w.Code, w.Body, ran, want)
	}
	for k, v := range map[string]string{"Capgate-Decision": "refused", "Capgate-Tier": "free", "Capgate-Limit": "8",
		"Capgate-In-Flight": "0", "Retry-After": "120", "Retry-After-Ms": "120000", "X-Should-Retry": "false",
		"Ratelimit": `"user";r=0;t=120`, "Vary": "Origin",
		"Access-Control-Allow-Origin": "https://app.example"} {
		if got := w.Header().Get(k); got != v {
			t.Errorf("%s = %q; want %q", k, got, v)
		}
	}
	if got := w.Header().Get("Access-Control-Expose-Headers"); !strings.HasPrefix(got, "Capgate-Decision, Capgate-Limit, ") {
		t.Errorf("expose list %q", got)
	}
	l := sink.Wait(t, 1, waitLimit)[0]
	if l["event"] != "capgate_call" || l["route"] != "chat" || l["model"] != "llama-3-70b" || l["decision"] != "refused" {
		t.Errorf("line %v", l)
	}

	// Without WithClassifier the middleware classifies by the policy of
	// its gate's config: this call is gated too, never passed ungated.
	m, err = capgatehttp.NewMiddleware(next, gate, ids)
	if err != nil {
		t.Fatal(err)
	}
	r = httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(chatBody))
	r.Header.Set("Authorization", "Bearer t-pam")
	w = httptest.NewRecorder()
	m.ServeHTTP(w, r)
	if w.Code != 429 || ran != 0 || w.Header().Get("Capgate-Decision") != "refused" {
		t.Errorf("without WithClassifier: %d, handler ran %d times, decision %q; want the gate's policy's 429", w.Code, ran, w.Header().Get("Capgate-Decision"))
	}
	// A light path of that policy passes untouched.
	r = httptest.NewRequest("GET", "/v1/models", nil)
	w = httptest.NewRecorder()
	m.ServeHTTP(w, r)
	if w.Code != 200 || ran != 1 || w.Header().Get("Capgate-Decision") != "" {
		t.Errorf("a light call: %d, handler ran %d times, decision %q; want 200 untouched", w.Code, ran, w.Header().Get("Capgate-Decision"))
	}
}

// embeddingsBody is an embeddings call of n texts for model e5.
func embeddingsBody(n int) string {
	return `{"model":"e5","input":[` + strings.TrimSuffix(strings.Repeat(`"some text",`, n), ",") + `]}`
}

// Seats: an embeddings call costs ceil(len(input) / 16) seats in the model
// lane, at most 4 and never more than the lane's limit (2). One of 40
// texts takes both of e5's seats, so a chat call to e5 is refused while it
// runs; one of 8 texts takes one, leaving room for the chat call. Every
// count the call shows is in seats: the headers, the line, the store.
func TestGatewayInferenceEmbeddingsSeats(t *testing.T) {
	for _, tc := range []struct {
		texts, seats int
		chat         int // the chat call's status while it runs
	}{
		{texts: 40, seats: 2, chat: 429},
		{texts: 8, seats: 1, chat: 200},
	} {
		t.Run(strconv.Itoa(tc.texts)+" texts", func(t *testing.T) {
			e := inferenceEnv(t, nil)
			held := e.async(t.Context(), "POST", "/v1/embeddings", embeddingsBody(tc.texts),
				"Authorization", "Bearer t-pro", "X-Test-Do", "hold")
			e.up.waitEntered(t)
			m := e.inFlight()
			if m[e.prefix+":model:e5"] != tc.seats || m[e.prefix+":cluster"] != 1 || m[e.prefix+":user:priya"] != 1 {
				t.Fatalf("store counts %v; want %d seats in model:e5 and 1 in cluster and user:priya", m, tc.seats)
			}
			chat := `{"model":"e5","messages":[],"max_tokens":100}`
			r := e.do(t.Context(), "POST", "/v1/chat/completions", chat, "Authorization", "Bearer t-pro")
			if r.StatusCode != tc.chat {
				t.Fatalf("chat to e5 beside it: %d %s; want %d", r.StatusCode, r.Body, tc.chat)
			}
			if tc.chat == 429 {
				want := `"model";r=0;t=` + r.Header.Get("Retry-After")
				if string(r.Body) != openAIRefusal(r.Header.Get("Retry-After")) || r.Header.Get("Ratelimit") != want {
					t.Errorf("refusal %s, RateLimit %q; want the policy's, %s", r.Body, r.Header.Get("Ratelimit"), want)
				}
			} else if got := r.Header.Get("Ratelimit"); got != `"model";r=0` {
				// Its own seat and the embeddings call's: e5 is full now.
				t.Errorf("RateLimit %q; want \"model\";r=0", got)
			}
			e.up.release()
			emb := recv(t, held)
			if emb.StatusCode != 200 {
				t.Fatalf("embeddings: %d %s", emb.StatusCode, emb.Body)
			}
			if got, want := emb.Header.Get("Ratelimit"), `"model";r=`+strconv.Itoa(2-tc.seats); got != want {
				t.Errorf("embeddings RateLimit %q; want %q", got, want)
			}
			var line map[string]any
			for _, l := range e.sink.Wait(t, 2, waitLimit) {
				if l["route"] == "embeddings" {
					line = l
				}
			}
			if got := jsonText(line["model_in_flight"]); got != strconv.Itoa(tc.seats) {
				t.Errorf("line model_in_flight %s; want %d (line %v)", got, tc.seats, line)
			}
			if got := jsonText(line["inputs"]); got != strconv.Itoa(tc.texts) {
				t.Errorf("line inputs %s; want %d", got, tc.texts)
			}
			seats, ok := line["seats"]
			if tc.seats == 1 && ok {
				t.Errorf("line has seats %v for a call of one seat in each lane", seats)
			}
			if tc.seats > 1 && jsonText(seats) != `{"model":2}` {
				t.Errorf("line seats %s; want {\"model\":2}", jsonText(seats))
			}
			if m := e.inFlight(); len(m) != 0 {
				t.Errorf("leases left: %v", m)
			}
		})
	}
}
