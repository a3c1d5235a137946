package policy_test

import (
	"testing"

	"github.com/capgate/capgate/policy"
)

// reading returns every field of f by name, as String gives it.
func reading(r *policy.Route, f *policy.Fields) map[string]string {
	out := map[string]string{}
	for _, fd := range r.Fields {
		v, _ := f.ByName(fd.Name)
		out[fd.Name] = v
	}
	return out
}

func sameReading(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %v; want %v", what, got, want)
		return
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %v; want %v", what, got, want)
			return
		}
	}
}

// The built-in policy's most expensive call is the one the Django
// package always sent when a classifier failed: a semantic, reranked
// $match of unknown rows (bulk: not the single-row class), in every lane.
func TestConservativeOCL(t *testing.T) {
	p := policy.OCL()
	r, f := p.Conservative(nil)
	if r == nil || r.Name != "match" {
		t.Fatalf("route %v; want match (it takes the most lanes)", r)
	}
	sameReading(t, "match", reading(r, &f), map[string]string{"semantic": "true", "reranker": "true", "rows": "0"})
	for _, l := range p.Lanes {
		if !l.TakesCall(r, &f) {
			t.Errorf("the conservative $match does not take lane %s", l.Name)
		}
	}
	if p.Class("single_row").Has(r, &f) {
		t.Error("the conservative $match is a single-row call: it could use the reserve")
	}
	rr, rf := p.Conservative(p.Route("rerank"))
	if rr.Name != "rerank" {
		t.Fatalf("route %s; want the one asked for", rr.Name)
	}
	sameReading(t, "rerank", reading(rr, &rf), map[string]string{"rows": "0"})
}

// Seats: the reading takes a seats rule's max; the route of the most
// seats is the policy's most expensive.
func TestConservativeTakesTheMostSeats(t *testing.T) {
	p, err := policy.Load("../examples/inference/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r, f := p.Conservative(nil)
	if r.Name != "chat" {
		t.Fatalf("route %s; want chat (up to 8 seats in the model lane, from max_tokens)", r.Name)
	}
	sameReading(t, "chat", reading(r, &f), map[string]string{"model": "", "max_tokens": "4096"})
	if got := r.SeatsIn("model", &f); got != 8 {
		t.Errorf("seats in model: %d; want the rule's max, 8", got)
	}
	er, ef := p.Conservative(p.Route("embeddings"))
	sameReading(t, "embeddings", reading(er, &ef), map[string]string{"model": "", "inputs": "64"})
	if got := er.SeatsIn("model", &ef); got != 4 {
		t.Errorf("embeddings: seats in model: %d; want the rule's max, 4", got)
	}
}

// A class never holds the conservative reading, and a lane's only_if
// stays taken.
func TestConservativeAvoidsClasses(t *testing.T) {
	const src = `version: 1
name: classes
routes:
  - name: job
    method: POST
    path: {exact: /job}
    fields:
      quick: {query_truthy: quick}
      fast: {query_truthy: fast}
      size: {body_array_len: items}
      kind: {body_string: kind}
classes:
  - {name: quick_class, routes: [job], field: quick, equals: true}
  - {name: fast_class, routes: [job], field: fast, equals: true}
  - {name: empty, routes: [job], field: size, equals: 0}
  - {name: plain, routes: [job], field: kind, equals: ""}
identity: {resolver: tokens, scheme: Bearer, default_tier: all}
lanes:
  - {name: all, scope: cluster, routes: [job], limit: 4, reserve: {class: quick_class, value: 1}}
  - {name: fastlane, scope: cluster, routes: [job], only_if: fast, limit: 2, reserve: {class: fast_class, value: 1}}
  - {name: sized, scope: cluster, routes: [job], limit: 2, reserve: {class: empty, value: 1}}
  - {name: kinds, scope: key, key: kind, routes: [job], limit: 2, reserve: {class: plain, value: 1}}
names:
  header_prefix: Capgate-
  refusal: {detail: "Busy.", error_code: capacity_exceeded}
  log_event: capgate_call
`
	p, err := policy.Parse("classes.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	r, f := p.Conservative(nil)
	sameReading(t, "job", reading(r, &f), map[string]string{"quick": "false", "fast": "true", "size": "1", "kind": "(conservative)"})
	if !p.Lane("fastlane").TakesCall(r, &f) {
		t.Error("the conservative call does not take the only_if lane")
	}
}
