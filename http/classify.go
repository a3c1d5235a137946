// Package http holds capgate's HTTP adapters: the OCL call classifier, the
// identity resolvers, the net/http middleware that gates heavy calls, and
// the gateway (a reverse proxy with the middleware in front). Outside this
// package, import it as capgatehttp.
package http

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/capgate/capgate"
)

// DefaultMaxBodyBytes is the most of a request body the classifier reads to
// decide whether a call is heavy (--max-body-bytes): 32 MiB.
const DefaultMaxBodyBytes = 32 << 20

// ClassifyFunc decides whether r is a heavy call and describes it. It may
// read r.Body; if it does, it replaces r.Body with one that replays every
// byte, so the handler behind sees the body unchanged. The middleware
// closes that replacement once the handler has returned.
type ClassifyFunc func(r *http.Request) (capgate.Call, bool)

// Classifier is the OCL profile (SPEC §2): a POST to
// <prefix>/concepts/$match/ whose JSON body has a non-empty rows array and
// whose query has semantic or reranker truthy, and a POST to
// <prefix>/concepts/$rerank/ with a non-empty rows array and a non-empty
// string q. The trailing slash is optional and "$" may arrive as %24.
// Everything else, including a body that is not JSON, is not heavy.
//
// The zero value classifies with no prefix and DefaultMaxBodyBytes. A
// Classifier is safe for concurrent use; don't change its fields once it is
// in use.
type Classifier struct {
	// PathPrefix is where the API is mounted (--path-prefix), such as
	// "/api"; default "" (the root).
	PathPrefix string
	// MaxBodyBytes is the most of a body read to classify it. A larger body
	// passes through ungated, byte for byte. Default DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Oversize, if set, is called for each would-be heavy call whose body is
	// larger than MaxBodyBytes (for a metric).
	Oversize func()
}

// Classify is a ClassifyFunc.
func (c *Classifier) Classify(r *http.Request) (capgate.Call, bool) {
	if r.Method != http.MethodPost {
		return capgate.Call{}, false
	}
	endpoint := c.endpoint(r.URL.Path)
	call := capgate.Call{Endpoint: endpoint}
	switch endpoint {
	case capgate.EndpointMatch:
		q := r.URL.Query()
		call.Semantic = truthy(q["semantic"])
		call.Reranker = truthy(q["reranker"])
		if !call.Semantic && !call.Reranker {
			return capgate.Call{}, false // lexical: not gated, body untouched
		}
	case capgate.EndpointRerank:
	default:
		return capgate.Call{}, false
	}

	body, over := c.buffer(r)
	if over {
		if c.Oversize != nil {
			c.Oversize()
		}
		return capgate.Call{}, false
	}
	rows, ok := parseBody(body, endpoint == capgate.EndpointRerank)
	if !ok {
		return capgate.Call{}, false
	}
	call.Rows = rows
	return call, true
}

// endpoint returns the heavy endpoint that path names, or "".
func (c *Classifier) endpoint(path string) string {
	rest, ok := strings.CutPrefix(path, strings.TrimSuffix(c.PathPrefix, "/"))
	if !ok {
		return ""
	}
	rest, ok = strings.CutPrefix(rest, "/concepts/")
	if !ok {
		return ""
	}
	switch strings.TrimSuffix(rest, "/") {
	case capgate.EndpointMatch:
		return capgate.EndpointMatch
	case capgate.EndpointRerank:
		return capgate.EndpointRerank
	}
	return ""
}

func (c *Classifier) maxBody() int64 {
	if c.MaxBodyBytes > 0 {
		return c.MaxBodyBytes
	}
	return DefaultMaxBodyBytes
}

// buffer reads at most MaxBodyBytes+1 of r.Body into a pooled buffer and
// replaces r.Body with a replay of those bytes followed by the unread rest.
// over reports a body larger than MaxBodyBytes; body is then nil.
func (c *Classifier) buffer(r *http.Request) (body []byte, over bool) {
	limit := c.maxBody()
	if r.ContentLength > limit {
		return nil, true // don't read what we won't use
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil, false
	}
	buf := bufPool.Get().(*bytes.Buffer)
	buf.Reset()
	_, err := buf.ReadFrom(io.LimitReader(r.Body, limit+1))
	rb := &replayBody{buf: buf, data: buf.Bytes(), rest: r.Body, err: err}
	r.Body = rb
	if err != nil {
		// The upstream gets what arrived, then the read error; the API
		// answers a broken body itself.
		return nil, false
	}
	if int64(buf.Len()) > limit {
		return nil, true
	}
	return buf.Bytes(), false
}

// maxPooledBuffer is the largest buffer put back in the pool; bigger ones
// are left to the garbage collector so a few huge bodies don't pin memory.
const maxPooledBuffer = 1 << 20

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// replayBody gives the bytes read to classify a request, then the unread
// rest of the original body. Close returns the buffer to the pool and
// closes the original body; it is idempotent, and reads after it fail, so a
// transport still reading after the handler returned can't see a reused
// buffer.
type replayBody struct {
	mu   sync.Mutex
	buf  *bytes.Buffer // nil once closed
	data []byte        // the unread part of buf
	rest io.ReadCloser
	err  error // the error that ended the buffered read, if any
}

var errBodyClosed = errors.New("capgate: read on closed request body")

func (b *replayBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf == nil {
		return 0, errBodyClosed
	}
	if len(b.data) > 0 {
		n := copy(p, b.data)
		b.data = b.data[n:]
		return n, nil
	}
	if b.err != nil {
		return 0, b.err
	}
	return b.rest.Read(p)
}

func (b *replayBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf == nil {
		return nil
	}
	if b.buf.Cap() <= maxPooledBuffer {
		bufPool.Put(b.buf)
	}
	b.buf, b.data = nil, nil
	return b.rest.Close()
}

// truthy reports whether a query parameter is set to true, True or 1
// (compared case-insensitively). The API reads the last value given.
func truthy(vals []string) bool {
	if len(vals) == 0 {
		return false
	}
	v := vals[len(vals)-1]
	return v == "1" || strings.EqualFold(v, "true")
}

// parseBody reports the number of rows of a heavy call's JSON body: rows a
// non-empty array and, when needQ, q a non-empty string.
func parseBody(body []byte, needQ bool) (rows int, ok bool) {
	var doc struct {
		Rows []skipValue     `json:"rows"`
		Q    json.RawMessage `json:"q"`
	}
	if err := json.Unmarshal(body, &doc); err != nil || len(doc.Rows) == 0 {
		return 0, false
	}
	if needQ {
		var q string
		if len(doc.Q) == 0 || doc.Q[0] != '"' || json.Unmarshal(doc.Q, &q) != nil || q == "" {
			return 0, false
		}
	}
	return len(doc.Rows), true
}

// skipValue decodes any JSON value into nothing, so counting rows costs no
// copy of them.
type skipValue struct{}

func (*skipValue) UnmarshalJSON([]byte) error { return nil }
