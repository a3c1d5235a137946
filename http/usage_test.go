package http_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	capgatehttp "github.com/capgate/capgate/http"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
)

// usagePolicy reads usage.total_tokens from chat's answers (a route whose
// API stops when its client goes) and from batch's (which runs to its
// end); plain reads none.
const usagePolicy = `version: 1
name: usage
routes:
  - name: chat
    method: POST
    path: {exact: /v1/chat/completions}
    on_client_gone: cancel
    usage: {json: usage.total_tokens}
  - name: batch
    method: POST
    path: {exact: /v1/batch}
    usage: {json: usage.total_tokens}
  - name: plain
    method: POST
    path: {exact: /v1/plain}
identity: {resolver: tokens, scheme: Token, default_tier: all}
lanes:
  - {name: cluster, scope: cluster, routes: [chat, batch, plain], limit: 4}
names:
  header_prefix: Capgate-
  refusal: {detail: "busy", error_code: busy}
  log_event: capgate_call
`

// answer is what the usage upstream sends for one X-Case.
type cannedAnswer struct {
	contentType, encoding string
	body                  string
}

// sse returns a stream of the given data: events, each followed by a
// blank line.
func sse(events ...string) string {
	var b strings.Builder
	for _, ev := range events {
		b.WriteString("data: " + ev + "\n\n")
	}
	return b.String()
}

// chunks returns n chat chunks of about 100 bytes each, none with usage.
func chunks(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf(`{"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"token %06d"}}]}`, i)
	}
	return out
}

const withUsage = `{"id":"c1","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":33,"total_tokens":42}}`

// The gateway reads a route's usage from the upstream's answer as it
// passes, leaving the answer as it was: a JSON answer parsed at its end, a
// stream's last data: event that carries it, within bounds; anything else
// reports none.
func TestUsageFromTheAnswer(t *testing.T) {
	bigStream := append(chunks(3000), withUsage, "[DONE]") // ~300 KiB: past the look-back
	early := append([]string{withUsage}, chunks(3000)...)  // the usage event ends before the look-back
	pad := strings.Repeat("x", capgatehttp.MaxUsageJSONBytes)
	// Embeddings answers of about 3 MiB, past the whole-answer bound: the
	// usage is read from their last 64 KiB, only as a member of the
	// top-level object.
	const embUsage = `,"usage":{"prompt_tokens":4096,"total_tokens":4096}`
	const decoyString = `,"note":"a \\\",\"usage\":{\"total_tokens\":5}}"` // "usage" as text, after an escaped \\ and "
	const decoyItem = `,"usage":{"total_tokens":5}`                        // a member of the last data item
	embeddingsAnswer := embeddings("", "", `,"model":"text-embedding-3-small"`+embUsage)
	cases := map[string]cannedAnswer{
		"json":                          {"application/json", "", `{"id":"c1","choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21}}`},
		"json charset":                  {"application/json; charset=utf-8", "", `{"usage":{"total_tokens":7}}`},
		"stream":                        {"text/event-stream", "", sse(append(chunks(5), withUsage, "[DONE]")...)},
		"stream crlf":                   {"text/event-stream; charset=utf-8", "", strings.ReplaceAll(sse(`{"usage":{"total_tokens":5}}`, withUsage, "[DONE]"), "\n", "\r\n")},
		"stream no space and two lines": {"text/event-stream", "", "data:{\"usage\":\ndata:{\"total_tokens\":6}}\n\nevent: end\ndata: [DONE]\n\n"},
		"stream without usage":          {"text/event-stream", "", sse(append(chunks(5), "[DONE]")...)},
		"stream past the look-back":     {"text/event-stream", "", sse(bigStream...)},
		"usage early in a long stream":  {"text/event-stream", "", sse(early...)},
		"an unfinished last event":      {"text/event-stream", "", sse(`{"usage":{"total_tokens":3}}`) + "data: " + withUsage + "\n"},
		"oversized json":                {"application/json", "", `{"pad":"` + pad + `","usage":{"total_tokens":21}}`},
		"oversized json, usage first":   {"application/json", "", `{"usage":{"total_tokens":21},"pad":"` + pad + `"}`},
		"embeddings":                    {"application/json", "", embeddingsAnswer},
		"embeddings, usage first":       {"application/json", "", embeddings(embUsage, "", `,"model":"m"`)},
		"embeddings, a decoy string":    {"application/json", "", embeddings(embUsage, "", `,"model":"m"`+decoyString)},
		"embeddings, a decoy item":      {"application/json", "", embeddings(embUsage, decoyItem, "")},
		"embeddings, usage past decoys": {"application/json", "", embeddings("", decoyItem, decoyString+embUsage)},
		"embeddings, cut short":         {"application/json", "", strings.TrimSuffix(embeddingsAnswer, "}")},
		"embeddings, cut in the usage":  {"application/json", "", strings.TrimSuffix(embeddingsAnswer, "96}}")},
		"garbage, long":                 {"application/json", "", strings.Repeat("\x00\xff[\"{usage\":", 300_000) + `"usage":{"total_tokens":5}}`},
		"garbage json":                  {"application/json", "", "\x00\xff{{ not json"},
		"garbage stream":                {"text/event-stream", "", "\x00\xff\n\ndata: {\"usage\":{\"total_tokens\":\n\n"},
		"a fraction":                    {"application/json", "", `{"usage":{"total_tokens":2.5}}`},
		"negative":                      {"application/json", "", `{"usage":{"total_tokens":-3}}`},
		"a string":                      {"application/json", "", `{"usage":{"total_tokens":"21"}}`},
		"missing":                       {"application/json", "", `{"usage":{}}`},
		"text":                          {"text/plain", "", `{"usage":{"total_tokens":21}}`},
		"compressed":                    {"application/json", "br", `{"usage":{"total_tokens":21}}`},
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, ok := cases[r.Header.Get("X-Case")]
		if !ok {
			http.Error(w, "no such case", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", a.contentType)
		if a.encoding != "" {
			w.Header().Set("Content-Encoding", a.encoding)
		}
		if strings.HasPrefix(a.contentType, "text/event-stream") {
			// In pieces, flushed, as a server streams them.
			rc := http.NewResponseController(w)
			for b := a.body; b != ""; {
				n := min(len(b), 777)
				_, _ = w.Write([]byte(b[:n]))
				_ = rc.Flush()
				b = b[n:]
			}
			return
		}
		_, _ = w.Write([]byte(a.body))
	}))
	t.Cleanup(up.Close)
	p, err := policy.Parse("usage.yaml", []byte(usagePolicy))
	if err != nil {
		t.Fatal(err)
	}
	e := newPolicyEnv(t, p, func(c *settings.Config) { c.Mode = settings.ModeEnforce }, func(c *capgatehttp.GatewayConfig) {
		c.Upstream, _ = url.Parse(up.URL)
	})
	for _, tc := range []struct {
		name, path string
		want       any // nil: no usage on the line
	}{
		{"json", "/v1/chat/completions", json.Number("21")},
		{"json charset", "/v1/batch", json.Number("7")},
		{"stream", "/v1/chat/completions", json.Number("42")},
		{"stream crlf", "/v1/chat/completions", json.Number("42")},
		{"stream no space and two lines", "/v1/chat/completions", json.Number("6")},
		{"stream without usage", "/v1/chat/completions", nil},
		{"stream past the look-back", "/v1/chat/completions", json.Number("42")},
		{"usage early in a long stream", "/v1/chat/completions", nil},
		{"an unfinished last event", "/v1/chat/completions", json.Number("3")},
		{"oversized json", "/v1/chat/completions", json.Number("21")},
		{"oversized json, usage first", "/v1/chat/completions", nil},
		{"embeddings", "/v1/batch", json.Number("4096")},
		{"embeddings, usage first", "/v1/batch", nil},
		{"embeddings, a decoy string", "/v1/batch", nil},
		{"embeddings, a decoy item", "/v1/batch", nil},
		{"embeddings, usage past decoys", "/v1/batch", json.Number("4096")},
		{"embeddings, cut short", "/v1/batch", nil},
		{"embeddings, cut in the usage", "/v1/batch", nil},
		{"garbage, long", "/v1/batch", nil},
		{"garbage json", "/v1/chat/completions", nil},
		{"garbage stream", "/v1/chat/completions", nil},
		{"a fraction", "/v1/chat/completions", nil},
		{"negative", "/v1/chat/completions", nil},
		{"a string", "/v1/chat/completions", nil},
		{"missing", "/v1/chat/completions", nil},
		{"text", "/v1/chat/completions", nil},
		{"compressed", "/v1/chat/completions", nil},
		{"json", "/v1/plain", nil}, // a route without usage reads none
	} {
		t.Run(tc.name+" "+tc.path, func(t *testing.T) {
			n := len(e.sink.Raw())
			resp := e.do(t.Context(), "POST", tc.path, `{}`, "Authorization", "Token t-cora", "X-Case", tc.name)
			if resp.Err != nil || resp.StatusCode != 200 || string(resp.Body) != cases[tc.name].body {
				t.Fatalf("answer %d, %v, %d bytes; want 200 and the upstream's %d bytes as they were",
					resp.StatusCode, resp.Err, len(resp.Body), len(cases[tc.name].body))
			}
			line := e.sink.Wait(t, n+1, waitLimit)[n]
			if got, has := line["usage"]; has != (tc.want != nil) || got != tc.want {
				t.Errorf("line's usage %v (present %v); want %v", got, has, tc.want)
			}
		})
	}
}

// embeddings returns an OpenAI embeddings answer of about 3 MiB: 160
// vectors of 1,536 numbers, head's members before "data", tail's after
// it, and last's at the end of the last vector's object.
func embeddings(head, last, tail string) string {
	var b strings.Builder
	b.WriteString(`{"object":"list"` + head + `,"data":[`)
	for i := range 160 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"object":"embedding","index":%d,"embedding":[`, i)
		for j := range 1536 {
			if j > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "%.9f", float64((i*1536+j)%2000-1000)/1e4)
		}
		b.WriteString("]")
		if i == 159 {
			b.WriteString(last)
		}
		b.WriteString("}")
	}
	b.WriteString("]" + tail + "}")
	return b.String()
}

// A JSON answer past the whole-answer bound that ends before its declared
// length (the upstream's connection gone) reports no usage, even when
// what came is a whole document: its end is not known to be the end.
func TestUsageOfACutLongJSONAnswer(t *testing.T) {
	doc := embeddings("", "", `,"usage":{"total_tokens":4096}`)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(doc)+100))
		_, _ = w.Write([]byte(doc)) // and no more: the server closes the connection
	}))
	t.Cleanup(up.Close)
	p, err := policy.Parse("usage.yaml", []byte(usagePolicy))
	if err != nil {
		t.Fatal(err)
	}
	e := newPolicyEnv(t, p, func(c *settings.Config) { c.Mode = settings.ModeEnforce }, func(c *capgatehttp.GatewayConfig) {
		c.Upstream, _ = url.Parse(up.URL)
	})
	resp := e.do(t.Context(), "POST", "/v1/batch", `{}`, "Authorization", "Token t-cora")
	if resp.Err == nil && len(resp.Body) == len(doc)+100 {
		t.Fatalf("the client got the whole declared answer; want it cut")
	}
	line := e.sink.Wait(t, 1, waitLimit)[0]
	if got, has := line["usage"]; has {
		t.Errorf("line's usage %v; want none", got)
	}
}

// A stream cut because its client went (on_client_gone: cancel) reports
// the usage of the last event it read that carried one.
func TestUsageOfACutStream(t *testing.T) {
	sent := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for i := 1; i <= 3; i++ {
			// vLLM's continuous usage stats: each chunk says what was used so far.
			fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":\"t\"}}],\"usage\":{\"total_tokens\":%d}}\n\n", 10+i)
			_ = rc.Flush()
		}
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"t\"}}],\"usage\":{\"total_") // cut mid-event
		_ = rc.Flush()
		close(sent)
		<-r.Context().Done() // until the gateway cuts it
	}))
	t.Cleanup(up.Close)
	p, err := policy.Parse("usage.yaml", []byte(usagePolicy))
	if err != nil {
		t.Fatal(err)
	}
	e := newPolicyEnv(t, p, func(c *settings.Config) { c.Mode = settings.ModeEnforce }, func(c *capgatehttp.GatewayConfig) {
		c.Upstream, _ = url.Parse(up.URL)
	})
	req := newRequest(t, t.Context(), "POST", e.front.URL+"/v1/chat/completions", `{}`, "Authorization", "Token t-cora")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	for range 3 {
		readEvent(t, br)
	}
	<-sent
	resp.Body.Close() // the client goes
	line := e.sink.Wait(t, 1, waitLimit)[0]
	if line["error"] != "client gone" || line["usage"] != json.Number("13") {
		t.Errorf("line %v; want error client gone, usage 13", line)
	}
}
