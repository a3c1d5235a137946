package http

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/policy"
)

// The gateway's classification under the OCL policy (Classifier.Classify:
// the policy's routes evaluated by package policy) against the OCL
// classifier as it was before the policy (oclReference, kept as test
// code): the same request must give the same verdict, endpoint, rows,
// semantic, reranker and single-row.

// policyCall turns what the gateway's Classifier said of a request (the
// call's route and fields) into the reference's terms: the route's log
// name is the old endpoint.
func policyCall(call capgate.Call, heavy bool) (c oclCall, single bool) {
	if !heavy {
		return oclCall{}, false
	}
	r, f := call.Route, &call.Fields
	c = oclCall{Endpoint: r.LogName, Rows: f.Int(r.Field("rows")),
		Semantic: f.Bool(r.Field("semantic")), Reranker: f.Bool(r.Field("reranker"))}
	return c, policy.OCL().Class("single_row").Has(r, f)
}

type diffCase struct {
	method, target, ct, ce, body, prefix string
}

// checkSame classifies one request both ways and reports a difference.
func checkSame(t *testing.T, tc diffCase) {
	t.Helper()
	mk := func() *http.Request {
		r := httptest.NewRequest("POST", "/", strings.NewReader(tc.body))
		r.Method = tc.method
		u, err := r.URL.Parse(tc.target)
		if err != nil {
			return nil
		}
		r.URL, r.RequestURI = u, tc.target
		if tc.ct != "" {
			r.Header.Set("Content-Type", tc.ct)
		}
		if tc.ce != "" {
			r.Header.Set("Content-Encoding", tc.ce)
		}
		return r
	}
	r1, r2 := mk(), mk()
	if r1 == nil {
		return
	}
	ref := oclReference{c: &Classifier{PathPrefix: tc.prefix, MaxBodyBytes: 256}}
	want, wantHeavy := ref.classify(r1)
	defer r1.Body.Close()

	c := &Classifier{PathPrefix: tc.prefix, MaxBodyBytes: 256}
	call, gotHeavy := c.Classify(r2)
	defer r2.Body.Close()
	if gotHeavy && (call.Route == nil || call.Route != policy.OCL().Route(call.Route.Name)) {
		t.Fatalf("%+v: heavy with route %v, not one of the OCL policy's", tc, call.Route)
	}
	got, single := policyCall(call, gotHeavy)
	if gotHeavy != wantHeavy || got != want {
		t.Fatalf("%+v:\npolicy    %+v heavy %v\nreference %+v heavy %v", tc, got, gotHeavy, want, wantHeavy)
	}
	if single != (wantHeavy && want.singleRow()) {
		t.Fatalf("%+v: policy single_row %v, reference %v", tc, single, want.singleRow())
	}
}

func utf16le(s string) string {
	u := utf16.Encode([]rune(s))
	b := make([]byte, 0, 2*len(u))
	for _, c := range u {
		b = append(b, byte(c), byte(c>>8))
	}
	return string(b)
}

func diffCases() []diffCase {
	const two = `{"rows":[{"id":"1"},{"id":"2"}]}`
	big := `{"rows":[` + strings.Repeat(`1,`, 200) + `1]}`
	return []diffCase{
		{method: "POST", target: "/concepts/$match/?semantic=true", body: two},
		{method: "POST", target: "/concepts/$match/?reranker=True", body: two},
		{method: "POST", target: "/concepts/$match/?semantic=1&reranker=TRUE", body: `{"rows":[1]}`},
		{method: "POST", target: "/concepts/$match?semantic=true", body: two},
		{method: "POST", target: "/concepts/$match//?semantic=true", body: two},
		{method: "POST", target: "/concepts/%24match/?semantic=true", body: `{"rows":[1]}`},
		{method: "POST", target: "/concepts/%24match/?sem%61ntic=tru%65", body: two},
		{method: "POST", target: "/concepts/$match/?semantic=true&semantic=false", body: two},
		{method: "POST", target: "/concepts/$match/?semantic=false&semantic=1", body: two},
		{method: "POST", target: "/concepts/$match/?semantic", body: two},
		{method: "POST", target: "/concepts/$match/?semantic=+true", body: two},
		{method: "POST", target: "/concepts/$match/?semantic=true;reranker=1", body: two},
		{method: "POST", target: "/concepts/$match/", body: two},
		{method: "POST", target: "/concepts/$match/?semantic=yes", body: two},
		{method: "post", target: "/concepts/$match/?semantic=true", body: two},
		{method: "POST", target: "/concepts/$match/?semantic=true#frag", body: two},
		{method: "POST", target: "/concepts/$match/#?semantic=true", body: two},
		{method: "GET", target: "/concepts/$match/?semantic=true", body: two},
		{method: "POST", target: "/concepts/$match/?semantic=true", body: `{"rows":[]}`},
		{method: "POST", target: "/concepts/$match/?semantic=true", body: `{"rows":null}`},
		{method: "POST", target: "/concepts/$match/?semantic=true", body: `{"rows":{"a":1}}`},
		{method: "POST", target: "/concepts/$match/?semantic=true", body: `{"q":"x"}`},
		{method: "POST", target: "/concepts/$match/?semantic=true", body: `rows=1`},
		{method: "POST", target: "/concepts/$match/?semantic=true", body: two + `x`},
		{method: "POST", target: "/concepts/$match/?semantic=true", body: ``},
		{method: "POST", target: "/concepts/$match/?semantic=true", body: `[1]`},
		{method: "POST", target: "/concepts/$match/?semantic=true", body: `{"ROWS":[1]}`},
		{method: "POST", target: "/concepts/$match/?semantic=true", body: `{"rows":[1],"rows":[]}`},
		{method: "POST", target: "/concepts/$match/?semantic=true", body: `{"rows":[],"rows":[1,2,3]}`},
		{method: "POST", target: "/concepts/$match/?semantic=true", body: `{"\u0072ows":[1,[2,3],{"a":"]"}]}`},
		{method: "POST", target: "/concepts/$match/?semantic=true", body: `{"r\ud800ows":[1]}`},
		{method: "POST", target: "/concepts/$match/?semantic=true", body: ` { "rows" : [ "\"" , "\\" ] } `},
		{method: "POST", target: "/concepts/$match/?semantic=true", body: `{"a":{"rows":[1]}}`},
		{method: "POST", target: "/concepts/$match/?semantic=true", body: big},
		{method: "POST", target: "/concepts/$match/?semantic=true", ce: "gzip", body: two},
		{method: "POST", target: "/concepts/$match/?semantic=true", ce: "identity", body: two},
		{method: "POST", target: "/concepts/$match/", ct: "application/json; charset=utf-16", body: utf16le(two)},
		{method: "POST", target: "/concepts/$match/", ct: "application/json; charset=utf-16-le", body: utf16le(`{"rows":[1]}`)},
		{method: "POST", target: "/concepts/$match/?semantic=true", ct: "application/json; charset=latin-1", body: two},
		{method: "POST", target: "/concepts/$match/?semantic=true", ct: "application/json; charset=cp500", body: two},
		{method: "POST", target: "/concepts/$match/?semantic=true", ct: `application/json; charset="utf-8"`, body: "\xef\xbb\xbf" + two},
		{method: "POST", target: "/concepts/$rerank/", body: `{"rows":[{},{}],"q":"fever"}`},
		{method: "POST", target: "/concepts/$rerank?semantic=true", body: `{"rows":[{}],"q":"a"}`},
		{method: "POST", target: "/concepts/$rerank/", body: `{"rows":[{}]}`},
		{method: "POST", target: "/concepts/$rerank/", body: `{"rows":[{}],"q":""}`},
		{method: "POST", target: "/concepts/$rerank/", body: `{"rows":[{}],"q":5}`},
		{method: "POST", target: "/concepts/$rerank/", body: `{"rows":[{}],"q":0}`},
		{method: "POST", target: "/concepts/$rerank/", body: `{"rows":[{}],"q":-0.0e5}`},
		{method: "POST", target: "/concepts/$rerank/", body: `{"rows":[{}],"q":[]}`},
		{method: "POST", target: "/concepts/$rerank/", body: `{"rows":[{}],"q":{"a":1}}`},
		{method: "POST", target: "/concepts/$rerank/", body: `{"rows":[{}],"q":true}`},
		{method: "POST", target: "/concepts/$rerank/", body: `{"rows":[{}],"q":null}`},
		{method: "POST", target: "/concepts/$rerank/", ct: "application/json; charset=utf-16", body: utf16le(`{"rows":[1],"q":"x"}`)},
		{method: "POST", target: "/concepts/$rerank/", ct: "text/plain; charset=ebcdic-cp-us", body: `{"rows":[1],"q":"x"}`},
		{method: "POST", target: "/concepts/$matchx/?semantic=true", body: two},
		{method: "POST", target: "/orgs/x/concepts/$match/?semantic=true", body: two},
		{method: "POST", target: "/concepts/$match/extra?semantic=true", body: two},
		{method: "POST", target: "/api/concepts/$match/?semantic=true", body: two, prefix: "/api/"},
		{method: "POST", target: "/api/concepts/$rerank", body: `{"rows":[1],"q":"x"}`, prefix: "/api"},
		{method: "POST", target: "/concepts/$match/?semantic=true", body: two, prefix: "/api"},
		{method: "POST", target: "/apiconcepts/$match/?semantic=true", body: two, prefix: "/api"},
		// Added with the policy: the readings the two do apart.
		{method: "Post", target: "/concepts/$rerank", body: `{"rows":[1],"q":"x"}`},
		{method: "POST", target: "/concepts/$match%2F?semantic=true", body: two},
		{method: "POST", target: "/concepts/$match/?semantic=true&reranker", body: `{"rows":[1]}`},
		{method: "POST", target: "/concepts/$match/?semantic=tRuE", body: `{"rows":[1],"rows":"x"}`},
		{method: "POST", target: "/concepts/$match/?semantic=true", ct: "application/json; charset=utf-16", body: ``},
		{method: "POST", target: "/concepts/$match/?semantic=true", ct: "application/json; charset=utf-16", body: "\xff"},
		{method: "POST", target: "/concepts/$rerank/", ce: "br", body: `{}`},
		{method: "POST", target: "/concepts/$rerank/", body: `{"rows":[1],"q":"\u0000"}`},
		{method: "POST", target: "/concepts/$rerank/", body: `{"rows":[1],"\u0071":"x"}`},
	}
}

func TestOCLPolicyMatchesReference(t *testing.T) {
	for _, tc := range diffCases() {
		checkSame(t, tc)
	}
}

func FuzzOCLPolicyMatchesReference(f *testing.F) {
	for _, tc := range diffCases() {
		f.Add(tc.method, tc.target, tc.ct, tc.ce, tc.body, tc.prefix)
	}
	f.Fuzz(func(t *testing.T, method, target, ct, ce, body, prefix string) {
		if !strings.HasPrefix(target, "/") || strings.ContainsAny(target, " \r\n\x00") ||
			strings.ContainsAny(ct+ce, "\r\n\x00") || method == "" || strings.ContainsAny(method, " \r\n\x00") {
			return // not a request net/http would hand the gateway
		}
		checkSame(t, diffCase{method, target, ct, ce, body, prefix})
	})
}

// BenchmarkOCLRules compares, side by side, the rule part of one OCL
// call's classification (the body already read): the old classifier's
// heavyPath and parseBody (oclReference) against the OCL policy's
// Evaluate, which the gateway runs.
func BenchmarkOCLRules(b *testing.B) {
	body := []byte(`{"rows":[{"id":"1","name":"fever"},{"id":"2","name":"cough"}],"target_repo_url":"/orgs/CIEL/sources/CIEL/"}`)
	for _, tc := range []struct{ name, target string }{
		{"semantic-match", "/concepts/$match/?semantic=true&bestMatch=true"},
		{"lexical-match", "/concepts/$match/?includeSearchMeta=true"},
		{"other-path", "/orgs/CIEL/sources/CIEL/concepts/?q=fever"},
	} {
		r := httptest.NewRequest("POST", tc.target, nil)
		r.Header.Set("Content-Type", "application/json")
		ref := oclReference{c: &Classifier{}}
		b.Run(tc.name+"/classifier", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if call, ok := ref.heavyPath(r); ok {
					_, _ = parseBody(body, call.Endpoint == "$rerank")
				}
			}
		})
		ev := policy.NewEvaluator(policy.OCL(), "")
		req := policy.Request{Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery, Header: r.Header, Body: body}
		b.Run(tc.name+"/policy", func(b *testing.B) {
			b.ReportAllocs()
			var f policy.Fields
			for b.Loop() {
				ev.Evaluate(&req, &f)
			}
		})
	}
}
