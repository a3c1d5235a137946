package http_test

import (
	"bufio"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/answer"
	capgatehttp "github.com/capgate/capgate/http"
	"github.com/capgate/capgate/identity"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
)

// exposed returns the names in Access-Control-Expose-Headers.
func exposed(h http.Header) []string {
	var names []string
	for _, v := range h.Values("Access-Control-Expose-Headers") {
		for n := range strings.SplitSeq(v, ",") {
			names = append(names, strings.TrimSpace(n))
		}
	}
	return names
}

func wantExposed(t *testing.T, h http.Header, extra ...string) {
	t.Helper()
	got := exposed(h)
	for _, n := range append(answer.ExposedHeaders(policy.OCL()), extra...) {
		if !slices.Contains(got, n) {
			t.Errorf("Access-Control-Expose-Headers %v lacks %s", got, n)
		}
	}
}

func TestCORS(t *testing.T) {
	e := newEnv(t, func(c *settings.Config) {
		c.Mode, c.EnforceFor = settings.ModeEnforce, settings.EnforceAll
		setNumber(c, "per_user.preview", 0)
	}, nil)
	ctx := t.Context()
	const origin = "https://mapper.example"

	// Gated, answered by the API: its expose list is kept and extended.
	r := e.do(ctx, "POST", semanticMatch, twoRows, "Authorization", "Token t-cora", "Origin", origin)
	if r.Header.Get("Access-Control-Allow-Origin") != origin {
		t.Errorf("the API's CORS headers were lost: %v", r.Header)
	}
	wantExposed(t, r.Header, "X-Total-Count")

	// The gateway's own 429 carries the CORS headers for the origin:
	// readable, but with no origin list, without credentials.
	r = e.do(ctx, "POST", semanticMatch, twoRows, "Authorization", "Token t-pam", "Origin", origin)
	if r.StatusCode != 429 {
		t.Fatalf("status %d", r.StatusCode)
	}
	if r.Header.Get("Access-Control-Allow-Origin") != origin || r.Header.Get("Access-Control-Allow-Credentials") != "" ||
		!slices.Contains(r.Header.Values("Vary"), "Origin") {
		t.Errorf("429 CORS headers: %v", r.Header)
	}
	wantExposed(t, r.Header)

	// Preflight passes through to the API.
	r = e.do(ctx, "OPTIONS", semanticMatch, "", "Origin", origin, "Access-Control-Request-Method", "POST")
	reqs := e.up.requests()
	if last := reqs[len(reqs)-1]; last.Method != "OPTIONS" || len(capacityHeaders(r.Header)) != 0 {
		t.Errorf("preflight: upstream got %s, headers %v", last.Method, capacityHeaders(r.Header))
	}
}

func TestCORSOrigins(t *testing.T) {
	for _, tt := range []struct {
		origins      []string
		origin       string
		allow, creds string
	}{
		{[]string{"https://a.example"}, "https://a.example", "https://a.example", "true"},
		{[]string{"https://a.example/"}, "https://a.example", "https://a.example", "true"},
		{[]string{"https://a.example"}, "https://b.example", "", ""},
		{[]string{"*"}, "https://b.example", "*", ""},
		{nil, "https://b.example", "https://b.example", ""}, // credentials only for an origin listed
		{[]string{"https://a.example", "*"}, "https://a.example", "https://a.example", "true"},
		{nil, "", "", ""},
	} {
		e := newEnv(t, func(c *settings.Config) {
			c.Mode, c.EnforceFor = settings.ModeEnforce, settings.EnforceAll
			setNumber(c, "per_user.preview", 0)
		}, func(c *capgatehttp.GatewayConfig) {
			c.Options = append(c.Options, capgatehttp.WithCORSOrigins(tt.origins))
		})
		hdr := []string{"Authorization", "Token t-pam"}
		if tt.origin != "" {
			hdr = append(hdr, "Origin", tt.origin)
		}
		r := e.do(t.Context(), "POST", semanticMatch, twoRows, hdr...)
		if r.StatusCode != 429 {
			t.Fatalf("status %d", r.StatusCode)
		}
		if a, c := r.Header.Get("Access-Control-Allow-Origin"), r.Header.Get("Access-Control-Allow-Credentials"); a != tt.allow || c != tt.creds {
			t.Errorf("origins %v, Origin %q: allow %q credentials %q; want %q %q", tt.origins, tt.origin, a, c, tt.allow, tt.creds)
		}
	}
}

func TestStreamingIsFlushedAsItArrives(t *testing.T) {
	for _, target := range []string{"/events", semanticMatch} {
		e := newEnv(t, nil, nil)
		req := newRequest(t, t.Context(), "POST", e.front.URL+target, twoRows,
			"Authorization", "Token t-pam", "X-Test-Do", "stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(resp.Body)
		// The first event arrives while the upstream still holds the rest.
		if ev := readEvent(t, br); ev != "data: one\n" {
			t.Errorf("%s: first event %q", target, ev)
		}
		if target == semanticMatch && resp.Header.Get(ocl.Decision) != "admitted" {
			t.Errorf("stream of a gated call lacks its headers")
		}
		e.up.release()
		if ev := readEvent(t, br); ev != "data: two\n" {
			t.Errorf("%s: second event %q", target, ev)
		}
		resp.Body.Close()
	}
}

func TestForwardedHeaders(t *testing.T) {
	e := newEnv(t, nil, nil)
	e.do(t.Context(), "GET", "/concepts/?q=a", "", "X-Forwarded-For", "6.6.6.6", "X-Forwarded-Proto", "https")
	got := e.up.requests()[0]
	host := strings.TrimPrefix(e.front.URL, "http://")
	if xff, p, h := got.Header.Get("X-Forwarded-For"), got.Header.Get("X-Forwarded-Proto"), got.Header.Get("X-Forwarded-Host"); xff != "127.0.0.1" || p != "http" || h != host {
		t.Errorf("from an untrusted peer: XFF %q proto %q host %q", xff, p, h)
	}
	if got.Host != strings.TrimPrefix(e.up.URL, "http://") || got.RawQuery != "q=a" {
		t.Errorf("upstream Host %q query %q", got.Host, got.RawQuery)
	}

	e = newEnv(t, nil, func(c *capgatehttp.GatewayConfig) {
		c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
		c.PreserveHost = true
	})
	e.do(t.Context(), "GET", "/concepts/", "", "X-Forwarded-For", "6.6.6.6", "X-Forwarded-Proto", "https", "X-Forwarded-Host", "api.example")
	got = e.up.requests()[0]
	if xff, p, h := got.Header.Get("X-Forwarded-For"), got.Header.Get("X-Forwarded-Proto"), got.Header.Get("X-Forwarded-Host"); xff != "6.6.6.6, 127.0.0.1" || p != "https" || h != "api.example" {
		t.Errorf("from a trusted peer: XFF %q proto %q host %q", xff, p, h)
	}
	if got.Host != strings.TrimPrefix(e.front.URL, "http://") {
		t.Errorf("PreserveHost: upstream Host %q", got.Host)
	}
}

func TestGatewayRoutes(t *testing.T) {
	named := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(name + " " + r.URL.Path)) })
	}
	healthErr := errors.New("lane store: down")
	var healthy, ready atomic.Bool
	var probes atomic.Int64
	health := &capgatehttp.Health{
		Checks: []capgatehttp.HealthCheck{{Name: "lanes", Check: func(context.Context) error {
			if healthy.Load() {
				return nil
			}
			return healthErr
		}}},
		Ready:  ready.Load,
		Probed: func() { probes.Add(1) },
	}
	e := newEnv(t, nil, func(c *capgatehttp.GatewayConfig) {
		c.Staff = named("staff")
		c.Metrics = named("metrics")
		c.Health = health
	})
	ctx := t.Context()
	for target, want := range map[string]string{
		"/capacity/config/": "staff /capacity/config/",
	} {
		if r := e.do(ctx, "GET", target, ""); string(r.Body) != want {
			t.Errorf("GET %s = %q, want %q", target, r.Body, want)
		}
	}
	// /metrics is for staff only.
	for _, tt := range []struct {
		auth   string
		status int
	}{{"", 401}, {"Token t-pam", 403}, {"Token t-stan", 200}} {
		var hdr []string
		if tt.auth != "" {
			hdr = []string{"Authorization", tt.auth}
		}
		r := e.do(ctx, "GET", "/metrics", "", hdr...)
		if r.StatusCode != tt.status || (tt.status == 200 && string(r.Body) != "metrics /metrics") {
			t.Errorf("GET /metrics as %q = %d %q, want %d", tt.auth, r.StatusCode, r.Body, tt.status)
		}
	}
	// Fail open: a store that is down is never a failed probe, and the
	// public port never says so (the state is for staff).
	health.CheckNow(ctx)
	for _, p := range []string{"/livez", "/healthz"} {
		r := e.do(ctx, "GET", p, "")
		if r.StatusCode != 200 || strings.Contains(string(r.Body), "lane") || strings.Contains(string(r.Body), "down") {
			t.Errorf("%s with the lane store down: %d %s; want 200 with no details", p, r.StatusCode, r.Body)
		}
	}
	if n := probes.Load(); n != 0 {
		t.Errorf("Probed called %d times by /livez and /healthz; want only /readyz to count as a readiness probe", n)
	}
	if r := e.do(ctx, "GET", "/readyz", ""); r.StatusCode != 503 || string(r.Body) != `{"status":"starting","ready":false}`+"\n" {
		t.Errorf("/readyz before the config was read: %d %s; want 503", r.StatusCode, r.Body)
	}
	if n := probes.Load(); n != 1 {
		t.Errorf("Probed called %d times after one /readyz; want 1", n)
	}
	ready.Store(true)
	if r := e.do(ctx, "GET", "/readyz", ""); r.StatusCode != 200 || string(r.Body) != `{"status":"ok","ready":true}`+"\n" {
		t.Errorf("/readyz with the lane store down: %d %s; want 200, ready and nothing else", r.StatusCode, r.Body)
	}
	// The details are on the admin address and the staff API (Readyz).
	rec := httptest.NewRecorder()
	health.Readyz().ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	if !strings.Contains(rec.Body.String(), `"lanes":"lane store: down"`) {
		t.Errorf("Readyz (admin, staff) with the lane store down: %s; want the error named", rec.Body)
	}
	healthy.Store(true)
	health.CheckNow(ctx)
	if r := e.do(ctx, "GET", "/livez", ""); r.StatusCode != 200 || string(r.Body) != `{"status":"ok","ready":true}`+"\n" {
		t.Errorf("healthy: %d %s", r.StatusCode, r.Body)
	}
	if n := len(e.up.requests()); n != 0 {
		t.Errorf("the gateway's own paths reached the upstream %d times", n)
	}
	// Paths are not cleaned or redirected on the way to the API.
	e.do(ctx, "POST", "/metrics", "")
	e.do(ctx, "GET", "//concepts/../x/", "")
	reqs := e.up.requests()
	if len(reqs) != 2 || reqs[0].Path != "/metrics" || reqs[1].Path != "//concepts/../x/" {
		t.Errorf("upstream paths %+v", reqs)
	}

	// Without handlers, those paths go to the API.
	e = newEnv(t, nil, nil)
	e.do(ctx, "GET", "/capacity/config/", "")
	e.do(ctx, "GET", "/metrics", "")
	if n := len(e.up.requests()); n != 2 {
		t.Errorf("upstream saw %d requests, want 2", n)
	}
}

func TestNewGatewayRejects(t *testing.T) {
	gate, err := capgate.NewGate(memory.New(nil), settings.NewFixed(settings.Default(nil, "")), nil, "t")
	if err != nil {
		t.Fatal(err)
	}
	ids, _ := identity.NewTokens(nil)
	for _, c := range []capgatehttp.GatewayConfig{
		{Gate: gate, Identify: ids},
		{Upstream: mustURL(t, "ftp://x"), Gate: gate, Identify: ids},
		{Upstream: mustURL(t, "http://x"), Identify: ids},
		{Upstream: mustURL(t, "http://x"), Gate: gate},
	} {
		if _, err := capgatehttp.NewGateway(c); err == nil {
			t.Errorf("NewGateway(%+v) accepted", c)
		}
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestBufferPoolReusesWithoutAllocating: a buffer given back is handed out
// again whole, and the round trip allocates nothing (the race detector
// drops some pooled items at random, hence the bound below 1).
func TestBufferPoolReusesWithoutAllocating(t *testing.T) {
	p := capgatehttp.NewBufferPool()
	b := p.Get()
	if len(b) != 32<<10 {
		t.Fatalf("buffer of %d bytes, want 32 KiB", len(b))
	}
	p.Put(b)
	if allocs := testing.AllocsPerRun(200, func() { p.Put(p.Get()) }); allocs >= 0.5 {
		t.Errorf("Get and Put allocate %.2f times per response, want none", allocs)
	}
}
