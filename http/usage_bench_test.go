package http_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/capgate/capgate"
	capgatehttp "github.com/capgate/capgate/http"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
)

// BenchmarkUsage is the inference example's gated chat completion (as in
// BenchmarkPolicyGated) with its usage read from the answer and without
// (the example with its usage lines taken out), for a JSON answer and for
// a stream of 200 chunks whose last event carries the usage (about 27 KB,
// within the look-back) and of 1,000 (about 130 KB, past it).
func BenchmarkUsage(b *testing.B) {
	with := inferencePolicy(b)
	src := string(with.Source())
	var kept []string
	for _, line := range strings.SplitAfter(src, "\n") {
		if !strings.Contains(line, "usage: {json:") {
			kept = append(kept, line)
		}
	}
	without, err := policy.Parse("without-usage.yaml", []byte(strings.Join(kept, "")))
	if err != nil {
		b.Fatal(err)
	}
	if without.Route("chat").Usage.JSON != "" || with.Route("chat").Usage.JSON == "" {
		b.Fatal("the example's chat route should read usage, the copy without should not")
	}
	for _, ans := range []struct {
		name, contentType string
		body              []byte
	}{
		{"json", "application/json", []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1733550000,"model":"small","choices":[{"index":0,"message":{"role":"assistant","content":"The sea is wide and the sea is deep."},"finish_reason":"stop"}],"usage":{"prompt_tokens":14,"completion_tokens":256,"total_tokens":270}}`)},
		{"stream200", "text/event-stream", benchStream(200)},
		{"stream1000", "text/event-stream", benchStream(1000)},
	} {
		for _, pol := range []struct {
			name string
			p    *policy.Policy
		}{{"off", without}, {"on", with}} {
			b.Run(ans.name+"/"+pol.name, func(b *testing.B) {
				pb := policyBenches(b)[1]
				pb.policy = pol.p
				up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					_, _ = io.Copy(io.Discard, r.Body)
					w.Header().Set("Content-Type", ans.contentType)
					if ans.contentType == "application/json" {
						w.Header().Set("Content-Length", strconv.Itoa(len(ans.body)))
					}
					_, _ = w.Write(ans.body)
				}))
				b.Cleanup(up.Close)
				u, _ := url.Parse(up.URL)
				base := pb.serverWith(b, settings.Default(pb.policy, settings.ModeShadow), func(c *capgatehttp.GatewayConfig) { c.Upstream = u })
				pb.run(b, base, http.StatusOK, capgate.DecisionAdmitted, capgate.DecisionShadowRefused)
			})
		}
	}
}

// benchStream returns an OpenAI chat completion stream of n chunks, the
// usage in the last event, then [DONE].
func benchStream(n int) []byte {
	var b bytes.Buffer
	for i := range n {
		b.WriteString(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1733550000,"model":"small","choices":[{"index":0,"delta":{"content":"tok` + strconv.Itoa(i) + `"}}]}` + "\n\n")
	}
	b.WriteString(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1733550000,"model":"small","choices":[],"usage":{"prompt_tokens":14,"completion_tokens":` + strconv.Itoa(n) + `,"total_tokens":` + strconv.Itoa(n+14) + "}}\n\ndata: [DONE]\n\n")
	return b.Bytes()
}
