package http_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/header"
	capgatehttp "github.com/capgate/capgate/http"
	"github.com/capgate/capgate/identity"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/settings"
)

// The tests here are the findings of the second attack run
// (docs/SECURITY.md, "One reading" and "Failure counts"): each fails on
// the gateway before these rules.

// The upstream gets the query byte for byte, so what capgate classified
// (the last value of a repeated parameter, as Django reads it) is what the
// API reads: httputil.ReverseProxy re-encoded a query holding ";" or a bad
// "%" escape, dropping the pairs that made the call light.
func TestQueryIsForwardedByteForByte(t *testing.T) {
	for _, q := range []string{
		"semantic=true&semantic=%zz",
		"semantic=true&semantic=false;x",
		"semantic=1&semantic=;",
		"reranker=1&reranker=%G0",
		"semantic=false&x=%",
		"semantic=0;semantic=1&a=%2",
	} {
		t.Run(q, func(t *testing.T) {
			e := pausedEnv(t, nil)
			status := rawDo(t, e, rawPost("/concepts/$match/?"+q, oneRow))
			reqs := e.up.requests()
			// Light by the last value (pam's heavy calls are all
			// refused), so it must reach the API unchanged.
			if status != 200 || len(reqs) != 1 {
				t.Fatalf("status %d, %d upstream requests; want 200 and 1", status, len(reqs))
			}
			if reqs[0].RawQuery != q {
				t.Errorf("the upstream got the query %q; want %q byte for byte", reqs[0].RawQuery, q)
			}
		})
	}
}

// A Connection header naming a header capgate reads would have the proxy
// drop that header after capgate read it (Connection: Authorization: the
// token names pam, the API then authenticates by the session cookie).
func TestConnectionNamingAReadHeaderIs400(t *testing.T) {
	for _, named := range []string{"Authorization", "cookie", "Content-Type", "Content-Length", "Content-Encoding",
		"Transfer-Encoding", "Host", "X-Forwarded-For", "x-forwarded-proto", "Forwarded", "X-Capgate-User",
		"keep-alive, Authorization", " AUTHORIZATION "} {
		t.Run(named, func(t *testing.T) {
			e := pausedEnv(t, nil)
			status := rawDo(t, e, rawPost(semanticMatch, oneRow, "Cookie: sessionid=s-pam", "Connection: "+named))
			if status != http.StatusBadRequest || len(e.up.requests()) != 0 {
				t.Errorf("status %d, %d upstream requests; want 400 and none", status, len(e.up.requests()))
			}
		})
	}
	// A header capgate does not read may be named: the proxy drops it,
	// and capgate decides on the request without it.
	e := newEnv(t, nil, nil)
	r := e.do(t.Context(), "POST", semanticMatch, oneRow, "Authorization", "Token t-pam", "Connection", "X-Drop-Me",
		"X-Drop-Me", "1", "X-Request-ID", "rid-1")
	if r.StatusCode != 200 {
		t.Fatalf("status %d", r.StatusCode)
	}
	if reqs := e.up.requests(); len(reqs) != 1 || reqs[0].Header.Get("X-Drop-Me") != "" {
		t.Errorf("the header the Connection header names reached the API: %v", reqs)
	}
	// A name the gateway sets itself (the request id it makes up) still
	// reaches the API: the Connection header naming it is not forwarded.
	r = e.do(t.Context(), "POST", semanticMatch, oneRow, "Authorization", "Token t-pam", "Connection", "X-Request-ID")
	if reqs := e.up.requests(); r.StatusCode != 200 || len(reqs) != 2 || reqs[1].Header.Get(header.RequestID) != r.Header.Get(header.RequestID) {
		t.Errorf("Connection: X-Request-ID: %d; the API got request id %q, the client %q", r.StatusCode,
			reqs[len(reqs)-1].Header.Get(header.RequestID), r.Header.Get(header.RequestID))
	}
}

// A blank first Cookie line hid the session cookie on the next one:
// gunicorn joins them ("Cookie:" then "Cookie: ;sessionid=…" reads as
// ",;sessionid=…", and Django finds sessionid), so the call carries
// credentials and is gated.
func TestRepeatedCookieLinesAreReadJoined(t *testing.T) {
	ids, err := identity.NewHeader([]string{"10.0.0.0/8"})
	if err != nil {
		t.Fatal(err)
	}
	e := pausedEnv(t, func(c *capgatehttp.GatewayConfig) {
		c.Identify = ids
		c.Options = append(c.Options, capgatehttp.WithAnonymousAs(identity.AnonymousUser))
	})
	raw := "POST " + semanticMatch + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nCookie: \r\nCookie: ;sessionid=s-pam\r\n" +
		fmt.Sprintf("Content-Length: %d\r\nConnection: close\r\n\r\n%s", len(oneRow), oneRow)
	if status := rawDo(t, e, raw); status != http.StatusTooManyRequests || len(e.up.requests()) != 0 {
		t.Errorf("status %d, %d upstream requests; want 429 and none", status, len(e.up.requests()))
	}
}

// lookupAPI is a fake /user/ endpoint that knows tokens and sessions and
// counts its lookups.
type lookupAPI struct {
	*httptest.Server
	mu      sync.Mutex
	lookups []http.Header
}

func newLookupAPI(t *testing.T) *lookupAPI {
	a := &lookupAPI{}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.lookups = append(a.lookups, r.Header.Clone())
		a.mu.Unlock()
		auth := r.Header.Get("Authorization")
		switch {
		case auth == "Token t-pam":
			w.Write([]byte(`{"username":"pam"}`))
		case strings.HasPrefix(auth, "Token "):
			w.WriteHeader(http.StatusUnauthorized)
		case r.Header.Get("Cookie") == "sessionid=s-pam":
			w.Write([]byte(`{"username":"pam"}`))
		default:
			w.WriteHeader(http.StatusForbidden)
		}
	}))
	t.Cleanup(a.Close)
	return a
}

func (a *lookupAPI) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.lookups)
}

// The lookup's cache key is the credential the API will use: a token
// alone when there is one, else the session cookie; junk cookies, unique
// per request, no longer make every request a new lookup.
func TestJunkCookiesCannotDefeatTheIdentityCache(t *testing.T) {
	api := newLookupAPI(t)
	id, err := identity.NewUpstream(api.URL)
	if err != nil {
		t.Fatal(err)
	}
	identify := func(hdr ...string) string {
		t.Helper()
		r := httptest.NewRequest("POST", semanticMatch, nil)
		for i := 0; i < len(hdr); i += 2 {
			r.Header.Add(hdr[i], hdr[i+1])
		}
		c, ok, err := id.Identify(t.Context(), r)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return ""
		}
		return c.UserID
	}
	for i := range 50 {
		if u := identify("Authorization", "Token t-pam", "Cookie", fmt.Sprintf("junk%d=%d; sessionid=x%d", i, i, i)); u != "pam" {
			t.Fatalf("token with junk cookies: %q", u)
		}
		if u := identify("Cookie", fmt.Sprintf("junk%d=%d; sessionid=s-pam; other=%d", i, i, i)); u != "pam" {
			t.Fatalf("session with junk cookies: %q", u)
		}
	}
	if n := api.count(); n != 2 {
		t.Errorf("%d lookups for 100 requests of two credentials; want 2", n)
	}
	// What is sent: the token alone, or the session cookie alone.
	api.mu.Lock()
	first, second := api.lookups[0], api.lookups[1]
	api.mu.Unlock()
	if first.Get("Cookie") != "" || second.Get("Authorization") != "" || second.Get("Cookie") != "sessionid=s-pam" {
		t.Errorf("lookups sent %v and %v", first, second)
	}
	// An Authorization of a scheme DRF's token check skips: the API may
	// know the caller by the session, so the lookup asks with both.
	if u := identify("Authorization", "Basic eDp5", "Cookie", "sessionid=s-pam"); u != "pam" {
		t.Errorf("another scheme and a session: %q, want pam", u)
	}
	// Django's cookie reading: whitespace Python strips, the last of two.
	if u := identify("Cookie", "sessionid=nope;\xa0sessionid\xa0= s-pam "); u != "pam" {
		t.Errorf("the session as Django reads it: %q, want pam", u)
	}
	// No credential the API reads: no lookup.
	n := api.count()
	if u := identify("Cookie", "csrftoken=x; junk=1"); u != "" || api.count() != n {
		t.Errorf("cookies without a session: %q, %d lookups", u, api.count()-n)
	}
}

// unidentifiedEnv is a gateway in enforce whose identity lookups fail
// (the API's /user/ answers 503), with local lanes.
func unidentifiedEnv(t *testing.T, cfg func(*settings.Config)) *env {
	t.Helper()
	e := newEnv(t, func(c *settings.Config) {
		c.Mode, c.EnforceFor = settings.ModeEnforce, settings.EnforceAll
		if cfg != nil {
			cfg(c)
		}
	}, func(c *capgatehttp.GatewayConfig) {
		id, err := identity.NewUpstream(c.Upstream.String())
		if err != nil {
			t.Fatal(err)
		}
		c.Identify = id
	})
	e.gate.Local = memory.New(nil)
	e.up.setUserStatus(http.StatusServiceUnavailable)
	return e
}

// A lookup that fails no longer lets the call through uncounted: the call
// is gated as "(unidentified)" under the unidentified limit (1 per
// gateway by default).
func TestFailingLookupCountsAsUnidentified(t *testing.T) {
	e := unidentifiedEnv(t, nil)
	ctx := t.Context()
	first := e.async(ctx, "POST", semanticMatch, twoRows, "Authorization", "Token t-pam", "X-Test-Do", "hold")
	e.up.waitEntered(t)
	// A second caller whose lookup fails too: the lane is full.
	r := e.do(ctx, "POST", semanticMatch, twoRows, "Cookie", "sessionid=junk-1")
	if r.StatusCode != http.StatusTooManyRequests || r.Header.Get("Retry-After") == "" {
		t.Errorf("second unidentified call: %d %v; want 429 with Retry-After", r.StatusCode, capacityHeaders(r.Header))
	}
	e.up.release()
	if r := recv(t, first); r.StatusCode != 200 || r.Header.Get(ocl.Decision) != "unavailable" {
		t.Errorf("first: %d %v", r.StatusCode, capacityHeaders(r.Header))
	}
	if n := len(e.up.requests()); n != 1 {
		t.Errorf("the upstream ran %d calls; want 1", n)
	}
	lines := e.sink.Wait(t, 2, waitLimit)
	var admitted, refused int
	for _, l := range lines {
		if jsonText(l["user_id"]) != capgate.UnidentifiedUser {
			t.Errorf("log line user %v", l["user_id"])
		}
		switch jsonText(l["decision"]) {
		case "unavailable":
			admitted++
			if l["degraded"] != true || !strings.Contains(jsonText(l["error"]), "identity") {
				t.Errorf("counted line %v", l)
			}
		case "refused":
			refused++
		}
	}
	if admitted != 1 || refused != 1 {
		t.Errorf("lines %v", lines)
	}
	if strings.Contains(strings.Join(e.sink.Raw(), ""), "t-pam") {
		t.Errorf("a log line shows the token")
	}
}

// The limit is the config's unidentified setting; 0 refuses every call
// whose caller could not be identified. In shadow it only counts.
func TestUnidentifiedLimitIsConfigured(t *testing.T) {
	e := unidentifiedEnv(t, func(c *settings.Config) { c.Unidentified = 0 })
	if r := e.do(t.Context(), "POST", semanticMatch, twoRows, "Authorization", "Token t-pam"); r.StatusCode != 429 || len(e.up.requests()) != 0 {
		t.Errorf("unidentified 0: %d, %d upstream requests", r.StatusCode, len(e.up.requests()))
	}
	s := unidentifiedEnv(t, func(c *settings.Config) { c.Mode, c.Unidentified = settings.ModeShadow, 0 })
	if r := s.do(t.Context(), "POST", semanticMatch, twoRows, "Authorization", "Token t-pam"); r.StatusCode != 200 {
		t.Errorf("shadow: %d, want 200", r.StatusCode)
	}
}

// max_hold_seconds stops renewals; it never cuts a call whose client is
// still connected, and nobody is sent 499 (here max_hold 0: the gateway
// cut the call at once and answered 499).
func TestMaxHoldNeverCutsAConnectedClient(t *testing.T) {
	e := newEnv(t, func(c *settings.Config) { c.MaxHoldSeconds = 0 }, nil)
	res := e.async(t.Context(), "POST", semanticMatch, twoRows, "Authorization", "Token t-pam", "X-Test-Do", "hold")
	e.up.waitEntered(t)
	e.up.release()
	r := recv(t, res)
	if r.Err != nil || r.StatusCode != 200 || !strings.Contains(string(r.Body), "results") {
		t.Fatalf("status %d %v %q; want the API's 200", r.StatusCode, r.Err, r.Body)
	}
	e.up.mu.Lock()
	cancelled := e.up.cancelled
	e.up.mu.Unlock()
	if cancelled != 0 {
		t.Errorf("the upstream call was cut %d times", cancelled)
	}
}

// Header bytes count in --max-buffered-bytes: a request whose header
// would take the budget past its bound gets 503, and nothing is sent on.
func TestHeaderBytesCountInTheBudget(t *testing.T) {
	budget := capgatehttp.NewBudget(4 << 10)
	e := newEnv(t, nil, func(c *capgatehttp.GatewayConfig) {
		c.Classifier = &capgatehttp.Classifier{Budget: budget}
	})
	r := e.do(t.Context(), "GET", "/concepts/", "", "X-Pad", strings.Repeat("p", 8<<10))
	if r.StatusCode != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" || len(e.up.requests()) != 0 {
		t.Errorf("an 8 KiB header over a 4 KiB budget: %d, %d upstream requests; want 503", r.StatusCode, len(e.up.requests()))
	}
	if r := e.do(t.Context(), "GET", "/concepts/", ""); r.StatusCode != 200 {
		t.Errorf("a small header: %d", r.StatusCode)
	}
	if used := budget.Used(); used != 0 {
		t.Errorf("budget used after the calls: %d", used)
	}
}
