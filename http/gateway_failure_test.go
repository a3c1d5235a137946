package http_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/capgate/capgate"
	capgatehttp "github.com/capgate/capgate/http"
	"github.com/capgate/capgate/identity"
	"github.com/capgate/capgate/mock"
	"github.com/capgate/capgate/settings"
)

// A client that is admitted and hangs up does not free its place while the
// upstream still runs the call: the upstream request is not cancelled, the
// leases are held until it has answered, then released.
func TestClientThatGoesAwayHoldsItsLeasesUntilTheUpstreamFinishes(t *testing.T) {
	e := newEnv(t, nil, nil)
	var atFinish map[string]int
	e.up.mu.Lock()
	e.up.onFinish = func() { atFinish = e.inFlight() }
	e.up.mu.Unlock()
	ctx, cancel := context.WithCancel(t.Context())
	res := e.async(ctx, "POST", semanticMatch, twoRows, "Authorization", "Token t-pam", "X-Test-Do", "hold")
	e.up.waitEntered(t)
	if m := e.inFlight(); len(m) != 5 {
		t.Fatalf("lanes while the call runs: %v; want 5 lanes with one lease each", m)
	}
	cancel() // only the client goes away; the upstream still holds the call
	if r := recv(t, res); r.Err == nil {
		t.Fatal("the cancelled request succeeded")
	}
	waitGone(t, e)
	if m := e.inFlight(); len(m) != 5 {
		t.Fatalf("lanes after the client left, the upstream still running: %v; want the 5 leases held", m)
	}
	e.up.release()
	l := e.sink.Wait(t, 1, waitLimit) // written once the leases are given back
	e.up.mu.Lock()
	cancelled := e.up.cancelled
	e.up.mu.Unlock()
	if cancelled != 0 {
		t.Errorf("the upstream request was cancelled %d times", cancelled)
	}
	if len(atFinish) != 5 {
		t.Errorf("lanes as the upstream finished: %v; want the 5 leases still held", atFinish)
	}
	if m := e.inFlight(); len(m) != 0 {
		t.Errorf("leases left after the upstream finished: %v", m)
	}
	if jsonText(l[0]["decision"]) != "admitted" {
		t.Errorf("log line %v", l[0])
	}
}

// A call that holds no lease keeps cancel-on-disconnect: the upstream
// request ends with its client.
func TestUngatedCallIsCancelledWithItsClient(t *testing.T) {
	e := newEnv(t, nil, nil)
	ctx, cancel := context.WithCancel(t.Context())
	res := e.async(ctx, "POST", "/concepts/$match/", twoRows, "Authorization", "Token t-pam", "X-Test-Do", "hold")
	e.up.waitEntered(t)
	cancel()
	recv(t, res)
	timer := time.NewTimer(waitLimit)
	defer timer.Stop()
	select {
	case <-e.up.cancels:
	case <-timer.C:
		t.Fatal("the upstream request of an ungated call was not cancelled with its client")
	}
}

// waitGone waits until the gateway's server has seen a request end.
func waitGone(t *testing.T, e *env) {
	t.Helper()
	timer := time.NewTimer(waitLimit)
	defer timer.Stop()
	select {
	case <-e.gone:
	case <-timer.C:
		t.Fatal("the gateway never saw the client go")
	}
}

func TestUpstreamFailuresStillRelease(t *testing.T) {
	for _, tt := range []struct {
		do     string
		status int // 0: the client sees an error
	}{
		{"500", 500},
		{"reset", 502},
		{"partial", 0},
	} {
		t.Run(tt.do, func(t *testing.T) {
			e := newEnv(t, nil, nil)
			req := newRequest(t, t.Context(), "POST", e.front.URL+semanticMatch, twoRows,
				"Authorization", "Token t-pam", "X-Test-Do", tt.do)
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				_, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			switch {
			case tt.status == 0:
				// Cut short: the client sees the connection end.
				if err == nil {
					t.Error("a response cut short read cleanly")
				}
			case err != nil:
				t.Fatal(err)
			case resp.StatusCode != tt.status:
				t.Errorf("status %d, want %d", resp.StatusCode, tt.status)
			case resp.Header.Get(ocl.Decision) != "admitted":
				t.Errorf("decision header %q on the failed call", resp.Header.Get(ocl.Decision))
			}
			l := e.sink.Wait(t, 1, waitLimit)
			if m := e.inFlight(); len(m) != 0 {
				t.Errorf("leases left: %v", m)
			}
			if jsonText(l[0]["decision"]) != "admitted" {
				t.Errorf("log line %v", l[0])
			}
		})
	}
}

func TestUpstreamDownIs502AndReleases(t *testing.T) {
	e := newEnv(t, nil, nil)
	e.up.Close()
	r := e.do(t.Context(), "POST", semanticMatch, twoRows, "Authorization", "Token t-pam")
	if r.StatusCode != http.StatusBadGateway || r.Header.Get(ocl.Decision) != "admitted" {
		t.Errorf("got %d %v", r.StatusCode, capacityHeaders(r.Header))
	}
	e.sink.Wait(t, 1, waitLimit)
	if m := e.inFlight(); len(m) != 0 {
		t.Errorf("leases left: %v", m)
	}
}

func TestUpstreamTimeoutIs504(t *testing.T) {
	tr := capgatehttp.NewTransport()
	tr.ResponseHeaderTimeout = 50 * time.Millisecond
	e := newEnv(t, nil, func(c *capgatehttp.GatewayConfig) { c.Transport = tr })
	r := e.do(t.Context(), "POST", "/slow", "", "X-Test-Do", "hold")
	if r.StatusCode != http.StatusGatewayTimeout {
		t.Errorf("status %d, want 504", r.StatusCode)
	}
}

func TestIdentityLookupsAreCached(t *testing.T) {
	clock := newFakeClock()
	e := newEnv(t, nil, func(c *capgatehttp.GatewayConfig) {
		id, err := identity.NewUpstream(c.Upstream.String())
		if err != nil {
			t.Fatal(err)
		}
		id.Now = clock.Now
		c.Identify = id
	})
	ctx := t.Context()
	for range 3 {
		r := e.do(ctx, "POST", semanticMatch, twoRows, "Authorization", "Token t-cora")
		if r.Header.Get(ocl.Tier) != "core" {
			t.Fatalf("tier %q", r.Header.Get(ocl.Tier))
		}
	}
	e.do(ctx, "POST", semanticMatch, twoRows, "Authorization", "Token t-stan")
	if a, b := e.up.lookupsOf("Token t-cora"), e.up.lookupsOf("Token t-stan"); a != 1 || b != 1 {
		t.Errorf("lookups cora=%d stan=%d, want 1 each", a, b)
	}
	clock.Advance(time.Minute)
	e.do(ctx, "POST", semanticMatch, twoRows, "Authorization", "Token t-cora")
	if n := e.up.lookupsOf("Token t-cora"); n != 2 {
		t.Errorf("lookups after a minute: %d, want 2", n)
	}

	// Calls that are not heavy, or carry no credentials, look nobody up.
	e.do(ctx, "POST", "/concepts/$match/", twoRows, "Authorization", "Token t-pat")
	e.do(ctx, "GET", "/concepts/", "", "Authorization", "Token t-pat")
	r := e.do(ctx, "POST", semanticMatch, twoRows)
	if n := e.up.lookupsOf("Token t-pat") + e.up.lookupsOf(""); n != 0 || len(capacityHeaders(r.Header)) != 0 {
		t.Errorf("%d lookups for calls that need none", n)
	}
	// A credential the API rejects is gated as (anonymous), its 401
	// cached: one lookup for two calls.
	for range 2 {
		r = e.do(ctx, "POST", semanticMatch, twoRows, "Authorization", "Token bad")
		if r.StatusCode != 200 || r.Header.Get(ocl.Decision) != "admitted" || r.Header.Get(ocl.Tier) != "preview" {
			t.Errorf("rejected credential: %d %v; want gated as (anonymous), preview", r.StatusCode, capacityHeaders(r.Header))
		}
	}
	if n := e.up.lookupsOf("Token bad"); n != 1 {
		t.Errorf("lookups of a rejected credential: %d, want 1", n)
	}
}

// Without local lanes, a call whose caller could not be identified is
// counted in a lane store that lives in this process (the whole of the
// lanes: "admitted"); with neither, nothing can count it, and enforced it
// is refused (it used to pass as unavailable).
func TestFailingLookupWithoutLocalLanes(t *testing.T) {
	for _, inProcess := range []bool{true, false} {
		t.Run(fmt.Sprintf("in-process store %v", inProcess), func(t *testing.T) {
			e := newEnv(t, func(c *settings.Config) {
				c.Mode, c.EnforceFor = settings.ModeEnforce, settings.EnforceAll
			}, func(c *capgatehttp.GatewayConfig) {
				id, err := identity.NewUpstream(c.Upstream.String())
				if err != nil {
					t.Fatal(err)
				}
				c.Identify = id
			})
			if !inProcess {
				e.gate.Store = &mock.LaneStore{Base: e.store, CapsFn: func() capgate.StoreCaps { return capgate.StoreCaps{} }} // a store of unknown kind
			}
			e.up.setUserStatus(http.StatusServiceUnavailable)
			want, decision := 429, "refused"
			if inProcess {
				want, decision = 200, "admitted"
			}
			r := e.do(t.Context(), "POST", semanticMatch, twoRows, "Authorization", "Token t-pam")
			if r.StatusCode != want {
				t.Fatalf("status %d; want %d", r.StatusCode, want)
			}
			l := e.sink.Wait(t, 1, waitLimit)
			if jsonText(l[0]["decision"]) != decision || jsonText(l[0]["user_id"]) != capgate.UnidentifiedUser ||
				!strings.Contains(jsonText(l[0]["error"]), "identity") {
				t.Errorf("log line %v", l[0])
			}
			if strings.Contains(e.sink.Raw()[0], "t-pam") {
				t.Errorf("the log line shows the token: %s", e.sink.Raw()[0])
			}
		})
	}
}

func TestBodiesArriveByteForByte(t *testing.T) {
	const limit = 4096
	oversize := 0
	e := newEnv(t, nil, func(c *capgatehttp.GatewayConfig) {
		c.Classifier = &capgatehttp.Classifier{MaxBodyBytes: limit, Oversize: func() { oversize++ }}
	})
	small := []byte(`{"rows":[{"name":"fi\u00e8vre"}],   "x": "` + "\x7f" + `"}`)
	big := append([]byte(`{"rows":[{"name":"fever"}],"pad":"`), bytes.Repeat([]byte("ab"), 3*limit)...)
	big = append(big, `"}`...)
	junk := make([]byte, limit/2)
	rand.Read(junk)
	for _, tt := range []struct {
		name    string
		body    []byte
		chunked bool
		gated   bool
	}{
		{"small", small, false, true},
		{"small chunked", small, true, true},
		{"over the limit", big, false, true},
		{"over the limit chunked", big, true, true},
		{"binary junk", junk, true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := len(e.up.requests())
			var rd io.Reader = bytes.NewReader(tt.body)
			if tt.chunked {
				rd = io.MultiReader(rd) // hides the length: sent chunked
			}
			req, err := http.NewRequestWithContext(t.Context(), "POST", e.front.URL+semanticMatch, rd)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Token t-pam")
			r := send(t, req)
			reqs := e.up.requests()
			if len(reqs) != before+1 || !bytes.Equal(reqs[before].Body, tt.body) {
				t.Fatalf("upstream body differs (%d bytes sent)", len(tt.body))
			}
			if gated := r.Header.Get(ocl.Decision) != ""; gated != tt.gated {
				t.Errorf("gated = %v, want %v", gated, tt.gated)
			}
		})
	}
	if oversize != 2 {
		t.Errorf("oversize bodies counted %d, want 2", oversize)
	}
}

func TestModeOffLooksNobodyUp(t *testing.T) {
	e := newEnv(t, func(c *settings.Config) { c.Mode = settings.ModeOff }, func(c *capgatehttp.GatewayConfig) {
		id, err := identity.NewUpstream(c.Upstream.String())
		if err != nil {
			t.Fatal(err)
		}
		c.Identify = id
	})
	r := e.do(t.Context(), "POST", semanticMatch, twoRows, "Authorization", "Token t-pam")
	if r.StatusCode != 200 || len(capacityHeaders(r.Header)) != 0 {
		t.Errorf("got %d %v", r.StatusCode, capacityHeaders(r.Header))
	}
	if n := e.up.lookupsOf("Token t-pam"); n != 0 {
		t.Errorf("%d identity lookups in mode off", n)
	}
}

func newFakeClock() *mock.Clock { return mock.NewClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)) }

// Why: at shutdown, past its timeout, the gateway cuts the calls still
// running (GatewayConfig.Shutdown): a counted call's upstream request,
// which otherwise outlives its client, is cancelled, its line says error
// "shutdown", and its leases are given back.
func TestShutdownCutsACountedCall(t *testing.T) {
	cut, cutCalls := context.WithCancel(t.Context())
	defer cutCalls()
	e := newEnv(t, nil, func(c *capgatehttp.GatewayConfig) { c.Shutdown = cut })
	res := e.async(t.Context(), "POST", semanticMatch, twoRows, "Authorization", "Token t-pam", "X-Test-Do", "hold")
	e.up.waitEntered(t)
	if m := e.inFlight(); len(m) != 5 {
		t.Fatalf("lanes while the call runs: %v; want 5 lanes with one lease each", m)
	}
	cutCalls()
	select {
	case <-e.up.cancels:
	case <-time.After(waitLimit):
		t.Fatal("the upstream request was not cancelled by the shutdown")
	}
	recv(t, res)
	l := e.sink.Wait(t, 1, waitLimit)
	if jsonText(l[0]["error"]) != "shutdown" {
		t.Errorf("log line %v; want error shutdown", l[0])
	}
	if m := e.inFlight(); len(m) != 0 {
		t.Errorf("leases left after the cut call ended: %v", m)
	}
}
