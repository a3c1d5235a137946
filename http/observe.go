package http

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/answer"
	"github.com/capgate/capgate/header"
	"github.com/capgate/capgate/internal/jsonenc"
	"github.com/capgate/capgate/internal/truncate"
	"github.com/capgate/capgate/policy"
)

// The classes of request a GatewayObserver and the access log tell apart.
const (
	ClassHeavy = "heavy" // gated: a heavy call (admitted, refused or unavailable), or one answered 503 while classifying it
	ClassLight = "light" // proxied ungated
	ClassStaff = "staff" // capgate's own endpoints: the staff API, /metrics, the probes
)

// GatewayObserver is told what the gateway answers; metrics.Metrics
// implements it. Its methods must not block.
type GatewayObserver interface {
	// Request: a request of class answered with code (499: the client
	// left first).
	Request(class string, code int)
	// Upstream: the upstream answered a call of class (heavy or light)
	// with its response header after d.
	Upstream(class string, d time.Duration)
	// UpstreamError: the upstream failed a call, by kind: timeout,
	// connect, reset or other. A client that left is not an upstream
	// failure and is not reported.
	UpstreamError(kind string)
}

// requestInfo is what the gateway learns of a request while serving it:
// the middleware marks a gated call heavy and gives its request id.
// Written by the handler's goroutine, read by it after the handler
// returns (and by the transport, started from it).
type requestInfo struct {
	heavy bool
	rid   string
	gone  bool // the call was cut because its client left (clientgone.go): 499
}

type requestInfoKey struct{}

func infoFrom(ctx context.Context) *requestInfo {
	i, _ := ctx.Value(requestInfoKey{}).(*requestInfo)
	return i
}

// markHeavy records on ctx's request info, if any, that the call is heavy
// and its request id.
func markHeavy(ctx context.Context, rid string) {
	if i := infoFrom(ctx); i != nil {
		i.heavy = true
		if rid != "" {
			i.rid = rid
		}
	}
}

func (i *requestInfo) class() string {
	if i != nil && i.heavy {
		return ClassHeavy
	}
	return ClassLight
}

// observed reports whether the gateway watches its requests at all: it
// costs a context and a writer per request, so only when asked for.
func (g *Gateway) observed() bool { return g.cfg.Observer != nil || g.cfg.AccessLog != nil }

// serveObserved serves r through serve, recording its status, size and
// time, then tells the observer and writes the access log line. Without
// an X-Request-ID and with an access log, the request gets one (made up,
// forwarded and returned), so the line can be joined with the API's.
func (g *Gateway) serveObserved(w http.ResponseWriter, r *http.Request, staff bool, serve func(http.ResponseWriter, *http.Request)) {
	start := time.Now()
	info := &requestInfo{rid: firstValue(r.Header, header.RequestID)}
	r = r.WithContext(context.WithValue(r.Context(), requestInfoKey{}, info)) // a copy: the server's request stays as it was
	if info.rid == "" && g.cfg.AccessLog != nil {
		info.rid = newRequestID()
		r.Header = cloneHeaderWith(r.Header, header.RequestID, info.rid)
	}
	sw := &statusWriter{ResponseWriter: w, rid: info.rid, setID: g.cfg.AccessLog != nil}
	defer func() {
		class := info.class()
		if staff {
			class = ClassStaff
		}
		code := sw.status()
		if r.Context().Err() != nil && !sw.wrote || info.gone {
			code = statusClientClosedRequest
		}
		if g.cfg.Observer != nil {
			g.cfg.Observer.Request(class, code)
		}
		if g.cfg.AccessLog != nil {
			g.accessLine(r, info.rid, class, code, sw.bytes, time.Since(start))
		}
	}()
	serve(sw, r)
}

// accessPathMax bounds the logged path, in characters.
const accessPathMax = 512

// accessLine emits one line of the access log:
//
//	{"event":"capgate_access","time":…,"request_id":…,"method":…,"path":…,
//	 "status":…,"class":…,"bytes":…,"duration_ms":…,"remote":…}
//
// time is when the request ended (RFC 3339, UTC, milliseconds); path is
// without the query, which may carry secrets; bytes counts the response
// body; remote is the peer's address.
func (g *Gateway) accessLine(r *http.Request, rid, class string, code int, n int64, d time.Duration) {
	bp, _ := g.lines.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	b := append((*bp)[:0], `{"event":"capgate_access","time":"`...)
	b = time.Now().UTC().AppendFormat(b, "2006-01-02T15:04:05.000Z07:00")
	b = append(b, `","request_id":`...)
	b = jsonenc.AppendString(b, truncate.Runes(rid, maxRequestID))
	b = append(b, `,"method":`...)
	b = jsonenc.AppendString(b, r.Method)
	b = append(b, `,"path":`...)
	b = jsonenc.AppendString(b, truncate.Runes(r.URL.Path, accessPathMax))
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, `,"class":`...)
	b = jsonenc.AppendString(b, class)
	b = append(b, `,"bytes":`...)
	b = strconv.AppendInt(b, n, 10)
	b = append(b, `,"duration_ms":`...)
	b = strconv.AppendFloat(b, float64(d.Microseconds())/1000, 'f', -1, 64)
	b = append(b, `,"remote":`...)
	b = jsonenc.AppendString(b, r.RemoteAddr)
	b = append(b, '}')
	_ = g.cfg.AccessLog.Emit(b) // a full queue drops it, and the sink counts that
	*bp = b
	g.lines.Put(bp)
}

// statusWriter records the status and body size of a response. It keeps
// http.ResponseController working through Unwrap, and implements
// http.Flusher and http.Hijacker for handlers that assert them.
type statusWriter struct {
	http.ResponseWriter
	rid   string
	setID bool // return rid as X-Request-ID
	code  int
	wrote bool
	bytes int64
}

func (w *statusWriter) status() int {
	if w.code == 0 {
		return http.StatusOK
	}
	return w.code
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.wrote, w.code = true, code
		if w.setID && w.rid != "" {
			w.ResponseWriter.Header().Set(header.RequestID, w.rid)
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	n, err := w.ResponseWriter.Write(p)
	w.bytes += int64(n)
	return n, err
}

// Flush implements http.Flusher.
func (w *statusWriter) Flush() {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack implements http.Hijacker. A hijacked connection (an upgrade the
// proxy answers itself) is recorded as 101.
func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil && !w.wrote {
		w.wrote, w.code = true, http.StatusSwitchingProtocols
	}
	return c, rw, err
}

// Unwrap returns the underlying writer, for http.ResponseController.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// timedTransport tells the observer how long the upstream took to answer
// each call with its header.
type timedTransport struct {
	next http.RoundTripper
	obs  GatewayObserver
}

func (t timedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := t.next.RoundTrip(r)
	if err == nil {
		t.obs.Upstream(infoFrom(r.Context()).class(), time.Since(start))
	}
	return resp, err
}

// upstreamErrorKind names how an upstream call failed, for
// GatewayObserver.UpstreamError: timeout, connect (no connection made),
// reset (the connection broke) or other.
func upstreamErrorKind(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return "timeout"
	}
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return "timeout"
	}
	if oe, ok := errors.AsType[*net.OpError](err); ok && oe.Op == "dial" {
		return "connect"
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return "connect"
	}
	if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "reset"
	}
	return "other"
}

// The bodies of the gateway's own 502, 503 and 504.
const (
	detailBadGateway     = "The API could not be reached. Please retry."
	detailGatewayTimeout = "The API did not answer in time. Please retry."
	detailBusy           = "The gateway is busy. Please retry."
)

// writeError answers one of the gateway's own errors of kind, in the
// policy's shape or capgate's own JSON error body (answer.WriteError), with
// the request id when known.
func (m *Middleware) writeError(w http.ResponseWriter, r *http.Request, kind policy.AnswerKind, detail string) {
	m.writeErrorRetry(w, r, kind, detail, 0)
}

// writeErrorRetry is writeError with a Retry-After of retryAfter
// seconds (0: none).
func (m *Middleware) writeErrorRetry(w http.ResponseWriter, r *http.Request, kind policy.AnswerKind, detail string, retryAfter int) {
	rid := firstValue(r.Header, header.RequestID)
	if i := infoFrom(r.Context()); i != nil && i.rid != "" {
		rid = i.rid
	}
	answer.WriteError(w, m.policyInForce(r.Context()), answer.Own{
		Kind: kind, Detail: detail, RequestID: truncate.Runes(rid, maxRequestID), RetryAfter: retryAfter})
}

// ObserveStaff wraps h, a handler of capgate's own endpoints only (the
// admin listener: staff API, /metrics, probes), so that its requests are
// told to obs as class staff and written to access, as the Gateway does
// for its own. Either may be nil; with both nil, h is returned as is.
func ObserveStaff(h http.Handler, obs GatewayObserver, access capgate.Sink) http.Handler {
	if obs == nil && access == nil {
		return h
	}
	g := &Gateway{cfg: GatewayConfig{Observer: obs, AccessLog: access}}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.serveObserved(w, r, true, h.ServeHTTP)
	})
}
