package http_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	capgatehttp "github.com/capgate/capgate/http"
	"github.com/capgate/capgate/identity"
	"github.com/capgate/capgate/mock"
)

// observer records what a GatewayObserver is told, one event per call on
// its channel.
type observer struct{ events chan string }

func newObserver() *observer { return &observer{events: make(chan string, 64)} }

func (o *observer) Request(class string, code int) {
	o.events <- "request " + class + " " + http.StatusText(code)
}
func (o *observer) Upstream(class string, d time.Duration) { o.events <- "upstream " + class }
func (o *observer) UpstreamError(kind string)              { o.events <- "error " + kind }

// next returns the next event, failing after a bound.
func (o *observer) next(t *testing.T) string {
	t.Helper()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	select {
	case e := <-o.events:
		return e
	case <-timer.C:
		t.Fatal("no event from the gateway")
		return ""
	}
}

func (o *observer) expect(t *testing.T, want ...string) {
	t.Helper()
	for _, w := range want {
		if got := o.next(t); got != w {
			t.Errorf("event %q, want %q", got, w)
		}
	}
}

const heavyTarget = "/concepts/$match/?semantic=true"

func TestObserverSeesRequestsByClass(t *testing.T) {
	obs := newObserver()
	e := newEnv(t, nil, func(c *capgatehttp.GatewayConfig) {
		c.Observer = obs
		c.Health = &capgatehttp.Health{}
	})
	ctx := t.Context()
	e.do(ctx, "GET", "/concepts/", "", "Authorization", "Token t-pam")
	obs.expect(t, "upstream light", "request light OK")
	e.do(ctx, "POST", heavyTarget, `{"rows":[{"name":"a"}]}`, "Authorization", "Token t-pam")
	obs.expect(t, "upstream heavy", "request heavy OK")
	e.do(ctx, "GET", "/livez", "")
	obs.expect(t, "request staff OK")
}

// The gateway's own 502 and 504 carry a JSON body, and the failure is
// counted by kind.
func TestUpstreamFailuresAnswerJSON(t *testing.T) {
	obs := newObserver()
	e := newEnv(t, nil, func(c *capgatehttp.GatewayConfig) { c.Observer = obs })
	ctx := t.Context()

	r := e.do(ctx, "GET", "/concepts/", "", "X-Test-Do", "reset")
	checkErrorBody(t, r, http.StatusBadGateway)
	obs.expect(t, "error reset", "request light Bad Gateway")

	// Nothing listens: connect.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	obs2 := newObserver()
	e2 := newEnv(t, nil, func(c *capgatehttp.GatewayConfig) {
		c.Observer = obs2
		c.Upstream, _ = url.Parse(dead)
	})
	r = e2.do(ctx, "GET", "/concepts/", "", "X-Request-ID", "rid-1")
	body := checkErrorBody(t, r, http.StatusBadGateway)
	if body.RequestID != "rid-1" {
		t.Errorf("request_id %q, want rid-1", body.RequestID)
	}
	obs2.expect(t, "error connect", "request light Bad Gateway")

	// A transport that times out: 504.
	obs3 := newObserver()
	e3 := newEnv(t, nil, func(c *capgatehttp.GatewayConfig) {
		c.Observer = obs3
		c.Transport = roundTripFunc(func(*http.Request) (*http.Response, error) {
			return nil, context.DeadlineExceeded
		})
	})
	r = e3.do(ctx, "GET", "/concepts/", "")
	checkErrorBody(t, r, http.StatusGatewayTimeout)
	obs3.expect(t, "error timeout", "request light Gateway Timeout")
}

type errorBody struct {
	Detail    string `json:"detail"`
	RequestID string `json:"request_id"`
}

func checkErrorBody(t *testing.T, r response, status int) errorBody {
	t.Helper()
	if r.StatusCode != status {
		t.Fatalf("status %d, want %d", r.StatusCode, status)
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	var b errorBody
	if err := json.Unmarshal(r.Body, &b); err != nil || b.Detail == "" {
		t.Errorf("body %q: want {\"detail\": ...} (%v)", r.Body, err)
	}
	return b
}

func TestAccessLog(t *testing.T) {
	access := &mock.Sink{}
	e := newEnv(t, nil, func(c *capgatehttp.GatewayConfig) {
		c.AccessLog = access
		c.Health = &capgatehttp.Health{}
	})
	ctx := t.Context()
	light := e.do(ctx, "GET", "/concepts/?q=secret", "", "Authorization", "Token t-pam")
	heavy := e.do(ctx, "POST", heavyTarget, `{"rows":[{"name":"a"}]}`, "Authorization", "Token t-pam", "X-Request-ID", "mine")
	e.do(ctx, "GET", "/readyz", "")
	lines := access.Wait(t, 3, 10*time.Second)

	// The light call had no id: it got one, sent to the API and returned.
	rid := light.Header.Get("X-Request-ID")
	if len(rid) != 32 {
		t.Fatalf("light call's X-Request-ID %q, want 32 hex characters", rid)
	}
	if got := e.up.requests()[0].Header.Get("X-Request-ID"); got != rid {
		t.Errorf("the API got X-Request-ID %q, want %q", got, rid)
	}
	if got := heavy.Header.Get("X-Request-ID"); got != "mine" {
		t.Errorf("heavy call's X-Request-ID %q, want the caller's", got)
	}
	want := []struct{ rid, path, class string }{
		{rid, "/concepts/", capgatehttp.ClassLight},
		{"mine", "/concepts/$match/", capgatehttp.ClassHeavy},
		{"", "/readyz", capgatehttp.ClassStaff},
	}
	for i, w := range want {
		l := lines[i]
		if l["event"] != "capgate_access" || l["path"] != w.path || l["class"] != w.class || fmt.Sprint(l["status"]) != "200" {
			t.Errorf("line %d: %v; want path %s, class %s, status 200", i, l, w.path, w.class)
		}
		if w.rid != "" && l["request_id"] != w.rid {
			t.Errorf("line %d: request_id %v, want %s", i, l["request_id"], w.rid)
		}
		if l["request_id"] == "" {
			t.Errorf("line %d: no request id", i)
		}
	}
}

// failingIdentity fails every lookup, as the upstream identity does while
// the API is down.
type failingIdentity struct{}

func (failingIdentity) Identify(context.Context, *http.Request) (identity.Caller, bool, error) {
	return identity.Caller{}, false, errors.New("identity lookup: connection refused")
}

// TestMetricsWithoutTheIdentityLookup is the finding "/metrics answers 503
// while the API is down": the metrics token and a static staff token are
// taken without asking the identifier.
func TestMetricsWithoutTheIdentityLookup(t *testing.T) {
	staffTokens, err := identity.NewStaffTokens([]identity.TokenEntry{{Token: "s3cret-staff", Username: "ops", IsStaff: true}})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, nil, func(c *capgatehttp.GatewayConfig) {
		c.Identify = failingIdentity{}
		c.StaffIdentify = identity.NewStaff(staffTokens, failingIdentity{})
		c.Metrics = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("capgate_up 1\n")) })
		c.MetricsToken = "m-token"
	})
	ctx := t.Context()
	for _, tc := range []struct {
		auth string
		want int
	}{
		{"Bearer m-token", http.StatusOK},
		{"Token s3cret-staff", http.StatusOK},
		{"Bearer wrong", http.StatusServiceUnavailable}, // asks the identifier, which fails
		{"", http.StatusServiceUnavailable},
	} {
		var hdr []string
		if tc.auth != "" {
			hdr = []string{"Authorization", tc.auth}
		}
		if r := e.do(ctx, "GET", "/metrics", "", hdr...); r.StatusCode != tc.want {
			t.Errorf("%q: status %d, want %d", tc.auth, r.StatusCode, tc.want)
		}
	}
	if _, err := identity.NewStaffTokens([]identity.TokenEntry{{Token: "x", Username: "pam"}}); err == nil {
		t.Error("a staff tokens entry that is not staff was accepted")
	}
}

// The admin listener's requests are counted and logged as staff.
func TestObserveStaff(t *testing.T) {
	obs, access := newObserver(), &mock.Sink{}
	h := capgatehttp.ObserveStaff(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTeapot)
	}), obs, access)
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	obs.expect(t, "request staff I'm a teapot")
	l := access.Wait(t, 1, 10*time.Second)[0]
	if l["class"] != "staff" || l["path"] != "/metrics" || fmt.Sprint(l["status"]) != "418" {
		t.Errorf("access line %v; want class staff, path /metrics, status 418", l)
	}
	if plain := capgatehttp.ObserveStaff(http.NotFoundHandler(), nil, nil); plain == nil {
		t.Error("ObserveStaff with nothing to do returned nil")
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
