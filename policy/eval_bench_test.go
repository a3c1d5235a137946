package policy_test

import (
	"net/http"
	"os"
	"testing"

	"github.com/capgate/capgate/policy"
)

// evalCases are the requests of the allocation test and the benchmark:
// OCL's light and heavy calls, and the inference example's chat call.
func evalCases(tb testing.TB) []struct {
	name string
	ev   *policy.Evaluator
	req  policy.Request
	hit  bool
} {
	data, err := os.ReadFile("../examples/inference/policy.yaml")
	if err != nil {
		tb.Fatal(err)
	}
	ocl := policy.NewEvaluator(policy.OCL(), "")
	inf := policy.NewEvaluator(mustParse(tb, string(data)), "")
	h := http.Header{"Content-Type": {"application/json"}, "Authorization": {"Token abc"}}
	rows := []byte(`{"rows":[{"id":"1","name":"fever"},{"id":"2","name":"cough"}],"target_repo_url":"/orgs/CIEL/sources/CIEL/"}`)
	return []struct {
		name string
		ev   *policy.Evaluator
		req  policy.Request
		hit  bool
	}{
		{"ocl/miss-path", ocl, policy.Request{Method: "GET", Path: "/orgs/CIEL/sources/CIEL/concepts/", RawQuery: "q=fever", Header: h}, false},
		{"ocl/miss-lexical-match", ocl, policy.Request{Method: "POST", Path: "/concepts/$match/", RawQuery: "includeSearchMeta=true", Header: h, Body: rows}, false},
		{"ocl/match-semantic", ocl, policy.Request{Method: "POST", Path: "/concepts/$match/", RawQuery: "semantic=true&bestMatch=true", Header: h, Body: rows}, true},
		{"ocl/rerank", ocl, policy.Request{Method: "POST", Path: "/concepts/$rerank/", Header: h, Body: []byte(`{"rows":[{"id":"1"}],"q":"fever"}`)}, true},
		{"inference/chat", inf, policy.Request{Method: "POST", Path: "/v1/chat/completions", Header: h,
			Body: []byte(`{"model":"llama-3-8b","messages":[{"role":"user","content":"hello"}],"stream":false}`)}, true},
	}
}

// Evaluating a route allocates nothing, matching or not.
func TestEvaluateAllocatesNothing(t *testing.T) {
	if testing.CoverMode() != "" || raceEnabled {
		t.Skip("coverage counters and the race detector allocate")
	}
	for _, c := range evalCases(t) {
		var f policy.Fields
		if got := c.ev.Evaluate(&c.req, &f) != nil; got != c.hit {
			t.Fatalf("%s: matched %v; want %v", c.name, got, c.hit)
		}
		if n := testing.AllocsPerRun(100, func() { c.ev.Evaluate(&c.req, &f) }); n != 0 {
			t.Errorf("%s: %v allocations per Evaluate; want 0", c.name, n)
		}
	}
}

func BenchmarkEvaluate(b *testing.B) {
	for _, c := range evalCases(b) {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				var f policy.Fields
				for pb.Next() {
					if (c.ev.Evaluate(&c.req, &f) != nil) != c.hit {
						b.Fatal("wrong verdict")
					}
				}
			})
		})
	}
}
