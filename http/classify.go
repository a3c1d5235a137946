// Package http holds capgate's HTTP adapters: the OCL call classifier, the
// net/http middleware that gates heavy calls (who calls: an
// identity.Identifier), and the gateway (a reverse proxy with the middleware
// in front). Outside this package, import it as capgatehttp.
package http

import (
	"bytes"
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

// ErrBufferFull is returned by Classifier.ClassifyBody when reading the body
// would take the bytes buffered for classification, across every call in
// flight, past Classifier.Budget: the middleware answers 503 with
// Retry-After.
var ErrBufferFull = errors.New("capgate: too many request bytes buffered for classification")

// ClassifyFunc decides whether r is a heavy call and describes it. It may
// read r.Body; if it does, it replaces r.Body with one that replays every
// byte, so the handler behind sees the body unchanged. The middleware
// closes that replacement once the handler has returned.
type ClassifyFunc func(r *http.Request) (capgate.Call, bool)

// Classifier is the OCL profile: a POST to
// <prefix>/concepts/$match/ whose JSON body has a non-empty rows array and
// whose query has semantic or reranker truthy, and a POST to
// <prefix>/concepts/$rerank/ with a non-empty rows array and a truthy q.
// The trailing slash is optional and "$" may arrive as %24. It reads the
// request as the API (Django REST framework behind gunicorn) does: the
// method in any case, the target cut at "#", the last of repeated query
// parameters, JSON keys matched exactly with the last of duplicates, and
// the body in the charset its Content-Type names. A body that is not JSON,
// or whose rows are missing or empty, is not heavy. A heavy-path body it
// cannot read as the API would (larger than MaxBodyBytes, a charset it does
// not decode, a Content-Encoding) is gated as a bulk call of unknown rows
// (Rows 0), never passed ungated.
//
// The zero value classifies with no prefix, DefaultMaxBodyBytes and no
// budget. A Classifier is safe for concurrent use; don't change its fields
// once it is in use.
type Classifier struct {
	// PathPrefix is where the API is mounted (--path-prefix), such as
	// "/api"; default "" (the root).
	PathPrefix string
	// MaxBodyBytes is the most of a body read to classify it. A larger
	// heavy-path body is gated as bulk and reaches the API byte for byte.
	// Default DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Oversize, if set, is called for each heavy-path call whose body is
	// larger than MaxBodyBytes (for a metric).
	Oversize func()
	// Budget, if set, bounds the bytes buffered for classification across
	// every call in flight (--max-buffered-bytes). Default: unbounded.
	Budget *Budget
	// BufferFull, if set, is called each time ClassifyBody returns
	// ErrBufferFull (for a metric).
	BufferFull func()
}

// Classify is a ClassifyFunc: HeavyPath, then ClassifyBody. A call whose
// body would overrun the Budget is not heavy.
func (c *Classifier) Classify(r *http.Request) (capgate.Call, bool) {
	normalizeRequest(r)
	call, ok := c.HeavyPath(r)
	if !ok {
		return capgate.Call{}, false
	}
	call, heavy, _ := c.ClassifyBody(r, call)
	return call, heavy
}

// HeavyPath decides from the method, path and query alone (no body read)
// whether r may be a heavy call, and describes what it can. Call
// normalizeRequest first.
func (c *Classifier) HeavyPath(r *http.Request) (capgate.Call, bool) {
	if r.Method != http.MethodPost {
		return capgate.Call{}, false
	}
	endpoint := c.endpoint(r.URL.Path)
	call := capgate.Call{Endpoint: endpoint}
	switch endpoint {
	case capgate.EndpointMatch:
		if !asciiCharset(contentType(r)) {
			// Django decodes the query in the body's charset too (utf-16
			// percent escapes can spell semantic=true): unreadable here,
			// so assume the most lanes.
			call.Semantic, call.Reranker = true, true
			return call, true
		}
		call.Semantic = truthy(queryLast(r.URL.RawQuery, "semantic"))
		call.Reranker = truthy(queryLast(r.URL.RawQuery, "reranker"))
		if !call.Semantic && !call.Reranker {
			return capgate.Call{}, false // lexical: not gated, body untouched
		}
	case capgate.EndpointRerank:
	default:
		return capgate.Call{}, false
	}
	return call, true
}

// ClassifyBody reads the body of a call HeavyPath accepted and completes
// call: heavy with its rows, heavy as bulk (Rows 0) when the body can't be
// read as the API would, or not heavy. It returns ErrBufferFull (and not
// heavy) when the Budget is spent; r.Body then still gives every byte.
func (c *Classifier) ClassifyBody(r *http.Request, call capgate.Call) (capgate.Call, bool, error) {
	for _, ce := range r.Header.Values("Content-Encoding") {
		if ce = strings.TrimSpace(ce); ce != "" && !strings.EqualFold(ce, "identity") {
			return call, true, nil // compressed: unreadable here, gate as bulk
		}
	}
	body, over, err := c.buffer(r)
	if err != nil {
		if c.BufferFull != nil {
			c.BufferFull()
		}
		return capgate.Call{}, false, err
	}
	if over {
		if c.Oversize != nil {
			c.Oversize()
		}
		return call, true, nil
	}
	if body == nil {
		return capgate.Call{}, false, nil
	}
	doc, readable := decodeCharset(contentType(r), body)
	if !readable {
		return call, true, nil
	}
	rows, ok := parseBody(doc, call.Endpoint == capgate.EndpointRerank)
	if !ok {
		return capgate.Call{}, false, nil
	}
	call.Rows = rows
	return call, true, nil
}

// contentType returns the last Content-Type of r: gunicorn keeps the last
// one given, where Header.Get returns the first.
func contentType(r *http.Request) string {
	v := r.Header.Values("Content-Type")
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
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

// readChunk is how much of a body of unknown length is reserved from the
// Budget at a time.
const readChunk = 64 << 10

// buffer reads at most MaxBodyBytes+1 of r.Body into a pooled buffer and
// replaces r.Body with a replay of those bytes followed by the unread rest.
// over reports a body larger than MaxBodyBytes; body is then nil. The bytes
// read stay reserved from the Budget until the replacement is closed.
func (c *Classifier) buffer(r *http.Request) (body []byte, over bool, err error) {
	limit := c.maxBody()
	if r.ContentLength > limit {
		return nil, true, nil // don't read what we won't use
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil, false, nil
	}
	var reserved int64
	known := r.ContentLength > 0
	if known {
		// Known length (net/http holds the body to it): reserve it at once,
		// so a refusal reads nothing.
		reserved = r.ContentLength + 1
		if !c.Budget.take(reserved) {
			return nil, false, ErrBufferFull
		}
	}
	buf := bufPool.Get().(*bytes.Buffer)
	buf.Reset()
	var rerr error
	for {
		if !known && int64(buf.Len()) >= reserved {
			// Unknown length: reserve as the bytes arrive.
			if !c.Budget.take(readChunk) {
				// What was read goes back in front of the rest, for
				// whoever closes the body.
				r.Body = &replayBody{buf: buf, data: buf.Bytes(), rest: r.Body, budget: c.Budget, reserved: reserved}
				return nil, false, ErrBufferFull
			}
			reserved += readChunk
		}
		want := min(reserved, limit+1) - int64(buf.Len())
		if want <= 0 {
			break
		}
		n, err := buf.ReadFrom(io.LimitReader(r.Body, want))
		if err != nil {
			rerr = err
			break
		}
		if n < want {
			break // EOF
		}
	}
	// Give back what was reserved and not used.
	if extra := reserved - int64(buf.Len()); extra > 0 {
		c.Budget.give(extra)
		reserved = int64(buf.Len())
	}
	rb := &replayBody{buf: buf, data: buf.Bytes(), rest: r.Body, err: rerr, budget: c.Budget, reserved: reserved,
		whole: rerr == nil && int64(buf.Len()) <= limit}
	r.Body = rb
	if rerr != nil {
		// The upstream gets what arrived, then the read error; the API
		// answers a broken body itself.
		return nil, false, nil
	}
	if int64(buf.Len()) > limit {
		return nil, true, nil
	}
	return buf.Bytes(), false, nil
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
	// whole: data is the whole body (read to its end, within
	// MaxBodyBytes), so it can be hashed (idempotency.go).
	whole bool

	budget   *Budget // given back reserved bytes on Close
	reserved int64
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
	b.budget.give(b.reserved)
	return b.rest.Close()
}

// truthy reports whether a query parameter's value is true, True or 1
// (compared case-insensitively, a superset of what the API takes).
func truthy(v string) bool {
	return v == "1" || strings.EqualFold(v, "true")
}
