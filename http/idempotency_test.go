package http_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capgate/capgate"
	capgatehttp "github.com/capgate/capgate/http"
	"github.com/capgate/capgate/identity"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/mock"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/repeat"
	"github.com/capgate/capgate/settings"
)

// repeatStore is the memory store, telling the test each time a repeat
// reads the entry of the call it waits for, and failing claims when told.
type repeatStore struct {
	*memory.Store
	polled    chan string
	claimFail error
}

// Caps declares the store itself as the idempotency store, so the gate's
// reads and claims go through it.
func (s *repeatStore) Caps() capgate.StoreCaps {
	c := s.Store.Caps()
	c.Idempotency = s
	return c
}

func (s *repeatStore) GetRepeat(ctx context.Context, id string) (repeat.Entry, bool, error) {
	select {
	case s.polled <- id:
	default:
	}
	return s.Store.GetRepeat(ctx, id)
}

func (s *repeatStore) ClaimRepeat(ctx context.Context, id string, e repeat.Entry, ttl time.Duration, replace bool) (repeat.Entry, bool, error) {
	if s.claimFail != nil {
		return repeat.Entry{}, false, s.claimFail
	}
	return s.Store.ClaimRepeat(ctx, id, e, ttl, replace)
}

// repeatEnv is a gateway whose gate runs on a repeatStore, with
// idempotency in mode.
type repeatEnv struct {
	*env
	rs   *repeatStore
	sink *mock.Sink
}

func newRepeatEnv(t *testing.T, mode settings.IdempotencyMode, gc func(*capgatehttp.GatewayConfig)) *repeatEnv {
	t.Helper()
	return newRepeatEnvWith(t, mode, nil, gc)
}

// newRepeatEnvWith is newRepeatEnv with the config changed by cfg.
func newRepeatEnvWith(t *testing.T, mode settings.IdempotencyMode, cfg func(*settings.Config), gc func(*capgatehttp.GatewayConfig)) *repeatEnv {
	t.Helper()
	rs := &repeatStore{Store: memory.New(nil), polled: make(chan string, 1)}
	sink := &mock.Sink{}
	c := settings.Default(nil, settings.ModeShadow)
	c.Idempotency.Mode = mode
	if cfg != nil {
		cfg(&c)
	}
	gate, err := capgate.NewGate(rs, settings.NewFixed(c), sink, "task-1")
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, nil, func(conf *capgatehttp.GatewayConfig) {
		conf.Gate = gate
		if gc != nil {
			gc(conf)
		}
	})
	e.store = rs.Store      // for inFlight
	t.Cleanup(e.up.release) // before the gateway's server closes: a held call would keep it open
	return &repeatEnv{env: e, rs: rs, sink: sink}
}

// waitPolled waits until a repeat is waiting for a call running.
func (e *repeatEnv) waitPolled(t *testing.T) {
	t.Helper()
	timer := time.NewTimer(waitLimit)
	defer timer.Stop()
	select {
	case <-e.rs.polled:
	case <-timer.C:
		t.Fatal("no repeat waited for the call running")
	}
}

// line returns the ocl_capacity line whose decision is d.
func line(t *testing.T, lines []map[string]any, d string) map[string]any {
	t.Helper()
	for _, l := range lines {
		if l["decision"] == d {
			return l
		}
	}
	t.Fatalf("no line with decision %s in %v", d, lines)
	return nil
}

var keyed = []string{"Authorization", "Token t-pam", "Idempotency-Key", "k-1", "X-Test-No-Cookie", "1"}

func TestIdempotencyKeyJoinsTheCallRunning(t *testing.T) {
	e := newRepeatEnv(t, settings.IdempotencyKey, nil)
	ctx := t.Context()
	first := e.async(ctx, "POST", semanticMatch, twoRows, append(keyed, "X-Test-Do", "hold", "X-Request-ID", "cid-first")...)
	e.up.waitEntered(t)
	repeat := e.async(ctx, "POST", semanticMatch, twoRows, append(keyed, "X-Request-ID", "cid-repeat")...)
	e.waitPolled(t)
	// The repeat waits holding no lane place: only the first counts.
	if got := e.inFlight()["ocl:capacity:user:pam"]; got != 1 {
		t.Fatalf("user lane holds %d while the repeat waits; want 1", got)
	}
	e.up.release()
	a, b := recv(t, first), recv(t, repeat)
	if a.Err != nil || b.Err != nil || a.StatusCode != 200 || b.StatusCode != 200 {
		t.Fatalf("first %v %v, repeat %v %v; want both 200", a.Response, a.Err, b.Response, b.Err)
	}
	if string(b.Body) != string(a.Body) || b.Header.Get("Content-Type") != a.Header.Get("Content-Type") ||
		b.Header.Get("X-Total-Count") != "2" {
		t.Fatalf("repeat got %q %v; want the first's answer %q", b.Body, b.Header, a.Body)
	}
	if b.Header.Get("Idempotent-Replayed") != "true" || a.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("Idempotent-Replayed: first %q, repeat %q", a.Header.Get("Idempotent-Replayed"), b.Header.Get("Idempotent-Replayed"))
	}
	if b.Header.Get("X-Request-Id") != "cid-repeat" {
		t.Errorf("repeat's X-Request-ID %q; want its own", b.Header.Get("X-Request-Id"))
	}
	if n := len(e.up.requests()); n != 1 {
		t.Fatalf("the API ran %d calls; want 1", n)
	}
	lines := e.sink.Wait(t, 2, waitLimit)
	j := line(t, lines, "joined")
	if j["dedup_of"] != "cid-first" || j["cid"] != "cid-repeat" || j["user_id"] != "pam" || j["held_ms"] != nil {
		t.Fatalf("joined line %v; want dedup_of cid-first, no lane held", j)
	}
	if l := line(t, lines, "admitted"); l["dedup_of"] != nil {
		t.Fatalf("first's line %v", l)
	}
	// Finished and kept: the next repeat gets it at once.
	c := e.do(ctx, "POST", semanticMatch, twoRows, append(keyed, "X-Request-ID", "cid-late")...)
	if c.StatusCode != 200 || string(c.Body) != string(a.Body) || c.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("late repeat %d %q %v", c.StatusCode, c.Body, c.Header)
	}
	if n := len(e.up.requests()); n != 1 {
		t.Fatalf("the API ran %d calls; want 1", n)
	}
	if r := line(t, e.sink.Wait(t, 3, waitLimit), "replayed"); r["dedup_of"] != "cid-first" {
		t.Fatalf("replayed line %v", r)
	}
}

func TestIdempotencyKeyReusedOrMalformed(t *testing.T) {
	e := newRepeatEnv(t, settings.IdempotencyKey, nil)
	ctx := t.Context()
	if r := e.do(ctx, "POST", semanticMatch, twoRows, keyed...); r.StatusCode != 200 {
		t.Fatalf("first: %d", r.StatusCode)
	}
	other := `{"rows":[{"name":"rash"}]}`
	r := e.do(ctx, "POST", semanticMatch, other, keyed...)
	var body struct {
		ErrorCode string `json:"error_code"`
	}
	if r.StatusCode != 422 || json.Unmarshal(r.Body, &body) != nil || body.ErrorCode != "idempotency_key_reused" {
		t.Fatalf("same key, other body: %d %s; want 422 idempotency_key_reused", r.StatusCode, r.Body)
	}
	// Another query is another request too.
	if r := e.do(ctx, "POST", semanticMatch+"&limit=1", twoRows, keyed...); r.StatusCode != 422 {
		t.Fatalf("same key, other query: %d", r.StatusCode)
	}
	for _, bad := range []string{"", `"`, strings.Repeat("x", 256), "a b", "caf\xc3\xa9"} {
		r := e.do(ctx, "POST", semanticMatch, twoRows, "Authorization", "Token t-pam", "Idempotency-Key", bad)
		if r.StatusCode != 400 || !strings.Contains(string(r.Body), "idempotency_key_invalid") {
			t.Errorf("key %q: %d %s; want 400", bad, r.StatusCode, r.Body)
		}
	}
	r = e.do(ctx, "POST", semanticMatch, twoRows, "Authorization", "Token t-pam", "Idempotency-Key", "a", "Idempotency-Key", "b")
	if r.StatusCode != 400 {
		t.Errorf("two keys: %d; want 400", r.StatusCode)
	}
	// A quoted key (Structured Fields) is the same key as the bare one.
	r = e.do(ctx, "POST", semanticMatch, twoRows, "Authorization", "Token t-pam", "Idempotency-Key", `"k-1"`, "X-Test-No-Cookie", "1")
	if r.StatusCode != 200 || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("quoted key: %d %v; want the kept answer", r.StatusCode, r.Header)
	}
	if n := len(e.up.requests()); n != 1 {
		t.Fatalf("the API ran %d calls; want 1", n)
	}
}

// Keys never cross callers: pat's call with pam's key runs.
func TestIdempotencyKeysNeverCrossCallers(t *testing.T) {
	e := newRepeatEnv(t, settings.IdempotencyKey, nil)
	ctx := t.Context()
	e.do(ctx, "POST", semanticMatch, twoRows, keyed...)
	r := e.do(ctx, "POST", semanticMatch, twoRows, "Authorization", "Token t-pat", "Idempotency-Key", "k-1", "X-Test-No-Cookie", "1")
	if r.StatusCode != 200 || r.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("other caller: %d %v; want a call of its own", r.StatusCode, r.Header)
	}
	if n := len(e.up.requests()); n != 2 {
		t.Fatalf("the API ran %d calls; want 2", n)
	}
}

// A 5xx and an answer with Set-Cookie are not kept: the next repeat runs.
func TestIdempotencyAnswersNotKept(t *testing.T) {
	for _, tc := range []struct {
		name string
		hdr  []string
	}{
		{"5xx", []string{"X-Test-Do", "500"}},
		{"Set-Cookie", nil},
		{"cut stream", []string{"X-Test-Do", "partial"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newRepeatEnv(t, settings.IdempotencyKey, nil)
			h := append([]string{"Authorization", "Token t-pam", "Idempotency-Key", "k"}, tc.hdr...)
			for range 2 {
				req := newRequest(t, t.Context(), "POST", e.front.URL+semanticMatch, twoRows, h...)
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
					if resp.Header.Get("Idempotent-Replayed") != "" {
						t.Fatal("an answer that must not be kept was replayed")
					}
				}
			}
			if n := len(e.up.requests()); n != 2 {
				t.Fatalf("the API ran %d calls; want 2", n)
			}
		})
	}
}

// Mode auto: a repeat without a key joins a call running; once it has
// finished, the same call runs again.
func TestIdempotencyAutoJoinsOnlyACallRunning(t *testing.T) {
	e := newRepeatEnv(t, settings.IdempotencyAuto, nil)
	ctx := t.Context()
	hdr := []string{"Authorization", "Token t-pam", "X-Test-No-Cookie", "1"}
	first := e.async(ctx, "POST", semanticMatch, twoRows, append(hdr, "X-Test-Do", "hold")...)
	e.up.waitEntered(t)
	repeat := e.async(ctx, "POST", semanticMatch, twoRows, hdr...)
	e.waitPolled(t)
	e.up.release()
	a, b := recv(t, first), recv(t, repeat)
	if a.StatusCode != 200 || b.StatusCode != 200 || string(a.Body) != string(b.Body) || b.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("first %d, repeat %d %v", a.StatusCode, b.StatusCode, b.Header)
	}
	c := e.do(ctx, "POST", semanticMatch, twoRows, hdr...)
	if c.StatusCode != 200 || c.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("after the first finished: %d %v; want a call of its own", c.StatusCode, c.Header)
	}
	if n := len(e.up.requests()); n != 2 {
		t.Fatalf("the API ran %d calls; want 2", n)
	}
}

// A caller that goes away while it waits leaves at once; the first call
// goes on and its line stands.
func TestIdempotencyRepeatLeavesAtOnce(t *testing.T) {
	e := newRepeatEnv(t, settings.IdempotencyKey, nil)
	first := e.async(t.Context(), "POST", semanticMatch, twoRows, append(keyed, "X-Test-Do", "hold")...)
	e.up.waitEntered(t)
	ctx, cancel := context.WithCancel(t.Context())
	repeat := e.async(ctx, "POST", semanticMatch, twoRows, keyed...)
	e.waitPolled(t)
	cancel()
	if r := recv(t, repeat); r.Err == nil && r.Response != nil {
		t.Fatalf("the repeat got an answer after its client left: %d", r.StatusCode)
	}
	l := e.sink.Wait(t, 1, waitLimit)[0]
	if l["decision"] != "joined" || !strings.Contains(l["error"].(string), "caller gone") {
		t.Fatalf("line %v; want joined, caller gone", l)
	}
	e.up.release()
	if a := recv(t, first); a.StatusCode != 200 {
		t.Fatalf("first: %d", a.StatusCode)
	}
}

// Fails open: a store that can't claim lets the call run, and its line
// says why.
func TestIdempotencyStoreFailureFailsOpen(t *testing.T) {
	e := newRepeatEnv(t, settings.IdempotencyKey, nil)
	e.rs.claimFail = errors.New("redis down")
	for range 2 {
		if r := e.do(t.Context(), "POST", semanticMatch, twoRows, keyed...); r.StatusCode != 200 || r.Header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("%d %v", r.StatusCode, r.Header)
		}
	}
	if n := len(e.up.requests()); n != 2 {
		t.Fatalf("the API ran %d calls; want 2", n)
	}
	// Idempotency can only turn deduplication off, never limiting: the
	// failure does not open the skip window, so each call asks the store
	// again, and both are counted in their lanes.
	lines := e.sink.Wait(t, 2, waitLimit)
	for _, l := range lines {
		if de, _ := l["dedup_error"].(string); !strings.Contains(de, "redis down") {
			t.Fatalf("line %v; want dedup_error saying why", l)
		}
		if l["decision"] != "admitted" {
			t.Fatalf("line %v; want admitted (counted), not %v", l, l["decision"])
		}
	}
}

// Callers the gateway could not identify are never deduplicated.
func TestIdempotencyNeverForUnidentified(t *testing.T) {
	e := newRepeatEnv(t, settings.IdempotencyKey, func(c *capgatehttp.GatewayConfig) {
		c.Identify = failingIdentifier{}
	})
	for range 2 {
		if r := e.do(t.Context(), "POST", semanticMatch, twoRows, keyed...); r.StatusCode != 200 || r.Header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("%d %v", r.StatusCode, r.Header)
		}
	}
	if n := len(e.up.requests()); n != 2 {
		t.Fatalf("the API ran %d calls; want 2", n)
	}
}

type failingIdentifier struct{}

func (failingIdentifier) Identify(context.Context, *http.Request) (identity.Caller, bool, error) {
	return identity.Caller{}, false, errors.New("lookup failed")
}

// Mode off (the default) changes nothing.
func TestIdempotencyOffByDefault(t *testing.T) {
	e := newRepeatEnv(t, settings.IdempotencyOff, nil)
	for range 2 {
		e.do(t.Context(), "POST", semanticMatch, twoRows, keyed...)
	}
	if n := len(e.up.requests()); n != 2 {
		t.Fatalf("the API ran %d calls; want 2", n)
	}
}

// A gateway given no Repeater (WithRepeater(nil)) runs every call as with
// idempotency off, whatever the config says: a repeat runs again.
func TestIdempotencyWithNoRepeater(t *testing.T) {
	e := newRepeatEnv(t, settings.IdempotencyKey, func(c *capgatehttp.GatewayConfig) {
		c.Options = append(c.Options, capgatehttp.WithRepeater(nil))
	})
	for range 2 {
		if r := e.do(t.Context(), "POST", semanticMatch, twoRows, keyed...); r.StatusCode != 200 || r.Header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("%d, Idempotent-Replayed %q; want 200, run again", r.StatusCode, r.Header.Get("Idempotent-Replayed"))
		}
	}
	if n := len(e.up.requests()); n != 2 {
		t.Fatalf("the API ran %d calls; want 2", n)
	}
}

// Two gateways on one store: a repeat sent to the second joins the call
// running through the first.
func TestIdempotencyAcrossGateways(t *testing.T) {
	e := newRepeatEnv(t, settings.IdempotencyKey, nil)
	c := settings.Default(nil, settings.ModeShadow)
	c.Idempotency.Mode = settings.IdempotencyKey
	sink2 := &mock.Sink{}
	gate2, err := capgate.NewGate(e.rs, settings.NewFixed(c), sink2, "task-2")
	if err != nil {
		t.Fatal(err)
	}
	second := newEnv(t, nil, func(conf *capgatehttp.GatewayConfig) {
		conf.Gate = gate2
		u, _ := url.Parse(e.up.URL)
		conf.Upstream = u // the first env's API
	})
	ctx := t.Context()
	first := e.async(ctx, "POST", semanticMatch, twoRows, append(keyed, "X-Test-Do", "hold", "X-Request-ID", "cid-a")...)
	e.up.waitEntered(t)
	repeat := second.async(ctx, "POST", semanticMatch, twoRows, keyed...)
	e.waitPolled(t)
	e.up.release()
	a, b := recv(t, first), recv(t, repeat)
	if a.StatusCode != 200 || b.StatusCode != 200 || string(a.Body) != string(b.Body) || b.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("first %d, repeat through the other gateway %d %v", a.StatusCode, b.StatusCode, b.Header)
	}
	if n := len(e.up.requests()); n != 1 {
		t.Fatalf("the API ran %d calls; want 1", n)
	}
	if l := sink2.Wait(t, 1, waitLimit)[0]; l["decision"] != "joined" || l["dedup_of"] != "cid-a" || l["task"] != "task-2" {
		t.Fatalf("second gateway's line %v", l)
	}
}

// Every policy: a call classified by a ClassifyFunc (its body never read
// by a Classifier) is deduplicated too, and its handler reads the body
// whole.
func TestIdempotencyWithAClassifyFunc(t *testing.T) {
	c := settings.Default(nil, settings.ModeShadow)
	c.Idempotency.Mode = settings.IdempotencyKey
	sink := &mock.Sink{}
	gate, err := capgate.NewGate(memory.New(nil), settings.NewFixed(c), sink, "t")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := identity.NewTokens([]identity.TokenEntry{{Token: "t-pam", Username: "pam"}})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		runs.Add(1)
		w.Header().Set("Content-Type", "text/plain")
		w.Write(append([]byte("ran: "), b...))
	})
	heavy := func(r *http.Request) (capgate.Call, bool) {
		// Any call of the gate's policy: this API's /search, counted as a
		// $rerank of one row.
		return capgatehttp.OCLCall("rerank", 1, false, false), r.Method == "POST"
	}
	h, err := capgatehttp.NewMiddleware(next, gate, ids, capgatehttp.WithClassifyFunc(heavy))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	var bodies []string
	for range 2 {
		r := send(t, newRequest(t, t.Context(), "POST", srv.URL+"/search", "q=fever", "Authorization", "Token t-pam", "Idempotency-Key", "k"))
		bodies = append(bodies, string(r.Body))
		if r.StatusCode != 200 {
			t.Fatalf("%d %s", r.StatusCode, r.Body)
		}
	}
	if runs.Load() != 1 || bodies[0] != "ran: q=fever" || bodies[1] != bodies[0] {
		t.Fatalf("handler ran %d times; answers %q", runs.Load(), bodies)
	}
	if l := sink.Wait(t, 2, waitLimit); l[1]["decision"] != "replayed" {
		t.Fatalf("lines %v", l)
	}
}

// A call cut at shutdown is not kept: its key is let go.
func TestIdempotencyCallCutAtShutdownNotKept(t *testing.T) {
	cut, shutdown := context.WithCancel(context.Background())
	defer shutdown()
	e := newRepeatEnv(t, settings.IdempotencyKey, func(c *capgatehttp.GatewayConfig) { c.Shutdown = cut })
	first := e.async(t.Context(), "POST", semanticMatch, twoRows, append(keyed, "X-Test-Do", "hold")...)
	e.up.waitEntered(t)
	id := sha256.Sum256([]byte("key\x00pam\x00k-1")) // the gateway's id of pam's key k-1
	if _, ok, _ := e.rs.Store.GetRepeat(t.Context(), hex.EncodeToString(id[:])); !ok {
		t.Fatal("no entry for the call running")
	}
	shutdown()
	recv(t, first) // the gateway writes nothing for a call it cut
	if l := e.sink.Wait(t, 1, waitLimit)[0]; l["error"] != "shutdown" {
		t.Fatalf("the cut call's line %v; want error shutdown", l)
	}
	if e, ok, _ := e.rs.Store.GetRepeat(t.Context(), hex.EncodeToString(id[:])); ok {
		t.Fatalf("the cut call left an entry: %+v", e)
	}
}

// retryPolicy names the header the OpenAI clients mark their retries with,
// and a header that makes two requests different.
const retryPolicy = `version: 1
name: retries
routes:
  - name: chat
    method: POST
    path: {exact: /v1/chat/completions}
    fields:
      model: {body_string: model}
identity: {resolver: tokens, scheme: Token, default_tier: all}
lanes:
  - {name: model, scope: key, key: model, routes: [chat], limit: 8}
names:
  header_prefix: Capgate-
  refusal: {detail: "busy", error_code: busy}
  log_event: capgate_call
idempotency:
  retry_header: x-stainless-retry-count
  fingerprint_headers: [OpenAI-Organization]
`

// With a retry header in the policy, mode auto never joins two first
// attempts (a sampling API answers them differently): both run. A retry
// (the header at 1 or more) joins the call running; one from another
// organization (a fingerprint header) is another request and runs.
func TestIdempotencyAutoJoinsOnlyRetries(t *testing.T) {
	e := newAutoEnv(t, mustPolicy(t, retryPolicy))
	ctx := t.Context()
	const body = `{"model":"m","messages":[{"role":"user","content":"a poem"}],"temperature":1}`
	hdr := func(retry, org string) []string {
		return []string{"Authorization", "Token t-pam", "X-Test-No-Cookie", "1", "X-Stainless-Retry-Count", retry,
			"OpenAI-Organization", org, "X-Test-Do", "hold"}
	}
	a := e.async(ctx, "POST", "/v1/chat/completions", body, hdr("0", "org-1")...)
	e.up.waitEntered(t)
	b := e.async(ctx, "POST", "/v1/chat/completions", body, hdr("0", "org-1")...)
	e.up.waitEntered(t) // the second first attempt runs too
	retry := e.async(ctx, "POST", "/v1/chat/completions", body, hdr("1", "org-1")...)
	e.waitPolled(t) // the retry waits for the call running
	other := e.async(ctx, "POST", "/v1/chat/completions", body, hdr("1", "org-2")...)
	e.up.waitEntered(t) // another organization's: another request
	e.up.release()
	ra, rb, rr, ro := recv(t, a), recv(t, b), recv(t, retry), recv(t, other)
	for _, r := range []response{ra, rb, rr, ro} {
		if r.Err != nil || r.StatusCode != 200 {
			t.Fatalf("%v %v; want 200", r.Response, r.Err)
		}
	}
	if ra.Header.Get("Idempotent-Replayed") != "" || rb.Header.Get("Idempotent-Replayed") != "" || ro.Header.Get("Idempotent-Replayed") != "" {
		t.Error("a first attempt, or another organization's retry, was answered by another call")
	}
	if rr.Header.Get("Idempotent-Replayed") != "true" {
		t.Error("the retry ran: want it joined to the call running")
	}
	if n := len(e.up.requests()); n != 3 {
		t.Errorf("the API ran %d calls; want 3 (both first attempts and the other organization's)", n)
	}
	if j := line(t, e.sink.Wait(t, 4, waitLimit), "joined"); j["user_id"] != "pam" {
		t.Errorf("joined line %v", j)
	}
}

// newAutoEnv is a gateway under policy p whose gate runs on a
// repeatStore, in shadow, with idempotency auto.
func newAutoEnv(t *testing.T, p *policy.Policy) *repeatEnv {
	t.Helper()
	rs := &repeatStore{Store: memory.New(nil), polled: make(chan string, 1)}
	sink := &mock.Sink{}
	c := settings.Default(p, settings.ModeShadow)
	c.Idempotency.Mode = settings.IdempotencyAuto
	gate, err := capgate.NewGate(rs, settings.NewFixed(c), sink, "task-1")
	if err != nil {
		t.Fatal(err)
	}
	e := &repeatEnv{env: newPolicyEnv(t, p, nil, func(conf *capgatehttp.GatewayConfig) { conf.Gate = gate }), rs: rs, sink: sink}
	e.store = rs.Store
	t.Cleanup(e.up.release)
	return e
}

func mustPolicy(t *testing.T, src string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse("p.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// On a route whose API stops when its client goes (on_client_gone:
// cancel), a first attempt whose client gave up before any answer (the
// SDK's timeout) is held, not cut: its retry joins it, and the API runs
// the call once.
func TestIdempotencyRetryJoinsATimedOutCall(t *testing.T) {
	e := newAutoEnv(t, mustPolicy(t, strings.Replace(retryPolicy, "    fields:\n", "    on_client_gone: cancel\n    fields:\n", 1)))
	const body = `{"model":"m","messages":[]}`
	hdr := []string{"Authorization", "Token t-pam", "X-Test-No-Cookie", "1", "X-Test-Do", "hold"}
	timeout, giveUp := context.WithCancel(t.Context())
	first := e.async(timeout, "POST", "/v1/chat/completions", body, append(hdr, "X-Stainless-Retry-Count", "0")...)
	e.up.waitEntered(t)
	giveUp() // the client's timeout, before any answer
	if r := recv(t, first); r.Err == nil {
		t.Fatalf("the first attempt was answered %d; want its client gone", r.StatusCode)
	}
	retry := e.async(t.Context(), "POST", "/v1/chat/completions", body, append(hdr, "X-Stainless-Retry-Count", "1")...)
	e.waitPolled(t)
	e.up.release()
	if r := recv(t, retry); r.Err != nil || r.StatusCode != 200 || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %v %v; want the held call's answer", r.Response, r.Err)
	}
	e.up.mu.Lock()
	cancelled := e.up.cancelled
	e.up.mu.Unlock()
	if n := len(e.up.requests()); n != 1 || cancelled != 0 {
		t.Errorf("the API ran %d calls, %d cancelled; want 1, none", n, cancelled)
	}
}

// Joiners are waiters: a repeat of a call running past
// wait.max_waiting_per_user does not wait; it is decided at once as a call
// with no room to wait, here refused (pam's one place is the first call's)
// with the usual hints, and its line says why it was not deduplicated.
func TestIdempotencyJoinersPastTheWaitBoundsAreRefused(t *testing.T) {
	e := newRepeatEnvWith(t, settings.IdempotencyKey, func(c *settings.Config) {
		c.Mode, c.EnforceFor = settings.ModeEnforce, settings.EnforceAll
		c.Wait.MaxWaitingPerUser = 1
	}, nil)
	first := e.async(t.Context(), "POST", semanticMatch, twoRows, append(keyed, "X-Test-Do", "hold")...)
	e.up.waitEntered(t)
	joiner := e.async(t.Context(), "POST", semanticMatch, twoRows, keyed...)
	e.waitPolled(t)
	r := e.do(t.Context(), "POST", semanticMatch, twoRows, keyed...)
	if r.StatusCode != http.StatusTooManyRequests || r.Header.Get("Retry-After") == "" {
		t.Fatalf("a joiner past max_waiting_per_user: %d %v; want 429 with Retry-After", r.StatusCode, r.Header)
	}
	e.up.release()
	if a := recv(t, first); a.StatusCode != 200 {
		t.Fatalf("first: %d", a.StatusCode)
	}
	if j := recv(t, joiner); j.StatusCode != 200 || j.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the joiner within the bound: %d %v; want its answer replayed", j.StatusCode, j.Header)
	}
	if n := len(e.up.requests()); n != 1 {
		t.Fatalf("the API ran %d calls; want 1", n)
	}
	refused := line(t, e.sink.Wait(t, 3, waitLimit), "refused")
	if de, _ := refused["dedup_error"].(string); !strings.Contains(de, "too many calls waiting") {
		t.Errorf("refused line %v; want dedup_error saying why", refused)
	}
}
