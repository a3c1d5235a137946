package http

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strings"
	"sync"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/answer"
	"github.com/capgate/capgate/identity"
	"github.com/capgate/capgate/journal"
	"github.com/capgate/capgate/policy"
)

// GatewayConfig is what a Gateway needs. Upstream, Gate and Identify are
// required; every other field has a default.
type GatewayConfig struct {
	// Upstream is the API (--upstream), an absolute http(s) URL; a path in
	// it prefixes every request's path.
	Upstream *url.URL
	// Gate admits heavy calls.
	Gate *capgate.Gate
	// Identify says who calls (an identity.Upstream, Header or Tokens).
	Identify identity.Identifier

	// Classifier decides which calls are heavy. Default: the OCL profile
	// with no path prefix and DefaultMaxBodyBytes.
	Classifier *Classifier
	// Transport carries requests to the upstream. Default NewTransport().
	Transport http.RoundTripper
	// TrustedProxies are the peers whose X-Forwarded-For, -Proto and -Host
	// are kept (the client address is appended to X-Forwarded-For); from
	// any other peer they are replaced. Default: none.
	TrustedProxies []netip.Prefix
	// PreserveHost sends the client's Host header to the upstream instead
	// of the upstream's own host. Default false.
	PreserveHost bool

	// UpgradePaths are the path prefixes on which a request may upgrade the
	// connection (WebSocket; --upgrade-paths). Everywhere else, on the
	// heavy paths always, and for h2c always, the Upgrade header is
	// dropped and the request goes on as a plain one, classified like any
	// other: a tunnel would carry calls capgate never sees. Default: none.
	UpgradePaths []string

	// Staff, if set, serves every path under /capacity/ (the staff API);
	// it gets the request unchanged. Default: none, /capacity/ is proxied.
	Staff http.Handler
	// Metrics, if set, serves GET /metrics, to staff callers only (Identify
	// says who) unless PublicMetrics. Default: none, /metrics is proxied.
	Metrics http.Handler
	// PublicMetrics serves Metrics to anyone (--public-metrics). Default
	// false: staff only; anonymous → 401, non-staff → 403.
	PublicMetrics bool
	// Health answers GET /livez, /healthz (its alias) and /readyz; it
	// never fails a probe because a store is down, and its bodies say only
	// ready or not (publicReadyz): the checks' details are for staff.
	// Default (nil): live and ready, with no checks.
	Health *Health

	// MetricsToken, if set, is a static credential for GET /metrics
	// (--metrics-token): "Authorization: Bearer <token>" is served without
	// asking Identify, so a scraper keeps working while the API (whose
	// /user/ lookup names staff) is down. Default "": staff only.
	MetricsToken string
	// StaffIdentify, if set, says who calls /metrics instead of Identify
	// (an identity.Staff: the static staff tokens first). Default: Identify.
	StaffIdentify identity.Identifier

	// Observer, if set, is told every request's status and class, the
	// upstream's latency and its failures. Default: none.
	Observer GatewayObserver
	// AccessLog, if set, gets one JSON line per request (--access-log):
	// its request id (kept, or made up and then forwarded and returned),
	// method, path, status, class, size, duration and peer. Default: none.
	AccessLog capgate.Sink

	// Shutdown, if set, is done when the gateway stops waiting for the
	// calls in flight (its server's shutdown timeout passed, or a second
	// signal came). A call still running then is cut: its upstream request
	// is cancelled, even a counted call's (which otherwise outlives its
	// client), its line says error "shutdown", and its leases are released
	// as the handler returns. Default nil: never.
	Shutdown context.Context

	// Journal, if set, is an open journal (journal.Open) where the
	// gateway records the store leases of the calls it holds, off their
	// path, so that once this process is dead another of its group
	// releases them. Its opener closes it once the gateway's calls have
	// ended. Set it only for a lane store that outlives the process
	// (Redis). Default nil: none, a killed gateway's leases expire after
	// lease_seconds.
	Journal *journal.Journal

	// Logger gets upstream failures and handler panics. Default
	// slog.Default().
	Logger *slog.Logger
	// Options configure the middleware (WithTierGroups, WithCORSOrigins).
	Options []Option
}

// Gateway is the reverse proxy of capgate serve: it serves
// GET /livez, /healthz and /readyz, GET /metrics and the staff API under /capacity/ itself,
// and sends everything else to the upstream through the Middleware, so
// heavy calls are gated, refused calls never reach the API, and a call's
// leases are released once its response has been sent, or, if its client
// went away, once the upstream has finished the call (bounded by
// max_hold_seconds; see hold.go). With a Journal it records those leases
// in the background, so that once it is dead another process of its
// group releases them (package journal). Bodies pass
// byte for byte; responses of unknown length and event streams are flushed
// as they arrive. An upstream failure becomes 502, an upstream timeout 504 (both with a JSON {"detail", "request_id"}
// body); a client gone before the answer is sent nothing (499 is only
// logged, as nginx does). With an Observer or an AccessLog every request is
// recorded once answered (observe.go).
//
// Create one with NewGateway. Safe for concurrent use.
type Gateway struct {
	cfg    GatewayConfig
	logger *slog.Logger
	gated  *Middleware
	lines  sync.Pool // *[]byte: the access log's line buffers (the sink copies a line)
}

// NewGateway returns a gateway with cfg's defaults filled in. It returns
// an error if a required field is missing or Upstream is not an absolute
// http(s) URL.
func NewGateway(cfg GatewayConfig) (*Gateway, error) {
	u := cfg.Upstream
	if u == nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("gateway: the upstream must be an absolute http(s) URL")
	}
	if cfg.Classifier == nil {
		cfg.Classifier = &Classifier{}
	}
	if cfg.Transport == nil {
		cfg.Transport = NewTransport()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	g := &Gateway{cfg: cfg, logger: cfg.Logger}
	transport := cfg.Transport
	if cfg.Observer != nil {
		transport = timedTransport{next: transport, obs: cfg.Observer}
	}
	proxy := &httputil.ReverseProxy{
		Rewrite:        g.rewrite,
		Transport:      transport,
		ModifyResponse: readUsage, // a route's usage (usage.go)
		ErrorHandler:   g.proxyError,
		ErrorLog:       slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
		BufferPool:     NewBufferPool(),
		// FlushInterval 0: known-length bodies are buffered as usual;
		// ReverseProxy flushes event streams and unknown-length bodies at
		// once (its flush interval is -1 for those).
	}
	opts := append([]Option{WithLogger(cfg.Logger)}, cfg.Options...)
	opts = append(opts, WithClassifier(cfg.Classifier), withShutdown(cfg.Shutdown), withJournal(cfg.Journal))
	mw, err := NewMiddleware(holdUpstream(fullDuplex(proxy), cfg.Shutdown), cfg.Gate, cfg.Identify, opts...)
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	g.gated = mw
	return g, nil
}

// fullDuplex lets an upstream's answer pass on while the request body is
// still being sent to it: without it, net/http's server reads (and closes)
// the rest of the request body itself as soon as the answer starts, under
// the transport still sending it, which cuts the upstream connection
// mid-answer — or, when the client sends the rest only once it sees the
// answer begin, waits for it forever.
func fullDuplex(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength != 0 && r.ProtoMajor == 1 {
			// Not supported: HTTP/2 is full duplex already.
			_ = http.NewResponseController(w).EnableFullDuplex()
		}
		next.ServeHTTP(w, r)
	})
}

// ServeHTTP implements http.Handler. It routes by exact path so the API's
// own paths reach it unchanged (no cleaning or redirects).
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	normalizeRequest(r)
	if r.Method == "PRI" && r.ProtoMajor == 2 {
		// net/http hands the HTTP/2 prior-knowledge preface to handlers so
		// an h2c handler can take over the connection; capgate speaks no
		// h2c, and passing it on could open a tunnel to an API that does.
		answer.Text(w, http.StatusHTTPVersionNotSupported, "HTTP/2 without TLS is not supported.")
		return
	}
	if g.observed() {
		g.serveObserved(w, r, g.own(r), g.route)
		return
	}
	g.route(w, r)
}

// own reports whether r is for one of capgate's own endpoints (class
// staff): the probes, /metrics, the staff API.
func (g *Gateway) own(r *http.Request) bool {
	p := r.URL.Path
	get := r.Method == http.MethodGet || r.Method == http.MethodHead
	return (p == "/livez" || p == "/healthz" || p == "/readyz") && get ||
		p == "/metrics" && get && g.cfg.Metrics != nil ||
		strings.HasPrefix(p, "/capacity/") && g.cfg.Staff != nil
}

// route serves r by its exact path.
func (g *Gateway) route(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	get := r.Method == http.MethodGet || r.Method == http.MethodHead
	switch {
	case (p == "/livez" || p == "/healthz") && get:
		g.health().publicLivez().ServeHTTP(w, r)
	case p == "/readyz" && get:
		g.health().publicReadyz().ServeHTTP(w, r)
	case p == "/metrics" && get && g.cfg.Metrics != nil:
		g.metrics(w, r)
	case strings.HasPrefix(p, "/capacity/") && g.cfg.Staff != nil:
		g.cfg.Staff.ServeHTTP(w, r)
	default:
		// The header stays in memory while the call runs: it counts in
		// the same budget as the bodies buffered to classify calls.
		hb := headerBytes(r)
		budget := g.cfg.Classifier.Budget
		if !budget.take(hb) {
			if f := g.cfg.Classifier.BufferFull; f != nil {
				f()
			}
			answer.WriteText(w, g.policy(r), answer.Own{Kind: policy.AnswerBusy, Detail: detailBusy, RetryAfter: bufferFullRetryAfter})
			return
		}
		defer budget.give(hb)
		// One reading: the middleware classifies and identifies the
		// request as it will be forwarded (outgoing.go).
		out, err := g.outgoing(r, hasUpgrade(r.Header) && g.upgradeAllowed(r))
		if err != nil {
			answer.WriteText(w, g.policy(r), answer.Own{Kind: policy.AnswerBadRequest, Detail: "Bad Request: " + err.Error() + "."})
			return
		}
		g.gated.ServeHTTP(w, out)
	}
}

// metrics serves /metrics to staff only, unless PublicMetrics. The
// metrics token is checked first, and StaffIdentify's static tokens before
// any lookup, so neither needs the API.
func (g *Gateway) metrics(w http.ResponseWriter, r *http.Request) {
	if !g.cfg.PublicMetrics && !identity.HasToken(r, g.cfg.MetricsToken) {
		ids := g.cfg.Identify
		if g.cfg.StaffIdentify != nil {
			ids = g.cfg.StaffIdentify
		}
		if _, ok := requireStaff(w, r, ids, g.logger, g.cfg.Classifier.evaluator(r.Context()).Policy().Identity.Scheme); !ok {
			return
		}
	}
	g.cfg.Metrics.ServeHTTP(w, r)
}

// hasUpgrade reports whether h asks to upgrade the connection.
func hasUpgrade(h http.Header) bool {
	return h.Get("Upgrade") != ""
}

// upgradeAllowed reports whether r may upgrade: never to h2c, never on a
// heavy path, else only under UpgradePaths.
func (g *Gateway) upgradeAllowed(r *http.Request) bool {
	for _, v := range r.Header.Values("Upgrade") {
		for p := range strings.SplitSeq(v, ",") {
			if proto, _, _ := strings.Cut(strings.TrimSpace(p), "/"); strings.EqualFold(proto, "h2c") {
				return false
			}
		}
	}
	if g.cfg.Classifier.evaluator(r.Context()).RoutePath(r.URL.Path) {
		return false
	}
	for _, p := range g.cfg.UpgradePaths {
		if p != "" && strings.HasPrefix(r.URL.Path, p) {
			return true
		}
	}
	return false
}

func (g *Gateway) health() *Health {
	if g.cfg.Health == nil {
		return &Health{}
	}
	return g.cfg.Health
}

// rewrite builds the upstream request: the upstream's URL joined with the
// request's, the query byte for byte, and X-Forwarded-* set as a
// well-behaved proxy does. The headers capgate drops were dropped before
// the call was classified (outgoing).
func (g *Gateway) rewrite(pr *httputil.ProxyRequest) {
	pr.SetURL(g.cfg.Upstream)
	pr.Out.URL.RawQuery = outgoingQuery(g.cfg.Upstream.RawQuery, pr.In.URL.RawQuery)
	if g.cfg.PreserveHost {
		pr.Out.Host = pr.In.Host
	}
	if !g.trusted(pr.In.RemoteAddr) {
		pr.SetXForwarded()
		return
	}
	// From a trusted proxy: append to its chain, keep what it said of the
	// original request.
	in := pr.In.Header
	pr.Out.Header["X-Forwarded-For"] = in["X-Forwarded-For"]
	pr.SetXForwarded()
	for _, k := range []string{"X-Forwarded-Proto", "X-Forwarded-Host"} {
		if v := in.Values(k); len(v) > 0 {
			pr.Out.Header[k] = v
		}
	}
}

// policy returns the policy in force for r: the one capgate's own
// answers are shaped by.
func (g *Gateway) policy(r *http.Request) *policy.Policy {
	return g.gated.policyInForce(r.Context())
}

// capgateHeaderPrefix starts the headers an auth proxy sets for
// Header.
const capgateHeaderPrefix = "X-Capgate-"

func (g *Gateway) trusted(remoteAddr string) bool {
	if len(g.cfg.TrustedProxies) == 0 {
		return false
	}
	return identity.TrustedPeer(g.cfg.TrustedProxies, remoteAddr)
}

// statusClientClosedRequest is the status logged when the client went away
// before the upstream answered (nginx's 499). It is never sent.
const statusClientClosedRequest = 499

// proxyError answers a request the upstream could not: see statusOf.
func (g *Gateway) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	status := statusOf(r.Context(), err)
	if status == statusClientClosedRequest {
		// Nobody to answer: 499 is not a status a client may be sent.
		g.logger.Debug("capgate: client went away", "method", r.Method, "path", r.URL.Path)
		return
	}
	g.logger.Warn("capgate: upstream failed", "method", r.Method, "path", r.URL.Path,
		"status", status, "error", err)
	if g.cfg.Observer != nil {
		g.cfg.Observer.UpstreamError(upstreamErrorKind(err))
	}
	kind, detail := policy.AnswerUpstreamUnreachable, detailBadGateway
	if status == http.StatusGatewayTimeout {
		kind, detail = policy.AnswerUpstreamTimeout, detailGatewayTimeout
	}
	g.gated.writeError(w, r, kind, detail)
}

// statusOf turns a proxying error into the status answered: 499 when the
// request's context ended (the client went away; for a held call, its
// client left and max_hold_seconds passed), 504 when the upstream timed
// out, and 502 for any other upstream failure (a cancellation the client
// did not cause included: a connected client is sent a real status).
func statusOf(ctx context.Context, err error) int {
	if ctx.Err() != nil {
		return statusClientClosedRequest
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return http.StatusGatewayTimeout
	}
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return http.StatusGatewayTimeout
	}
	return http.StatusBadGateway
}

// NewBufferPool returns a httputil.BufferPool of the 32 KiB buffers a
// proxy copies response bodies through, so it doesn't allocate one per
// response. The gateway uses one of its own.
func NewBufferPool() httputil.BufferPool { return &copyBuffers{} }

// copyBufferSize is the size of the buffers of a copyBuffers.
const copyBufferSize = 32 << 10

// copyBuffers pools the buffers as array pointers: a Put of a slice would
// allocate its header on every response.
type copyBuffers struct{ pool sync.Pool }

func (c *copyBuffers) Get() []byte {
	if b, ok := c.pool.Get().(*[copyBufferSize]byte); ok {
		return b[:]
	}
	return new([copyBufferSize]byte)[:]
}

func (c *copyBuffers) Put(b []byte) {
	if cap(b) >= copyBufferSize {
		c.pool.Put((*[copyBufferSize]byte)(b[:copyBufferSize]))
	}
}
