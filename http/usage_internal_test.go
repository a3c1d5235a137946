package http

import (
	"bytes"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/policy"
)

// BenchmarkUsageBody is the reading alone, on one answer passed through as
// the proxy passes it (32 KiB reads, streams in the upstream's chunks; a
// 3 MiB embeddings answer, its usage read from its end, its length known
// from the start or not, chunked):
// "off" copies the body, "on" copies it through a usageBody and reads the
// usage at its end. BenchmarkUsage has the whole gated call.
func BenchmarkUsageBody(b *testing.B) {
	p, err := policy.Load("../examples/inference/policy.yaml")
	if err != nil {
		b.Fatal(err)
	}
	u := p.Route("chat").Usage
	for _, ans := range []struct {
		name   string
		stream bool
		body   []byte
		tail   bool // its length known to be past MaxUsageJSONBytes
	}{
		{"json", false, []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1733550000,"model":"small","choices":[{"index":0,"message":{"role":"assistant","content":"The sea is wide and the sea is deep."},"finish_reason":"stop"}],"usage":{"prompt_tokens":14,"completion_tokens":256,"total_tokens":270}}`), false},
		{"stream200", true, usageStream(200), false},
		{"stream1000", true, usageStream(1000), false},
		{"embeddings", false, usageEmbeddings(3 << 20), true},
		{"embeddings-chunked", false, usageEmbeddings(3 << 20), false},
	} {
		chunk := len(ans.body)
		if ans.stream {
			chunk = 140 // about one event a read, as a server flushes them
		}
		buf := make([]byte, 32<<10)
		for _, on := range []bool{false, true} {
			name := ans.name + "/off"
			if on {
				name = ans.name + "/on"
			}
			b.Run(name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(ans.body)))
				for b.Loop() {
					var body io.ReadCloser = io.NopCloser(&chunked{b: ans.body, n: chunk})
					adm := &capgate.Admission{}
					if on {
						body = &usageBody{ReadCloser: body, adm: adm, usage: u, stream: ans.stream, tail: ans.tail}
					}
					if _, err := io.CopyBuffer(io.Discard, onlyReader{body}, buf); err != nil {
						b.Fatal(err)
					}
					_ = body.Close()
					if _, ok := adm.Usage(); ok != on {
						b.Fatalf("usage read: %v", ok)
					}
				}
			})
		}
	}
}

// chunked reads b at most n bytes a read.
type chunked struct {
	b []byte
	n int
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	k := copy(p[:min(len(p), c.n)], c.b)
	c.b = c.b[k:]
	return k, nil
}

// onlyReader hides a body's WriterTo, as the proxy's copy does not use it.
type onlyReader struct{ io.Reader }

// usageEmbeddings returns an OpenAI embeddings answer of about size
// bytes, vectors of 1,536 numbers, the usage its last member.
func usageEmbeddings(size int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"object":"list","data":[`)
	for i := 0; b.Len() < size; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"object":"embedding","index":` + strconv.Itoa(i) + `,"embedding":[`)
		for j := range 1536 {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.FormatFloat(float64((i*1536+j)%2000-1000)/1e4, 'f', 9, 64))
		}
		b.WriteString("]}")
	}
	b.WriteString(`],"model":"text-embedding-3-small","usage":{"prompt_tokens":4096,"total_tokens":4096}}`)
	return b.Bytes()
}

// usageStream returns an OpenAI chat completion stream of n chunks, the
// usage in the last event, then [DONE].
func usageStream(n int) []byte {
	var b bytes.Buffer
	for i := range n {
		b.WriteString(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1733550000,"model":"small","choices":[{"index":0,"delta":{"content":"tok` + strconv.Itoa(i) + `"}}]}` + "\n\n")
	}
	b.WriteString(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1733550000,"model":"small","choices":[],"usage":{"prompt_tokens":14,"completion_tokens":` + strconv.Itoa(n) + `,"total_tokens":` + strconv.Itoa(n+14) + "}}\n\ndata: [DONE]\n\n")
	return b.Bytes()
}

// usageAt returns the Usage of a route that reads path.
func usageAt(t testing.TB, path string) policy.Usage {
	t.Helper()
	p, err := policy.Parse("usage.yaml", []byte(`version: 1
name: usage
routes:
  - {name: r, method: POST, path: {exact: /r}, usage: {json: `+path+`}}
identity: {resolver: tokens, scheme: Token, default_tier: all}
lanes:
  - {name: cluster, scope: cluster, routes: [r], limit: 4}
names:
  header_prefix: Capgate-
  refusal: {detail: "busy", error_code: busy}
  log_event: capgate_call
`))
	if err != nil {
		t.Fatal(err)
	}
	return p.Route("r").Usage
}

// The end of a long JSON answer: its usage is the last member of the
// top-level object with the path's first key, found back from the end by
// whole values, when what decides it lies within the kept end.
func TestTailUsage(t *testing.T) {
	tokens, flat := usageAt(t, "usage.total_tokens"), usageAt(t, "usage")
	for _, c := range []struct {
		name string
		u    policy.Usage
		tail string
		want int64 // -1: none
	}{
		{"whole object", tokens, `{"a":1,"usage":{"total_tokens":7}}`, 7},
		{"whitespace", tokens, " { \"usage\" : { \"total_tokens\" : 7 } ,\n\t\"b\" : [1, \"]\", {\"c\":\"}\"}, null] , \"d\" : -1.5e3 }\r\n", 7},
		{"cut start", tokens, `0.1,0.2]}],"usage":{"total_tokens":7}}`, 7},
		{"scalar members after it", flat, `],"usage":7,"a":true,"b":null,"c":12}`, 7},
		{"a scalar before it", flat, `1,"usage":7}`, 7},
		{"not in the end", tokens, `2]}],"model":"m"}`, -1},
		{"the end starts in its value", tokens, `al_tokens":7}}`, -1},
		{"the end starts at its key", tokens, `"usage":{"total_tokens":7}}`, -1},
		{"the end starts in a scalar after it", flat, `,"usage":7,"n":1234}`, 7},
		{"a scalar at the end's start", flat, `1234,"n":5}`, -1},
		{"an escaped key", tokens, `,"\u0075sage":{"total_tokens":7}}`, 7},
		{"an escaped other key", tokens, `,"usage":{"total_tokens":7},"\u0075":1}`, 7},
		{"the last of two", tokens, `,"usage":{"total_tokens":1},"usage":{"total_tokens":2}}`, 2},
		{"the last of two is no number", tokens, `,"usage":{"total_tokens":1},"usage":{"total_tokens":"x"}}`, -1},
		{"a decoy string", tokens, `,"usage":{"total_tokens":1},"n":"\\\",\"usage\":{\"total_tokens\":5}}"}`, 1},
		{"a decoy string, usage before the end", tokens, `2],"n":"\\\",\"usage\":{\"total_tokens\":5}}"}`, -1},
		{"a decoy member", tokens, `,"usage":{"total_tokens":1},"data":[{"usage":{"total_tokens":5}}]}`, 1},
		{"a decoy member, usage before the end", tokens, `2]},{"usage":{"total_tokens":5}}]}`, -1},
		{"a decoy object", tokens, `,"x":{"usage":{"total_tokens":5}}}`, -1},
		{"backslashes to the start", tokens, `\\","usage":{"total_tokens":7},"n":"x"}`, 7},
		{"backslashes to the start, in a value passed", tokens, `\\","n":"x"}`, -1},
		{"a quote at the start", tokens, `","n":"x"}`, -1},
		{"an array", tokens, `[1,{"usage":{"total_tokens":7}}]`, -1},
		{"cut", tokens, `,"usage":{"total_tokens":7}`, -1},
		{"invalid after it", tokens, `,"usage":{"total_tokens":7},"n":tru}`, -1},
		{"invalid before it", tokens, `:"usage":{"total_tokens":7}}`, -1},
		{"no value", tokens, `,"usage":}`, -1},
		{"empty", tokens, ``, -1},
		{"an empty object", tokens, `{}`, -1},
		{"garbage", tokens, "\x00\xff}", -1},
		{"an unmatched bracket", tokens, `,"usage":{"total_tokens":7}]}`, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			n, ok := tailUsage([]byte(c.tail), c.u)
			if !ok {
				n = -1
			}
			if n != c.want {
				t.Errorf("tailUsage(%q) = %d; want %d", c.tail, n, c.want)
			}
		})
	}
}

// A JSON answer is kept whole up to MaxUsageJSONBytes and by its end past
// it, whatever the sizes of the reads, whether its length is known from
// the start (tail) or found on the way.
func TestUsageBodyLongJSON(t *testing.T) {
	u := usageAt(t, "usage.total_tokens")
	for _, size := range []int{UsageLookBackBytes - 40, MaxUsageJSONBytes - 37, MaxUsageJSONBytes - 36, MaxUsageJSONBytes + UsageLookBackBytes, 3 << 20} {
		doc := []byte(`{"pad":"` + strings.Repeat("x", size) + `","usage":{"total_tokens":9}}`)
		for _, chunk := range []int{777, 32 << 10, 900 << 10, len(doc)} {
			for _, tail := range []bool{false, true} {
				if tail && len(doc) <= MaxUsageJSONBytes {
					continue
				}
				adm := &capgate.Admission{}
				body := &usageBody{ReadCloser: io.NopCloser(&chunked{b: doc, n: chunk}), adm: adm, usage: u, tail: tail}
				if _, err := io.Copy(io.Discard, onlyReader{body}); err != nil {
					t.Fatal(err)
				}
				if n, ok := adm.Usage(); !ok || n != 9 {
					t.Errorf("%d bytes in reads of %d (tail %v): usage %d, %v; want 9", len(doc), chunk, tail, n, ok)
				}
				if body.buf != nil {
					t.Errorf("%d bytes in reads of %d (tail %v): the kept copy not freed", len(doc), chunk, tail)
				}
			}
		}
	}
}
