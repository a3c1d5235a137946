// Package http holds capgate's HTTP adapters: the classifier that reads a
// request as the API does and evaluates the policy's routes, the
// net/http middleware that gates heavy calls (who calls: an
// identity.Identifier), and the gateway (a reverse proxy with the middleware
// in front). Outside this package, import it as capgatehttp.
package http

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/policy"
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

// Classifier reads a request as the API reads it and evaluates it against
// a policy's routes (package policy): the method in upper case, the target
// cut at "#", the decoded path after PathPrefix, the query as Django's
// QueryDict reads it, the headers as gunicorn hands them over, and the
// body in the charset its Content-Type names. A request no route matches
// is not heavy, and its body is never read unless some route could match
// it by its method, path, query and headers. A body it cannot read as the
// API would (larger than MaxBodyBytes, a charset it does not decode, a
// Content-Encoding) makes every body predicate hold and every body field
// zero (policy.Request.BodyUnreadable): the call is counted, never passed
// ungated. The zero value classifies with the built-in policy
// (policy.OCL), no prefix, DefaultMaxBodyBytes and no budget.
//
// A Classifier is safe for concurrent use; SetPolicy may be called while
// it is in use, and don't change its fields once it is in use.
type Classifier struct {
	// PathPrefix is where the API is mounted (--path-prefix), such as
	// "/api"; default "" (the root).
	PathPrefix string
	// MaxBodyBytes is the most of a body read to classify it. A larger
	// body on a route that reads the body is counted as unreadable and
	// reaches the API byte for byte. Default DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Oversize, if set, is called for each call whose body is larger than
	// MaxBodyBytes (for a metric).
	Oversize func()
	// Budget, if set, bounds the bytes buffered for classification across
	// every call in flight (--max-buffered-bytes). Default: unbounded.
	Budget *Budget
	// BufferFull, if set, is called each time ClassifyBody returns
	// ErrBufferFull (for a metric).
	BufferFull func()

	ev atomic.Pointer[policy.Evaluator] // SetPolicy's; nil: the built-in policy's
	// follow, if set, gives the policy to evaluate per request (the
	// middleware's own default Classifier follows its gate's config);
	// SetPolicy is then not used.
	follow func(ctx context.Context) *policy.Policy
}

// SetPolicy makes the classifier evaluate p's routes from the next
// request on (a reloaded policy). Safe while the classifier is in use.
func (c *Classifier) SetPolicy(p *policy.Policy) {
	c.ev.Store(policy.NewEvaluator(p, c.PathPrefix))
}

// evaluator returns the evaluator in force, made now for the built-in
// policy if SetPolicy was never called (for follow's policy at ctx, when
// the classifier follows one).
func (c *Classifier) evaluator(ctx context.Context) *policy.Evaluator {
	ev := c.ev.Load()
	want := (*policy.Policy)(nil)
	if c.follow != nil {
		want = c.follow(ctx)
	}
	switch {
	case ev != nil && (want == nil || ev.Policy() == want):
		return ev
	case want == nil:
		want = policy.OCL()
	}
	next := policy.NewEvaluator(want, c.PathPrefix)
	if c.ev.CompareAndSwap(ev, next) {
		return next
	}
	if ev := c.ev.Load(); ev != nil && ev.Policy() == want {
		return ev
	}
	return next
}

// Policy returns the policy the classifier evaluates.
func (c *Classifier) Policy() *policy.Policy { return c.evaluator(context.Background()).Policy() }

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

// request returns r as the policy reads it, without its body. Call
// normalizeRequest first.
func request(r *http.Request) policy.Request {
	// Django decodes the query in the request's charset too (utf-16
	// percent escapes can spell semantic=true): in a charset that does
	// not read ASCII as ASCII, the query is unreadable here, and every
	// query predicate holds.
	return policy.Request{Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery, Header: r.Header,
		QueryUnreadable: !asciiCharset(contentType(r))}
}

// HeavyPath decides from the method, path, query and headers alone (no
// body read) whether r may be a heavy call: whether a route of the policy
// could match it. The call it returns has no route yet (ClassifyBody
// finds it). Call normalizeRequest first.
func (c *Classifier) HeavyPath(r *http.Request) (capgate.Call, bool) {
	req := request(r)
	return capgate.Call{}, c.evaluator(r.Context()).MayMatch(&req)
}

// ClassifyBody reads the body of a call HeavyPath accepted (when the
// routes that may match read it) and evaluates the request: heavy with its
// route and fields, or not heavy. It returns ErrBufferFull (and not heavy)
// when the Budget is spent; r.Body then still gives every byte.
func (c *Classifier) ClassifyBody(r *http.Request, call capgate.Call) (capgate.Call, bool, error) {
	ev := c.evaluator(r.Context())
	req := request(r)
	if !ev.MayMatch(&req) {
		return capgate.Call{}, false, nil // the policy changed since HeavyPath
	}
	if ev.ReadsBody(&req) {
		if err := c.readBody(r, &req); err != nil {
			return capgate.Call{}, false, err
		}
	}
	var f policy.Fields
	route := ev.Evaluate(&req, &f)
	if route == nil {
		return capgate.Call{}, false, nil
	}
	call.Route, call.Fields = route, f
	call.Fields.Detach() // the call outlives the buffered body
	return call, true, nil
}

// readBody reads r's body into req as the API would: req.Body in UTF-8,
// or req.BodyUnreadable. r.Body is replaced by a replay of what was read.
func (c *Classifier) readBody(r *http.Request, req *policy.Request) error {
	for _, ce := range r.Header.Values("Content-Encoding") {
		if ce = strings.TrimSpace(ce); ce != "" && !strings.EqualFold(ce, "identity") {
			req.BodyUnreadable = true // compressed: unreadable here
			return nil
		}
	}
	body, over, err := c.buffer(r)
	switch {
	case err != nil:
		if c.BufferFull != nil {
			c.BufferFull()
		}
		return err
	case over:
		if c.Oversize != nil {
			c.Oversize()
		}
		req.BodyUnreadable = true
	case body != nil:
		doc, readable := decodeCharset(contentType(r), body)
		req.Body, req.BodyUnreadable = doc, !readable
	}
	return nil
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
	whole := rerr == nil && int64(buf.Len()) <= limit
	rb := &replayBody{buf: buf, data: buf.Bytes(), rest: r.Body, err: rerr, budget: c.Budget, reserved: reserved,
		whole: whole, eof: whole}
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
	// eof: rest has ended; it is not read again (net/http's server may
	// have closed it by then, and a read would fail the forwarded body).
	eof bool

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
	if b.eof {
		return 0, io.EOF
	}
	n, err := b.rest.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
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
