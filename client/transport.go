package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/capgate/capgate/header"
	"github.com/capgate/capgate/internal/jsonenc"
)

// Defaults of a Transport's settings.
const (
	DefaultMaxInFlight       = 4
	DefaultBulkBudget        = 30 * time.Minute
	DefaultInteractiveBudget = 5 * time.Minute
	DefaultMaxRetries        = 2
	DefaultMaxDialRetries    = 2
	DefaultDialBackoff       = 500 * time.Millisecond
	DefaultMaxRetryAfter     = time.Hour
	DefaultProbeInterval     = 5 * time.Second
	DefaultIdempotencyHeader = header.IdempotencyKey
	DefaultServerWait        = 20 * time.Second
	DefaultUserLane          = "user"
	DefaultTierLane          = "tier"
)

// orString returns s, or def when s is empty.
func orString(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Transport is an http.RoundTripper for the heavy calls of a capgate-gated
// API. A request whose context carries a Call (WithCall) is a heavy call;
// any other request goes to Base untouched.
//
// The model. The server caps heavy calls in flight and answers a call that
// would pass a cap with 429, Retry-After and a JSON body naming the full
// lane (its scope). The Transport tells the server it handles refusals (it
// merges the policy's aware field, "capacity_aware": "true", into its
// client-metadata header: Names; a policy without one is not told), and on a
// refusal it waits and retries, so the caller sees either the API's answer
// or, when the server stays busy past the call's wait budget, a
// *ThrottledError: not run, try later. A Transport keeps, per server
// (scheme://host) and shared by all its calls:
//
//   - pauses per scope. A capacity 429 pauses its scope for Retry-After
//     plus 0–50 % jitter: a refusal of the caller's own lane (UserLane)
//     holds back that user's bulk calls, of the tier lane (TierLane) the
//     calls of that tier, of any other lane the calls that take it
//     (Call.Lanes; every heavy call when Lanes is nil), whatever their
//     key: a refusal names its lane, not the key that filled (a lane keyed
//     by a model holds back the calls of every model). A refusal of a
//     bulk call never holds back an interactive one unless the lane is
//     paused (its limit is 0). A rate-limit 429 (any other 429) pauses
//     that user's calls, apart from capacity. New calls that a pause
//     concerns wait behind it.
//   - an in-flight bound per user: one call until the server has answered
//     one, then the last Suggested-Concurrency header of a response
//     the gate decided (admitted or refused), never above MaxInFlight; a
//     first answer without a suggestion (the call was not gated, or only
//     shadow-refused) lifts the bound to MaxInFlight. A suggestion of 0
//     sends nothing for the response's Retry-After (at least
//     ProbeInterval), then one call at a time until the server suggests
//     more.
//   - one queue: when a slot frees or a pause ends, calls that were refused
//     or failed go first; then interactive calls; then bulk calls. Within
//     each, the calls of the user served least recently go first
//     (round-robin across users), then the oldest. A refused call keeps its
//     place.
//
// Pacing. A capacity 429 from a lane that is not paused, with the
// Suggested-Spacing-Ms header (how often the lane frees a slot),
// is paced instead of waited out: the refused call and the calls its pause
// holds back leave the pause one at a time, in queue order, every half
// spacing (at least MinSpacing) plus jitter, for the longer of Retry-After
// and four spacings. Each attempt of a call with a Timeout is cut off after
// ServerWait + Timeout.
//
// Waiting. The delay of a 429 is its Retry-After (seconds or HTTP-date),
// else the body's retry_after, else 5 s doubling with each such 429 of the
// call up to 60 s; at least 1 s, at most MaxRetryAfter. The call gives up at
// once, without waiting, when the server's delay (jitter aside, so the
// choice does not depend on chance) is longer than what is left of its
// budget (BulkBudget, InteractiveBudget, or Call.Budget) or than the time
// to its context's deadline; it waits out jitter only as far as that
// allows. Only time held back by pauses
// and backoffs counts against the budget, not time queued for a slot.
//
// Failures. A 503 is retried MaxRetries times after its Retry-After (at
// most 60 s) or 3 s × 4^n, then ends as a *ThrottledError of Kind
// Unavailable. A failure to connect (nothing was sent) is retried
// MaxDialRetries times after DialBackoff doubling. A failure after the
// request was sent (a 502, a 504, a timeout or reset) may have run on the
// API, so it is retried (MaxRetries times, 3 s × 4^n) only when the call has
// an idempotency key, sent in IdempotencyHeader on every attempt; otherwise
// a 502/504 response is returned as it is and a transport error wraps
// ErrOutcomeUnknown. Every other response is returned as it is. The
// request body is read once (or replayed through GetBody) for retries.
//
// Cancelling the request's context stops any wait and the request in
// flight at once. A heavy call holds its in-flight slot until its response
// body is read to the end or closed: always close it.
//
// Set the exported fields before the first request; zero values mean the
// defaults. A Transport is safe for concurrent use; share one per process
// so that every call to a server sees the same pauses.
type Transport struct {
	// Base sends the requests; http.DefaultTransport when nil.
	Base http.RoundTripper
	// Names are the capacity headers and refusal code of the server's
	// policy (its names section): header.NewNames of them, with
	// RefusalCode set. The zero value is header.Generic, a policy written
	// for capgate (Capgate-*).
	Names header.Names
	// UserLane and TierLane name the server's lanes keyed by the caller
	// and by the tier (DefaultUserLane "user", DefaultTierLane "tier"): a
	// refusal of the one pauses that user's calls, of the other the calls
	// of that tier.
	UserLane, TierLane string
	// MaxInFlight caps each user's heavy calls in flight to one server
	// (DefaultMaxInFlight, 4). The server's suggestion lowers it, never
	// raises it.
	MaxInFlight int
	// BulkBudget is the total wait of a Bulk call (DefaultBulkBudget, 30 min).
	BulkBudget time.Duration
	// InteractiveBudget is the total wait of an Interactive call
	// (DefaultInteractiveBudget, 5 min).
	InteractiveBudget time.Duration
	// MaxRetries bounds the retries of 503s, and of ambiguous failures of
	// calls with an idempotency key (DefaultMaxRetries, 2); negative: none.
	MaxRetries int
	// MaxDialRetries bounds the retries of failures to connect
	// (DefaultMaxDialRetries, 2); negative: none.
	MaxDialRetries int
	// DialBackoff is the first wait after a failure to connect, doubling
	// (DefaultDialBackoff, 500 ms).
	DialBackoff time.Duration
	// MaxRetryAfter caps the delay taken from a 429 (DefaultMaxRetryAfter,
	// 1 h), so a broken header can't pause a scope for ever.
	MaxRetryAfter time.Duration
	// ProbeInterval is the least wait after a suggested concurrency of 0
	// (DefaultProbeInterval, 5 s).
	ProbeInterval time.Duration
	// IdempotencyHeader carries Call.IdempotencyKey
	// (DefaultIdempotencyHeader).
	IdempotencyHeader string
	// ServerWait is how long the gateway may hold a call waiting for a
	// slot before it answers (its config's wait.max_seconds;
	// DefaultServerWait, 20 s; negative: the gateway never holds calls). An
	// attempt of a call with a Timeout is cut off after ServerWait +
	// Timeout, so a call that waited its turn at the gateway is not taken
	// for a hung one.
	ServerWait time.Duration
	// Rand returns the jitter draws, uniform in [0, 1); math/rand/v2's
	// Float64 when nil. It must be safe for concurrent use.
	Rand func() float64

	mu      sync.Mutex
	servers map[string]*server
	stats   Stats
}

// NewTransport returns a Transport over base (http.DefaultTransport when
// nil) with every setting at its default.
func NewTransport(base http.RoundTripper) *Transport {
	return &Transport{
		Base:              base,
		MaxInFlight:       DefaultMaxInFlight,
		BulkBudget:        DefaultBulkBudget,
		InteractiveBudget: DefaultInteractiveBudget,
		MaxRetries:        DefaultMaxRetries,
		MaxDialRetries:    DefaultMaxDialRetries,
		DialBackoff:       DefaultDialBackoff,
		MaxRetryAfter:     DefaultMaxRetryAfter,
		ProbeInterval:     DefaultProbeInterval,
		IdempotencyHeader: DefaultIdempotencyHeader,
		ServerWait:        DefaultServerWait,
	}
}

// attemptTimeout returns how long one attempt of c may take: the server's
// wait plus the call's own time; 0 (no limit but the context) without a
// Call.Timeout.
func (t *Transport) attemptTimeout(c Call) time.Duration {
	if c.Timeout <= 0 {
		return 0
	}
	return max(or(t.ServerWait, DefaultServerWait), 0) + c.Timeout
}

func or[T int | time.Duration](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

func retries(n, def int) int {
	switch {
	case n < 0:
		return 0
	case n == 0:
		return def
	}
	return n
}

func (t *Transport) base() http.RoundTripper {
	if t.Base == nil {
		return http.DefaultTransport
	}
	return t.Base
}

func (t *Transport) idempotencyHeader() string {
	if t.IdempotencyHeader == "" {
		return DefaultIdempotencyHeader
	}
	return t.IdempotencyHeader
}

func (t *Transport) jitter(d time.Duration) time.Duration {
	u := rand.Float64()
	if t.Rand != nil {
		u = t.Rand()
	}
	return time.Duration(float64(d) * 0.5 * u)
}

func (t *Transport) budget(c Call) time.Duration {
	switch {
	case c.Budget > 0:
		return c.Budget
	case c.Class == Interactive:
		return or(t.InteractiveBudget, DefaultInteractiveBudget)
	}
	return or(t.BulkBudget, DefaultBulkBudget)
}

// server returns the state kept for origin.
func (t *Transport) server(origin string) *server {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.servers == nil {
		t.servers = make(map[string]*server)
	}
	s := t.servers[origin]
	if s == nil {
		s = newServer(or(t.MaxInFlight, DefaultMaxInFlight), or(t.ProbeInterval, DefaultProbeInterval), t.jitter,
			orString(t.UserLane, DefaultUserLane), orString(t.TierLane, DefaultTierLane))
		t.servers[origin] = s
	}
	return s
}

// RoundTrip sends req. Without a Call in its context it is Base's
// RoundTrip; with one it is a heavy call, sent as the Transport's doc
// describes. Errors: a *ThrottledError (errors.Is ErrThrottled) when the
// server stayed busy; one wrapping ErrOutcomeUnknown after an ambiguous
// failure that was not retried; the context's error when it ended first;
// else Base's error, wrapped.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	call, ok := CallFrom(req.Context())
	if !ok {
		return t.base().RoundTrip(req)
	}
	res := Result{Suggested: -1}
	resp, err := t.roundTrip(req, call, &res)
	t.record(&res, err)
	if call.Result != nil {
		*call.Result = res
	}
	return resp, err
}

func (t *Transport) roundTrip(req *http.Request, call Call, res *Result) (*http.Response, error) {
	ctx := req.Context()
	if err := ctx.Err(); err != nil {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, fmt.Errorf("client: %w", err)
	}
	getBody, err := replayable(req)
	if err != nil {
		return nil, fmt.Errorf("client: read request body: %w", err)
	}
	key := call.IdempotencyKey
	if key == "" {
		key = req.Header.Get(t.idempotencyHeader())
	}
	names := t.names()
	var meta string // the client-metadata header to send; "": the policy has none
	if names.Metadata != "" && names.AwareField != "" {
		meta = awareMetadata(req.Header.Get(names.Metadata), names.AwareField)
	}
	s := t.server(strings.ToLower(req.URL.Scheme + "://" + req.URL.Host))
	deadline, _ := ctx.Deadline()
	w := s.newWaiter(call, t.budget(call), deadline)
	defer func() {
		s.mu.Lock()
		res.Waited, res.Queued = w.waited, w.queued
		s.mu.Unlock()
	}()
	maxRetries := retries(t.MaxRetries, DefaultMaxRetries)
	n429, nErr, nDial := 0, 0, 0 // delay-less 429s, error retries, dial retries
	for {
		if err := s.acquire(ctx, w); err != nil {
			if te, ok := errors.AsType[*ThrottledError](err); ok {
				te.Attempts = res.Attempts
				return nil, err
			}
			return nil, fmt.Errorf("client: %w", err)
		}
		res.Attempts++
		t.count(func(st *Stats) { st.Attempts++ })
		resp, sent, err := t.send(ctx, req, getBody, meta, key, t.attemptTimeout(call))
		now := time.Now()
		if err != nil {
			s.release(call)
			switch {
			case ctx.Err() != nil:
				return nil, fmt.Errorf("client: send: %w", err)
			case !sent && nDial < retries(t.MaxDialRetries, DefaultMaxDialRetries):
				d := or(t.DialBackoff, DefaultDialBackoff) << nDial
				nDial++
				if !t.backoff(s, w, res, 0, d, now) {
					return nil, fmt.Errorf("client: send: %w", err)
				}
			case sent && key != "" && nErr < maxRetries:
				nErr++
				if !t.backoff(s, w, res, 0, errorDelay(nErr-1), now) {
					return nil, fmt.Errorf("client: %w: %w", ErrOutcomeUnknown, err)
				}
			case sent:
				return nil, fmt.Errorf("client: %w: %w", ErrOutcomeUnknown, err)
			default:
				return nil, fmt.Errorf("client: send: %w", err)
			}
			continue
		}
		names := t.names()
		decision := resp.Header.Get(names.Decision)
		suggested := -1
		if n, err := strconv.Atoi(resp.Header.Get(names.SuggestedConcurrency)); err == nil && n >= 0 {
			suggested = n
		}
		res.Decision, res.Suggested = decision, suggested
		decided := decision == "admitted" || decision == "refused"
		tier := resp.Header.Get(names.Tier)
		if resp.Header.Get(names.Waited) != "" {
			s.serverQueues()
		}

		switch resp.StatusCode {
		case http.StatusTooManyRequests:
			r := parseRefusal(resp, now, n429, names)
			if r.source == sourceDefault {
				n429++
			}
			d := min(r.delay, or(t.MaxRetryAfter, DefaultMaxRetryAfter))
			s.observe(call.User, tier, suggested, decided, d, now)
			t.countRefusal(res, r)
			every, horizon := paceOf(r, d)
			if every > 0 {
				d = min(d, every)
			}
			s.refuse(w, r, d, t.jitter(d), every, horizon, now)
			s.release(call)
			continue
		case http.StatusServiceUnavailable:
			r := parseRefusal(resp, now, nErr, names)
			s.observe(call.User, tier, suggested, decided, 0, now)
			s.release(call)
			t.countRefusal(res, r)
			if nErr >= maxRetries || !t.backoff(s, w, res, Unavailable, r.delay, now) {
				s.mu.Lock()
				waited := w.waited
				s.mu.Unlock()
				return nil, &ThrottledError{Kind: Unavailable, RetryAfter: r.delay,
					Until: now.Add(r.delay), Waited: waited, Attempts: res.Attempts}
			}
			nErr++
			continue
		case http.StatusBadGateway, http.StatusGatewayTimeout:
			if key != "" && nErr < maxRetries {
				s.observe(call.User, tier, suggested, decided, 0, now)
				drain(resp.Body)
				s.release(call)
				nErr++
				if t.backoff(s, w, res, 0, errorDelay(nErr-1), now) {
					continue
				}
				return nil, fmt.Errorf("client: %w: %d %s, and no time left to retry",
					ErrOutcomeUnknown, resp.StatusCode, http.StatusText(resp.StatusCode))
			}
		}
		s.observe(call.User, tier, suggested, decided, 0, now)
		if decision == "admitted" {
			s.admitted()
		}
		resp.Body = &slotBody{ReadCloser: resp.Body, release: func() { s.release(call) }}
		return resp, nil
	}
}

// paceOf returns how a capacity refusal r with delay d is paced: one call
// per half the server's spacing hint (at least MinSpacing; jitter comes on
// top), for a horizon of the longer of d and four spacings (a later
// refusal extends it). Half: calls that come back exactly as often as the
// lane frees slots leave each freed slot idle for half a spacing on
// average; coming a little faster keeps the lane busy at the cost of a
// few more 429s, which take no work at the API. A refusal without a hint,
// from a paused lane, or not for capacity is not paced: it waits d.
func paceOf(r refusal, d time.Duration) (every, horizon time.Duration) {
	if r.kind != Capacity || r.paused || r.spacing <= 0 {
		return 0, 0
	}
	return max(r.spacing/2, MinSpacing), max(d, 4*r.spacing)
}

// backoff makes w wait d plus jitter before its next send, if that fits in
// its budget; false when it does not.
func (t *Transport) backoff(s *server, w *waiter, res *Result, kind Kind, d time.Duration, now time.Time) bool {
	s.mu.Lock()
	left := w.left(now)
	s.mu.Unlock()
	if d > left {
		return false
	}
	res.Retries++
	t.count(func(st *Stats) { st.Retries++ })
	s.wait(w, kind, d, min(t.jitter(d), left-d), now)
	return true
}

// send makes one attempt. sent is false only when the request surely never
// left: no connection was made and the error is a failure to dial.
func (t *Transport) send(ctx context.Context, req *http.Request, getBody func() (io.ReadCloser, error),
	meta, key string, timeout time.Duration) (resp *http.Response, sent bool, err error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer func() {
			if err != nil {
				cancel()
				return
			}
			resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel} // the body is read under the timeout too
		}()
	}
	var gotConn atomic.Bool
	trace := &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { gotConn.Store(true) }}
	r := req.Clone(httptrace.WithClientTrace(ctx, trace))
	if getBody != nil {
		body, err := getBody()
		if err != nil {
			return nil, false, fmt.Errorf("replay request body: %w", err)
		}
		r.Body, r.GetBody = body, getBody
	}
	if meta != "" {
		r.Header.Set(t.names().Metadata, meta)
	}
	if key != "" {
		r.Header.Set(t.idempotencyHeader(), key)
	}
	resp, err = t.base().RoundTrip(r)
	if err != nil {
		op, isOp := errors.AsType[*net.OpError](err)
		return nil, gotConn.Load() || !isOp || op.Op != "dial", err
	}
	return resp, true, nil
}

// replayable makes req's body readable once per attempt: through GetBody
// when set, else by reading it once into memory. It closes req.Body, as a
// RoundTripper must.
func replayable(req *http.Request) (func() (io.ReadCloser, error), error) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, nil
	}
	if req.GetBody != nil {
		_ = req.Body.Close()
		return req.GetBody, nil
	}
	data, err := io.ReadAll(req.Body)
	_ = req.Body.Close()
	if err != nil {
		return nil, err
	}
	return func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }, nil
}

// awareMetadata returns the client-metadata header h with field set to
// "true". A malformed h is replaced: the server reads it as {}.
func awareMetadata(h, field string) string {
	meta := header.ParseEventMetadata(h)
	meta[field] = "true"
	b, err := jsonenc.Marshal(meta)
	if err != nil {
		b, _ = jsonenc.Marshal(map[string]string{field: "true"})
	}
	return string(b)
}

// names returns the server's names: Names, or header.Generic.
func (t *Transport) names() *header.Names {
	if t.Names.Decision == "" {
		return &header.Generic
	}
	return &t.Names
}

// drain reads a little of body, so the connection can be reused, and
// closes it.
func drain(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, maxRefusalBody))
	_ = body.Close()
}

// cancelBody ends an attempt's timeout once its body is closed.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// slotBody gives back the call's in-flight slot once the body is read to
// the end or closed.
type slotBody struct {
	io.ReadCloser
	once    sync.Once
	release func()
}

func (b *slotBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.once.Do(b.release)
	}
	return n, err
}

func (b *slotBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.release)
	return err
}
