package http_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capgate/capgate"
	capgatehttp "github.com/capgate/capgate/http"
	"github.com/capgate/capgate/identity"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/mock"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
)

// waitLimit bounds every wait on a channel, so a broken test fails instead
// of hanging. It is not a sleep: waits end as soon as the event happens.
const waitLimit = 10 * time.Second

// recorded is one request the upstream received.
type recorded struct {
	Method, Path, RawQuery, Host string
	Header                       http.Header
	Body                         []byte
}

// upstream is a fake API. It records what it receives and how many calls
// run at once. The X-Test-Do request header picks a behaviour:
//
//	hold     signal entered, then wait for release (or the client to go)
//	reset    close the connection without answering
//	partial  send the header and part of the body, then close
//	stream   send an event, flush, wait for release, send another
//	500      answer 500
//
// and X-Test-No-Cookie leaves Set-Cookie out of the usual answer.
//
// GET /user/ is the OCL identity endpoint; it knows users by token and
// counts lookups per Authorization header.
type upstream struct {
	*httptest.Server
	t       *testing.T
	entered chan string   // one value (the path) per held request
	hold    chan struct{} // closed by release
	once    sync.Once

	mu          sync.Mutex
	reqs        []recorded
	inFlight    int
	maxInFlight int
	lookups     map[string]int
	userStatus  int           // when non-zero, /user/ answers this
	cancelled   int           // held requests whose context was cancelled
	cancels     chan struct{} // one value per cancelled held request
	onFinish    func()        // run as a held request is let go, before it answers
}

var users = map[string]string{
	"Token t-pam":  `{"username":"pam","is_staff":false,"auth_groups":[]}`,
	"Token t-pat":  `{"username":"pat","is_staff":false,"auth_groups":[]}`,
	"Token t-cora": `{"username":"cora","is_staff":false,"auth_groups":["core_user"]}`,
	"Token t-stan": `{"username":"stan","is_staff":true,"auth_groups":[]}`,
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{t: t, entered: make(chan string, 64), hold: make(chan struct{}), lookups: map[string]int{},
		cancels: make(chan struct{}, 64)}
	u.Server = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(func() { u.release(); u.Close() })
	return u
}

func (u *upstream) release() { u.once.Do(func() { close(u.hold) }) }

func (u *upstream) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/user/" {
		u.user(w, r)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		u.t.Errorf("upstream: read body: %v", err)
	}
	u.mu.Lock()
	u.reqs = append(u.reqs, recorded{r.Method, r.URL.Path, r.URL.RawQuery, r.Host, r.Header.Clone(), body})
	u.inFlight++
	u.maxInFlight = max(u.maxInFlight, u.inFlight)
	u.mu.Unlock()
	defer func() {
		u.mu.Lock()
		u.inFlight--
		u.mu.Unlock()
	}()

	h := w.Header()
	if o := r.Header.Get("Origin"); o != "" {
		h.Set("Access-Control-Allow-Origin", o)
		h.Set("Access-Control-Expose-Headers", "X-Total-Count")
	}
	h.Set("X-Total-Count", "2")
	switch r.Header.Get("X-Test-Do") {
	case "hold":
		u.entered <- r.URL.Path
		select {
		case <-u.hold:
			u.mu.Lock()
			f := u.onFinish
			u.mu.Unlock()
			if f != nil {
				f()
			}
		case <-r.Context().Done():
			u.mu.Lock()
			u.cancelled++
			u.mu.Unlock()
			u.cancels <- struct{}{}
			return
		}
	case "reset":
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	case "partial":
		h.Set("Content-Length", "100")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, `{"partial":`)
		http.NewResponseController(w).Flush()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	case "stream":
		h.Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: one\n\n")
		http.NewResponseController(w).Flush()
		select {
		case <-u.hold:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "data: two\n\n")
		return
	case "500":
		h.Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, `{"detail":"boom"}`)
		return
	}
	h.Set("Content-Type", "application/json")
	if r.Header.Get("X-Test-No-Cookie") == "" {
		h.Set("Set-Cookie", "csrftoken=abc; Path=/")
	}
	io.WriteString(w, `[{"row":0,"results":[]}]`)
}

func (u *upstream) user(w http.ResponseWriter, r *http.Request) {
	auth := r.Header.Get("Authorization")
	u.mu.Lock()
	u.lookups[auth]++
	status := u.userStatus
	u.mu.Unlock()
	if status != 0 {
		w.WriteHeader(status)
		return
	}
	body, ok := users[auth]
	if !ok {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	io.WriteString(w, body)
}

func (u *upstream) requests() []recorded {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]recorded(nil), u.reqs...)
}

func (u *upstream) peak() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.maxInFlight
}

func (u *upstream) lookupsOf(auth string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.lookups[auth]
}

func (u *upstream) setUserStatus(s int) {
	u.mu.Lock()
	u.userStatus = s
	u.mu.Unlock()
}

// waitEntered waits for a held request to reach the upstream.
func (u *upstream) waitEntered(t *testing.T) {
	t.Helper()
	timer := time.NewTimer(waitLimit)
	defer timer.Stop()
	select {
	case <-u.entered:
	case <-timer.C:
		t.Fatal("no request reached the upstream")
	}
}

// env is a gateway in front of an upstream, with the real gate on the
// memory store.
type env struct {
	t      *testing.T
	up     *upstream
	store  *memory.Store
	prefix string // the lane keys' prefix (the policy's)
	config *settings.Fixed
	sink   *mock.Sink
	gate   *capgate.Gate
	gw     *capgatehttp.Gateway
	front  *httptest.Server
	// gone gets one value each time the gateway's server sees a request's
	// context end: the request was answered, or its client went away.
	gone chan struct{}
}

// now is the gateway's fixed clock for queue_ms.
var now = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// newEnv starts an upstream and a gateway in front of it, in shadow mode
// with the default limits changed by cfg, identifying callers by tokens,
// under the OCL policy.
func newEnv(t *testing.T, cfg func(*settings.Config), gc func(*capgatehttp.GatewayConfig)) *env {
	t.Helper()
	return newPolicyEnv(t, policy.OCL(), cfg, gc)
}

// newPolicyEnv is newEnv under policy p: the gate's config and the
// gateway's classifier are p's.
func newPolicyEnv(t *testing.T, p *policy.Policy, cfg func(*settings.Config), gc func(*capgatehttp.GatewayConfig)) *env {
	t.Helper()
	e := &env{t: t, up: newUpstream(t), store: memory.New(nil), prefix: p.Names.KeyPrefix, sink: &mock.Sink{},
		gone: make(chan struct{}, 64)}
	c := settings.Default(p, settings.ModeShadow)
	c.Wait.MaxSeconds = 0 // refusals at once, unless a test turns waiting on
	if cfg != nil {
		cfg(&c)
	}
	e.config = settings.NewFixed(c)
	gate, err := capgate.NewGate(e.store, e.config, e.sink, "task-1")
	if err != nil {
		t.Fatal(err)
	}
	e.gate = gate
	var entries []identity.TokenEntry
	for auth, body := range users {
		var ans struct {
			Username   string   `json:"username"`
			IsStaff    bool     `json:"is_staff"`
			AuthGroups []string `json:"auth_groups"`
		}
		if err := json.Unmarshal([]byte(body), &ans); err != nil {
			t.Fatal(err)
		}
		entries = append(entries, identity.TokenEntry{Token: strings.TrimPrefix(auth, "Token "),
			Username: ans.Username, IsStaff: ans.IsStaff, AuthGroups: ans.AuthGroups})
	}
	ids, err := identity.NewTokens(entries)
	if err != nil {
		t.Fatal(err)
	}
	upURL, err := url.Parse(e.up.URL)
	if err != nil {
		t.Fatal(err)
	}
	classifier := &capgatehttp.Classifier{}
	classifier.SetPolicy(p)
	conf := capgatehttp.GatewayConfig{
		Classifier: classifier,
		Upstream:   upURL,
		Gate:       e.gate,
		Identify:   ids,
		Logger:     slog.New(slog.NewTextHandler(t.Output(), nil)),
		Options:    []capgatehttp.Option{capgatehttp.WithClock(func() time.Time { return now })},
	}
	if gc != nil {
		gc(&conf)
	}
	e.gw, err = capgatehttp.NewGateway(conf)
	if err != nil {
		t.Fatal(err)
	}
	e.front = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		go func() {
			<-ctx.Done()
			select {
			case e.gone <- struct{}{}:
			default:
			}
		}()
		e.gw.ServeHTTP(w, r)
	}))
	t.Cleanup(e.front.Close)
	return e
}

// inFlight returns the number of leases held in every lane.
func (e *env) inFlight() map[string]int {
	e.t.Helper()
	ctx := context.WithoutCancel(e.t.Context())
	keys, err := e.store.Keys(ctx, e.prefix)
	if err != nil {
		e.t.Fatal(err)
	}
	counts := make([]int, len(keys))
	if err := e.store.Count(ctx, keys, counts); err != nil {
		e.t.Fatal(err)
	}
	m := map[string]int{}
	for i, k := range keys {
		if counts[i] > 0 {
			m[k] = counts[i]
		}
	}
	return m
}

// response is what a client received.
type response struct {
	*http.Response
	Body []byte
	Err  error // reading the body
}

// newRequest builds a request; hdr holds pairs of header names and
// values.
func newRequest(t *testing.T, ctx context.Context, method, u, body string, hdr ...string) *http.Request {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	return req
}

// send sends req and reads the whole response.
func send(t *testing.T, req *http.Request) response {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return response{resp, b, err}
}

// do sends a request through the gateway.
func (e *env) do(ctx context.Context, method, target, body string, hdr ...string) response {
	e.t.Helper()
	return send(e.t, newRequest(e.t, ctx, method, e.front.URL+target, body, hdr...))
}

// async sends a request through the gateway in the background; the result
// arrives on the channel returned, with Err set if it failed.
func (e *env) async(ctx context.Context, method, target, body string, hdr ...string) <-chan response {
	req := newRequest(e.t, ctx, method, e.front.URL+target, body, hdr...)
	ch := make(chan response, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			ch <- response{Err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		ch <- response{resp, b, err}
	}()
	return ch
}

func recv(t *testing.T, ch <-chan response) response {
	t.Helper()
	timer := time.NewTimer(waitLimit)
	defer timer.Stop()
	select {
	case r := <-ch:
		return r
	case <-timer.C:
		t.Fatal("no response")
		return response{}
	}
}

// capacityHeaders returns the response's X-OCL-Capacity-* headers and
// Retry-After.
func capacityHeaders(h http.Header) map[string]string {
	m := map[string]string{}
	for k := range h {
		if strings.HasPrefix(k, "X-Ocl-Capacity-") || k == "Retry-After" {
			m[k] = h.Get(k)
		}
	}
	return m
}

// readEvent reads one server-sent event.
func readEvent(t *testing.T, br *bufio.Reader) string {
	t.Helper()
	var ev strings.Builder
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("read event: %v", err)
		}
		if line == "\n" {
			return ev.String()
		}
		ev.WriteString(line)
	}
}

const (
	semanticMatch = "/concepts/$match/?semantic=true"
	twoRows       = `{"rows":[{"name":"fever"},{"name":"cough"}],"target_repo_url":"/orgs/CIEL/sources/CIEL/"}`
	oneRow        = `{"rows":[{"name":"fever"}]}`
)
