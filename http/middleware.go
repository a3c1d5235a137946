package http

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"time"
	"unicode/utf8"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/answer"
	"github.com/capgate/capgate/header"
	"github.com/capgate/capgate/idempotency"
	"github.com/capgate/capgate/identity"
	"github.com/capgate/capgate/internal/randhex"
	"github.com/capgate/capgate/internal/truncate"
	"github.com/capgate/capgate/journal"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
)

// headerTraceID is the load balancer's trace header, which the
// middleware reads for the log line.
const headerTraceID = "X-Amzn-Trace-Id"

// Middleware gates the heavy calls of the handler it wraps. For each
// request it:
//
//   - classifies it; a call that is not heavy, and a preflight OPTIONS,
//     goes to the handler untouched;
//   - in mode off, lets the call go on untouched, looking nobody up;
//   - asks who is calling. One rule for every identifier: a caller with
//     no credential at all (no Authorization, no Cookie) goes on
//     untouched (the API can't know it either, and answers it); a
//     credential the identifier can't verify (a token it doesn't know,
//     an expired or wrongly signed JWT, a header identity from an
//     untrusted peer, a lookup the API answered 401, a username too long)
//     is gated as the user "(anonymous)" of the default tier, or, where
//     the policy's identity.unverified is "refuse" and the mode enforce,
//     answered 401; never passed ungated. A lookup that fails gates the
//     call as the user "(unidentified)" under its own small limit
//     (AdmitOptions.Unidentified): a failure never lets a call through uncounted;
//   - fills in the call's attribution from the policy's client-metadata
//     and request-source headers, X-Amzn-Trace-Id and X-Request-ID (kept, or made
//     up as 32 hex characters, forwarded to the handler and returned; the
//     log line's cid is its first 200 characters);
//   - admits it;
//   - answers a refused call itself with the 429, never calling the
//     handler; otherwise runs the handler with the capacity headers set on
//     whatever it writes (errors included), and releases the call when the
//     handler returns, however it ends (the handler finds the admission
//     with AdmissionFrom). A handler that panics before
//     writing gets a 500 with the capacity headers; one that panics later
//     (or with http.ErrAbortHandler) has its panic passed on to net/http.
//
// Create one with NewMiddleware. Safe for concurrent use.
type Middleware struct {
	next     http.Handler
	gate     *capgate.Gate
	classify twoStep // WithClassifier, WithClassifyFunc
	identify identity.Identifier

	anonymous string // WithAnonymousAs: the user unverified credentials are gated as

	cors   corsPolicy
	logger *slog.Logger
	now    func() time.Time
	cut    context.Context  // withShutdown; nil: never cut
	jn     *journal.Journal // withJournal; nil: no journal
	// repeater runs the calls' idempotency (WithRepeater); nil: none.
	repeater *idempotency.Repeater
}

// Option configures a Middleware (or a Gateway, which passes them on).
type Option func(*Middleware)

// WithCORSOrigins sets the origins the API allows (--cors-origins), for
// the CORS headers of the middleware's own 429: an Origin in the list is
// echoed with credentials allowed, and "*" in the list allows any other
// origin without credentials. Default (nil or empty): echo the request's
// Origin without credentials (credentials only for an origin listed). Every 429 also carries Vary: Origin and
// the capacity headers in Access-Control-Expose-Headers.
func WithCORSOrigins(origins []string) Option {
	return func(m *Middleware) { m.cors = newCORSPolicy(origins) }
}

// WithClassifier makes the middleware classify with c in two steps: from
// the path and query first (Classifier.HeavyPath), then, once the caller is
// known and not anonymous, from the body (Classifier.ClassifyBody, under
// c.Budget; past it the call gets 503 with Retry-After). Default: a
// Classifier of the policy of the gate's config (at the root,
// DefaultMaxBodyBytes, no budget).
func WithClassifier(c *Classifier) Option {
	return func(m *Middleware) {
		if c != nil {
			m.classify = c
		}
	}
}

// WithClassifyFunc makes the middleware classify with f, for an API other
// whose calls a policy's routes can't describe: in one step, before asking who calls (a degenerate two-step
// classification whose second step keeps what the first decided). It
// replaces WithClassifier's Classifier.
func WithClassifyFunc(f ClassifyFunc) Option {
	return func(m *Middleware) {
		if f != nil {
			m.classify = oneStep(f)
		}
	}
}

// twoStep is how the middleware classifies: from the path and query first,
// before asking who calls; then, for a caller who is not anonymous, from
// the body. *Classifier is one; oneStep makes a ClassifyFunc one.
type twoStep interface {
	HeavyPath(r *http.Request) (capgate.Call, bool)
	ClassifyBody(r *http.Request, call capgate.Call) (capgate.Call, bool, error)
}

// oneStep is a ClassifyFunc as a two-step classifier: its first step
// decides everything, its second keeps the call as it is.
type oneStep ClassifyFunc

func (f oneStep) HeavyPath(r *http.Request) (capgate.Call, bool) { return f(r) }

func (oneStep) ClassifyBody(_ *http.Request, call capgate.Call) (capgate.Call, bool, error) {
	return call, true, nil
}

// WithAnonymousAs names the user under which the middleware gates the
// heavy calls of callers who carry a credential (an Authorization or
// Cookie header) the identifier can't verify: the API may know a caller
// capgate does not (a token missing from the tokens file, a JWT signed by
// a key the JWKS file lacks yet, a session cookie), so such a call shares
// one lane of the policy's default tier, never passes untouched. Default
// (and for ""): identity.AnonymousUser, "(anonymous)". A call with no
// credential at all passes untouched: the API can't know its caller
// either.
func WithAnonymousAs(id string) Option {
	return func(m *Middleware) {
		if id != "" {
			m.anonymous = id
		}
	}
}

// WithLogger sets the logger of the middleware's own warnings (a handler
// panic). Default slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(m *Middleware) { m.logger = l }
}

// WithRepeater makes the middleware run its calls' idempotency (the
// config key idempotency) with r, the process's one Repeater over the
// middleware's gate (or the gate it was derived from by Gate.ForTask), so
// that every front door of the process shares its counts of waiting
// repeats and its watches of the keys joined. Default: a Repeater of the
// middleware's own (idempotency.New of its gate); nil: none, every call
// runs as with idempotency off.
func WithRepeater(r *idempotency.Repeater) Option {
	return func(m *Middleware) { m.repeater = r }
}

// withClock sets the clock queue_ms is measured against. Default time.Now.
func withClock(now func() time.Time) Option {
	return func(m *Middleware) { m.now = now }
}

// withShutdown makes calls still running when cut is done end with
// errShutdown (GatewayConfig.Shutdown). Default nil: never.
func withShutdown(cut context.Context) Option {
	return func(m *Middleware) { m.cut = cut }
}

// withJournal makes the middleware queue the store leases of the calls it
// holds in j, and their removal once released. Default nil: none.
func withJournal(j *journal.Journal) Option {
	return func(m *Middleware) { m.jn = j }
}

// errShutdown is the error of a call cut short because the gateway shut
// down before it ended: its log line has error "shutdown".
var errShutdown = errors.New("shutdown")

// NewMiddleware returns next behind the gate. identify says who makes the
// calls; the calls are classified by the policy of the gate's config
// unless WithClassifier or WithClassifyFunc say otherwise. It returns an
// error if next, gate or identify is nil.
func NewMiddleware(next http.Handler, gate *capgate.Gate, identify identity.Identifier, opts ...Option) (*Middleware, error) {
	switch {
	case next == nil:
		return nil, errors.New("capgate middleware: no handler")
	case gate == nil:
		return nil, errors.New("capgate middleware: no gate")
	case identify == nil:
		return nil, errors.New("capgate middleware: no identifier")
	}
	// The default classifier evaluates the policy of the gate's config,
	// whichever it is.
	m := &Middleware{next: next, gate: gate, identify: identify,
		anonymous: identity.AnonymousUser, logger: slog.Default(), now: time.Now, repeater: idempotency.New(gate)}
	m.classify = &Classifier{follow: m.policyInForce}
	for _, o := range opts {
		o(m)
	}
	return m, nil
}

// ServeHTTP implements http.Handler.
func (m *Middleware) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	normalizeRequest(r)
	if r.Method == http.MethodOptions {
		m.next.ServeHTTP(w, r) // preflight: the API answers
		return
	}
	body := r.Body
	defer func() {
		if r.Body != body && r.Body != nil {
			// The classifier buffered the body; give its buffer back
			// once the handler is done with it.
			r.Body.Close()
		}
	}()
	// The path and query first, then who calls, and only then the body
	// (under the Classifier's Budget), so an anonymous caller never makes
	// the gateway buffer anything.
	call, maybe := m.classify.HeavyPath(r)
	if !maybe {
		m.next.ServeHTTP(w, r)
		return
	}
	ctx := r.Context()
	if cfg, _ := m.gate.Config(ctx); cfg.Mode == settings.ModeOff {
		m.next.ServeHTTP(w, r) // mode off: untouched, and nobody looked up
		return
	}
	caller, ok, unverified, err := m.identifyCaller(ctx, r)
	if err == nil && !ok {
		m.next.ServeHTTP(w, r) // no credential at all: the API answers
		return
	}
	call, heavy, cerr := m.classify.ClassifyBody(r, call)
	if errors.Is(cerr, ErrBufferFull) {
		// Counted by Classifier.BufferFull; a flood must not flood the log.
		m.logger.Debug("capgate: request buffer full; answering 503", "path", r.URL.Path)
		markHeavy(ctx, "")
		m.cors.refusal(w.Header(), r.Header.Get("Origin"), m.policyInForce(ctx))
		m.writeErrorRetry(w, r, policy.AnswerBusy, detailBusy, bufferFullRetryAfter)
		return
	}
	if !heavy {
		m.next.ServeHTTP(w, r)
		return
	}
	if unverified && m.refusesUnverified(ctx) {
		m.unauthorized(w, r)
		return
	}
	m.gated(w, r, call, caller, err)
}

// bufferFullRetryAfter is the Retry-After, in seconds, of the 503 answered
// when the classification buffer budget is spent.
const bufferFullRetryAfter = 1

// identifyCaller asks who calls and applies the one identity rule: a
// caller the identifier names is itself (unless its username is longer
// than MaxUsername: logged, and not believed); one it can't name who
// carries a credential is unverified, gated as the anonymous user; one
// with no credential at all is ok false (passed untouched). err is the
// identifier's failure (the caller is then unidentified).
// policyInForce returns the policy of the config in force: the routes and
// names the gate decides by, and the shape of capgate's own answers.
func (m *Middleware) policyInForce(ctx context.Context) *policy.Policy {
	cfg, _ := m.gate.Config(ctx)
	return cfg.Policy()
}

func (m *Middleware) identifyCaller(ctx context.Context, r *http.Request) (caller identity.Caller, ok, unverified bool, err error) {
	caller, ok, err = m.identify.Identify(ctx, r)
	if err != nil {
		return identity.Caller{}, false, false, err
	}
	if ok && !identity.ValidUsername(caller.UserID) {
		m.logger.Warn("capgate: username too long; the caller is gated as anonymous",
			"length", utf8.RuneCountInString(caller.UserID), "max", identity.MaxUsername)
		return identity.Caller{UserID: m.anonymous}, true, true, nil
	}
	if !ok && hasCredentials(r) {
		return identity.Caller{UserID: m.anonymous}, true, true, nil
	}
	return caller, ok, false, nil
}

// refusesUnverified reports whether a heavy call whose credential can't
// be verified is answered 401 rather than gated as anonymous: the
// policy's identity.unverified is "refuse" and the mode is enforce (in
// shadow capgate changes no answer). A config source that panics refuses
// nothing (the call is gated), as the gate reads it.
func (m *Middleware) refusesUnverified(ctx context.Context) (refuse bool) {
	if m.gate.Source == nil {
		return false
	}
	defer func() {
		if recover() != nil {
			refuse = false
		}
	}()
	cfg := m.gate.Source.Config(ctx)
	return cfg.Mode == settings.ModeEnforce && cfg.Policy().Identity.RefuseUnverified
}

// detailUnverified is the detail of the 401 of a credential capgate can't
// verify, under identity.unverified: refuse.
const detailUnverified = "The credentials could not be verified."

// unauthorized answers a heavy call whose credential can't be verified
// with 401 and the policy's scheme as the challenge, never calling the
// handler.
func (m *Middleware) unauthorized(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	p := m.policyInForce(ctx)
	markHeavy(ctx, "")
	m.cors.refusal(w.Header(), r.Header.Get("Origin"), p)
	w.Header().Set("WWW-Authenticate", cmp.Or(p.Identity.Scheme, "Bearer"))
	m.writeError(w, r, policy.AnswerUnverified, detailUnverified)
}

// hasCredentials reports whether r carries anything the API could
// authenticate it by: any Authorization or Cookie value, every one of them
// read (gunicorn joins them; a blank first Cookie line hides nothing).
func hasCredentials(r *http.Request) bool {
	return joined(r.Header, "Authorization") != "" || joined(r.Header, "Cookie") != ""
}

// gated admits a heavy call and serves it (or refuses it).
// noRoomToWait is AdmitOptions.MayWait for a call that may not wait.
func noRoomToWait() (func(), bool) { return nil, false }

func (m *Middleware) gated(w http.ResponseWriter, r *http.Request, call capgate.Call, caller identity.Caller, err error) {
	ctx := r.Context()
	// The request id as the API reads it: gunicorn joins repeated lines.
	rid := joined(r.Header, header.RequestID)
	hadID := rid != ""
	if !hadID {
		rid = newRequestID()
	}
	p := m.policyInForce(ctx)
	m.attribute(&call, r, wireOf(p))
	call.CID = truncate.Runes(rid, maxRequestID)
	markHeavy(ctx, rid)
	if err == nil {
		call.UserID = caller.UserID
		call.Tier = p.Identity.TierOf(caller.Staff, caller.Groups)
	}
	if m.refuseUnreadable(ctx, call) {
		m.writeCallError(w, r, rid, policy.AnswerBodyUnreadable, detailBodyUnreadable)
		return
	}
	// A repeat of a call running or answered is answered here, before it
	// could take a lane place (idempotency.go). Only a caller named as
	// itself is deduplicated: not one the lookup failed for, nor the
	// shared anonymous user of unverified credentials.
	identified := err == nil && caller.UserID != m.anonymous
	rp, note, done := m.repeat(w, r, call, identified, rid)
	if done {
		return
	}
	var adm *capgate.Admission
	if err != nil {
		// A failed lookup still counts: the call is gated as
		// (unidentified), under its own small limit.
		adm = m.gate.AdmitWith(ctx, call, capgate.AdmitOptions{Unidentified: fmt.Errorf("identity: %w", err), DedupErr: note})
	} else if errors.Is(note, idempotency.ErrRepeatWaiters) {
		// A repeat of a call running, past the bounds of waiting calls
		// (joiners counted): decided at once, as a call with no room to
		// wait (refused with the usual hints when a lane is full).
		adm = m.gate.AdmitWith(ctx, call, capgate.AdmitOptions{MayWait: noRoomToWait, DedupErr: note})
	} else {
		adm = m.gate.AdmitWith(ctx, call, capgate.AdmitOptions{DedupErr: note})
	}
	out := adm.Outcome()
	if out.Decision == capgate.DecisionNone {
		rp.Finish(ctx, nil)
		m.next.ServeHTTP(w, r) // mode off (since the check above): untouched
		return
	}
	if m.jn != nil {
		if token, keys, ok := adm.StoreLease(); ok {
			m.jn.Add(token, keys, out.MaxHold)
			defer m.jn.Remove(token) // after the release below (deferred calls run last first)
		}
	}
	defer adm.Release(ctx)
	defer func() {
		if m.cut != nil && m.cut.Err() != nil {
			adm.Interrupt(errShutdown) // before Release writes the line
		}
	}()
	var aw *answerWriter // the first call's answer, kept for its repeats
	if rp != nil {
		defer func() {
			// Runs after the handler's panic handling below and before
			// Release: a panic still here (a cut stream:
			// ErrAbortHandler) keeps nothing, nor does a call cut at
			// shutdown; once its line is written the key is settled.
			p := recover()
			var answer []byte
			if p == nil && aw != nil && (m.cut == nil || m.cut.Err() == nil) {
				answer = aw.answer()
			}
			rp.Finish(ctx, answer)
			if p != nil {
				panic(p)
			}
		}()
	}

	if out.Decision == capgate.DecisionRefused {
		m.refuse(w, r, out, rid)
		return
	}
	actx := withAdmission(ctx, adm) // AdmissionFrom
	if rp != nil {
		actx = withRepeatHolder(actx) // its retry may join it (clientgone.go)
	}
	r = r.WithContext(actx)
	if !hadID {
		// The handler's request gets a header of its own, so the
		// caller's request is left as it was.
		r.Header = cloneHeaderWith(r.Header, header.RequestID, rid)
	}
	gw := &gatedWriter{ResponseWriter: w, adm: adm, rid: rid}
	if rp != nil {
		aw = &answerWriter{ResponseWriter: w, max: rp.MaxAnswerBytes()}
		gw.ResponseWriter = aw
	}
	defer func() {
		if p := recover(); p != nil {
			m.recovered(gw, r, p)
		}
	}()
	m.next.ServeHTTP(gw, r)
	// Send what is buffered before the deferred Release: the leases are
	// given back once the response has reached the client, not before.
	_ = http.NewResponseController(gw).Flush()
}

// refuse writes the 429 of a refused call.
func (m *Middleware) refuse(w http.ResponseWriter, r *http.Request, o capgate.Outcome, rid string) {
	h := w.Header()
	m.cors.refusal(h, r.Header.Get("Origin"), o.Policy)
	h.Set("Content-Type", "application/json")
	answer.SetGated(h, o, rid)
	answer.WriteRefusal(w, o)
}

// recovered handles a panic of the handler. http.ErrAbortHandler goes on
// up, as net/http expects. Any other panic is logged with its stack; if
// nothing was written yet the client gets a 500 carrying the capacity
// headers, else the panic goes on up and net/http drops the connection.
// The admission is released either way (a deferred Release).
func (m *Middleware) recovered(gw *gatedWriter, r *http.Request, p any) {
	if p == http.ErrAbortHandler || gw.wrote {
		panic(p)
	}
	m.logger.Error("capgate: handler panicked", "method", r.Method, "path", r.URL.Path,
		"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
	answer.WriteText(gw, m.policyInForce(r.Context()), answer.Own{Kind: policy.AnswerInternal, Detail: "Internal Server Error", RequestID: gw.rid})
}

// firstValue is h.Get(k) for a canonical k, which h.Get would copy to
// canonicalise.
func firstValue(h http.Header, k string) string {
	if v := h[k]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// cloneHeaderWith returns a deep copy of h with k (canonical) set to v: as
// h.Clone and Set would, with room made for k up front and all the values
// in one backing array.
func cloneHeaderWith(h http.Header, k, v string) http.Header {
	nv := 1
	for _, vv := range h {
		nv += len(vv)
	}
	sv := make([]string, nv)
	h2 := make(http.Header, len(h)+1)
	for hk, vv := range h {
		if vv == nil {
			h2[hk] = nil // as Header.Clone keeps a nil value
			continue
		}
		n := copy(sv, vv)
		h2[hk] = sv[:n:n]
		sv = sv[n:]
	}
	sv[0] = v
	h2[k] = sv[:1:1]
	return h2
}

// newRequestID returns 32 random hex characters.
func newRequestID() string {
	return randhex.String(16)
}
