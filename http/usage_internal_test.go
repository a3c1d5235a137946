package http

import (
	"bytes"
	"io"
	"strconv"
	"testing"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/policy"
)

// BenchmarkUsageBody is the reading alone, on one answer passed through as
// the proxy passes it (32 KiB reads, streams in the upstream's chunks):
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
	}{
		{"json", false, []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1733550000,"model":"small","choices":[{"index":0,"message":{"role":"assistant","content":"The sea is wide and the sea is deep."},"finish_reason":"stop"}],"usage":{"prompt_tokens":14,"completion_tokens":256,"total_tokens":270}}`)},
		{"stream200", true, usageStream(200)},
		{"stream1000", true, usageStream(1000)},
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
						body = &usageBody{ReadCloser: body, adm: adm, usage: u, stream: ans.stream}
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
