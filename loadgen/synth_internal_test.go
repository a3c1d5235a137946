package loadgen

import (
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/capgate/capgate/client"
	"github.com/capgate/capgate/policy"
)

func inferencePolicy(t *testing.T) *policy.Policy {
	t.Helper()
	p, err := policy.Load("../examples/inference/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// decodeBody decodes a synthesized call's JSON body.
func decodeBody(t *testing.T, spec callSpec) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(spec.body, &m); err != nil {
		t.Fatalf("%s %s: body %q: %v", spec.method, spec.target, spec.body, err)
	}
	return m
}

// The inference policy's calls: POST to each route's path, a JSON body
// with a model, small about twice as often as large (so the model lane
// keyed by it fills up), chat's and completions' max_tokens, embeddings'
// texts, the lanes every call takes, one unit each.
func TestSynthInference(t *testing.T) {
	p := inferencePolicy(t)
	s, err := newSynth(p, nil, [2]int{10, 50})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	models := map[string]int{}
	const n = 3000
	for i := range n {
		r := p.Routes[i%len(p.Routes)]
		spec := s.call(r, rng, false)
		if spec.method != http.MethodPost || spec.target != r.Path.Value || spec.kind != r.LogName || spec.units != 1 {
			t.Fatalf("route %s: %s %s kind %s units %d", r.Name, spec.method, spec.target, spec.kind, spec.units)
		}
		if want := []string{"cluster", "model", "user"}; !slices.Equal(spec.call.Lanes, want) || spec.call.Class != client.Bulk {
			t.Fatalf("route %s: lanes %v class %v, want %v, bulk", r.Name, spec.call.Lanes, spec.call.Class, want)
		}
		m := decodeBody(t, spec)
		if r.Name == "embeddings" {
			// Its texts, whose number gives its seats in the model lane:
			// as many as a bulk call's rows.
			in, ok := m["input"].([]any)
			if len(m) != 2 || !ok || len(in) < 10 || len(in) > 50 {
				t.Fatalf("route %s: body %s, want the model and 10 to 50 inputs", r.Name, spec.body)
			}
		} else if mt, ok := m["max_tokens"].(float64); len(m) != 2 || !ok || !slices.Contains([]float64{256, 512, 1024, 2048}, mt) {
			t.Fatalf("route %s: body %s, want the model and max_tokens", r.Name, spec.body)
		}
		models[m["model"].(string)]++
	}
	if len(models) != 2 || models["small"] < n*6/10 || models["small"] > n*73/100 {
		t.Errorf("models %v over %d calls; want small about 2/3, large the rest", models, n)
	}
	// The fixed workload's call: the first route, the first model.
	spec := s.call(p.Routes[0], rng, true)
	if spec.target != "/v1/chat/completions" || string(spec.body) != `{"model":"small","max_tokens":256}` {
		t.Errorf("fixed call: %s %s", spec.target, spec.body)
	}
}

// kitchenYAML has a route of each path kind and every predicate and field
// kind; its lanes key by a header field and a path segment, one takes
// only flagged calls, one keeps room for a class.
const kitchenYAML = `version: 1
name: kitchen
routes:
  - name: batch
    method: POST
    path: {prefix: /batch/}
    when:
      - any:
          - query_truthy: fast
          - header_present: X-Urgent
      - body_non_empty_array: items
      - body_truthy: q
    fields:
      fast: {query_truthy: fast}
      items: {body_array_len: items}
      tenant: {header: X-Tenant}
    units: items
  - name: infer
    method: POST
    path: {pattern: "/models/{name}/infer"}
    when:
      - body_non_empty_string: prompt
    fields:
      model: {path_segment: name}
      style: {body_string: style}
  - name: lookup
    method: GET
    path: {exact: /lookup/, trailing_slash: optional}
    fields:
      tenant: {header: X-Tenant}
classes:
  - name: quick
    routes: [batch]
    field: items
    equals: 1
identity:
  resolver: tokens
  scheme: Token
  default_tier: basic
lanes:
  - name: all
    scope: cluster
    routes: [batch, infer, lookup]
    limit: 4
    reserve: {class: quick, value: 1}
  - name: fast
    scope: cluster
    routes: [batch]
    only_if: fast
    limit: 2
  - name: model
    scope: key
    key: model
    routes: [infer]
    limit: 1
  - name: tenant
    scope: key
    key: tenant
    routes: [batch, lookup]
    limit: 2
names:
  header_prefix: Kitchen-
  refusal:
    detail: "Busy, retry in {retry_after} s."
    error_code: busy
  log_event: kitchen_call
`

// Every kind of route, predicate and field: each call synthesized is one
// its route matches (the policy reads it back as that route), with the
// lanes its fields give it.
func TestSynthEveryKind(t *testing.T) {
	p, err := policy.Parse("kitchen.yaml", []byte(kitchenYAML))
	if err != nil {
		t.Fatal(err)
	}
	s, err := newSynth(p, map[string][]string{"model": {"m1", "m2"}, "tenant": {"acme", "globex"}}, [2]int{1, 3})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(2, 2))
	seen := map[string]bool{}
	for range 400 {
		for _, r := range p.Routes {
			spec := s.call(r, rng, false)
			if spec.kind != r.Name {
				t.Fatalf("a call of %s is read as %s: %s %s %v %s", r.Name, spec.kind, spec.method, spec.target, spec.header, spec.body)
			}
			u, err := url.Parse(spec.target)
			if err != nil {
				t.Fatal(err)
			}
			switch r.Name {
			case "batch":
				m := decodeBody(t, spec)
				items := len(m["items"].([]any))
				fast := u.Query().Get("fast") == "true"
				if !strings.HasPrefix(u.Path, "/batch/") || items < 1 || items > 3 || spec.units != items || m["q"] == "" {
					t.Fatalf("batch: %s %s", spec.target, spec.body)
				}
				if !fast && spec.header.Get("X-Urgent") == "" {
					t.Fatalf("batch: neither alternative of any holds: %s %v", spec.target, spec.header)
				}
				if got := slices.Contains(spec.call.Lanes, "fast"); got != fast {
					t.Fatalf("batch fast=%t: lanes %v", fast, spec.call.Lanes)
				}
				if (items == 1) != (spec.call.Class == client.Interactive) {
					t.Fatalf("batch of %d items: class %v; want interactive for the quick class only", items, spec.call.Class)
				}
				seen["fast"+u.Query().Get("fast")] = true
				seen["tenant "+spec.header.Get("X-Tenant")] = true
			case "infer":
				m := decodeBody(t, spec)
				seg := strings.Split(u.Path, "/")
				if len(seg) != 4 || seg[1] != "models" || seg[3] != "infer" || m["prompt"] == "" {
					t.Fatalf("infer: %s %s", spec.target, spec.body)
				}
				if !slices.Equal(spec.call.Lanes, []string{"all", "model"}) {
					t.Fatalf("infer: lanes %v", spec.call.Lanes)
				}
				seen["model "+seg[2]] = true
				seen["style "+m["style"].(string)] = true
			case "lookup":
				if spec.method != http.MethodGet || spec.target != "/lookup/" || spec.body != nil {
					t.Fatalf("lookup: %s %s %q", spec.method, spec.target, spec.body)
				}
			}
		}
	}
	for _, want := range []string{"fasttrue", "fast", "tenant acme", "tenant globex", "model m1", "model m2", "style style-1", "style style-3"} {
		if !seen[want] {
			t.Errorf("no call had %s; seen %v", want, seen)
		}
	}
	// The fixed call: every flag set, the first value of each field, the
	// shortest array, the first alternative of any.
	spec := s.call(p.Routes[0], rng, true)
	if spec.target != "/batch/loadgen?fast=true" || spec.header.Get("X-Tenant") != "acme" || spec.header.Get("X-Urgent") != "" ||
		string(spec.body) != `{"items":["item 0"],"q":"loadgen"}` {
		t.Errorf("fixed call: %s %v %s", spec.target, spec.header, spec.body)
	}
}

// The Mapper's calls are what they always were: the same paths, bodies,
// classes and lanes under the built-in policy.
func TestMapperCallsUnchanged(t *testing.T) {
	r := &run{cfg: Config{Policy: policy.OCL()}}
	all := []string{"api_heavy", "api_heavy_task", "es2_knn", "tier", "user"}
	lexical := []string{"api_heavy", "api_heavy_task", "tier", "user"}
	for _, c := range []struct {
		kind               string
		rows               int
		semantic, reranker bool
		target, body       string
		class              client.Class
		lanes              []string
		aware              bool
	}{
		{KindBulk, 2, true, false, "/concepts/$match/?semantic=true",
			`{"rows":[{"name":"concept 0"},{"name":"concept 1"}]}`, client.Bulk, all, true},
		{KindBulk, 1, true, true, "/concepts/$match/?reranker=true&semantic=true",
			`{"rows":[{"name":"concept 0"}]}`, client.Bulk, all, true},
		{KindBulk, 1, false, false, "/concepts/$match/?reranker=true",
			`{"rows":[{"name":"concept 0"}]}`, client.Bulk, lexical, false},
		{KindSingle, 1, true, false, "/concepts/$match/?semantic=true",
			`{"rows":[{"name":"concept 0"}]}`, client.Interactive, all, false},
		{KindRerank, 2, false, false, "/concepts/$rerank/",
			`{"rows":[{"name":"concept 0"},{"name":"concept 1"}],"q":"malaria"}`, client.Bulk, lexical, false},
	} {
		spec := r.mapperCall(c.kind, c.rows, c.semantic, c.reranker)
		if spec.method != http.MethodPost || spec.target != c.target || string(spec.body) != c.body || spec.units != c.rows ||
			spec.call.Class != c.class || !slices.Equal(spec.call.Lanes, c.lanes) || spec.aware != c.aware || spec.header != nil {
			t.Errorf("%s of %d rows (semantic %t): %+v", c.kind, c.rows, c.semantic, spec)
		}
	}
}

func TestWorkloadOf(t *testing.T) {
	ocl, inf := policy.OCL(), inferencePolicy(t)
	copyOfOCL, err := policy.Parse("ocl.yaml", ocl.Source())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, WorkloadMapper},
		{Config{Policy: ocl}, WorkloadMapper},
		{Config{Policy: copyOfOCL}, WorkloadMapper},
		{Config{Policy: inf}, WorkloadRoutes},
		{Config{Policy: ocl, Workload: WorkloadRoutes}, WorkloadRoutes},
	} {
		if got := WorkloadOf(c.cfg); got != c.want {
			t.Errorf("WorkloadOf(policy %v, workload %q) = %s, want %s", c.cfg.Policy != nil, c.cfg.Workload, got, c.want)
		}
	}
	if got := Kinds(Config{Policy: inf}); !slices.Equal(got, []string{"chat", "completions", "embeddings"}) {
		t.Errorf("inference kinds %v", got)
	}
	if got := Kinds(Config{}); !slices.Equal(got, []string{KindBulk, KindSingle, KindRerank}) {
		t.Errorf("Mapper kinds %v", got)
	}
}
