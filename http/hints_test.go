package http_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/capgate/capgate"
	capgatehttp "github.com/capgate/capgate/http"
	"github.com/capgate/capgate/identity"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/settings"
)

func TestRefusalCarriesTheSpacingHint(t *testing.T) {
	e := newEnv(t, func(c *settings.Config) {
		c.Mode, c.EnforceFor = settings.ModeEnforce, settings.EnforceAll
	}, nil)
	ctx := t.Context()

	// No history yet: pam's user lane (1 slot) is assumed to free one every
	// retry_after.base seconds.
	first := e.async(ctx, "POST", semanticMatch, twoRows, "Authorization", "Token t-pam", "X-Test-Do", "hold")
	e.up.waitEntered(t)
	r := e.do(ctx, "POST", semanticMatch, twoRows, "Authorization", "Token t-pam", "Origin", "https://mapper.example")
	if r.StatusCode != 429 {
		t.Fatalf("status %d, want 429", r.StatusCode)
	}
	if got := r.Header.Get(ocl.SuggestedSpacing); got != "5000" {
		t.Errorf("spacing %q, want 5000", got)
	}
	if !slices.ContainsFunc(exposed(r.Header), func(s string) bool { return strings.EqualFold(s, ocl.SuggestedSpacing) }) {
		t.Errorf("Access-Control-Expose-Headers %v lacks %s", exposed(r.Header), ocl.SuggestedSpacing)
	}
	e.up.release()
	if ok := recv(t, first); ok.Header.Get(ocl.SuggestedSpacing) != "" {
		t.Errorf("admitted call carries spacing %q", ok.Header.Get(ocl.SuggestedSpacing))
	}

	// pam's first call held the lane for a short while: the next refusal
	// says so, and asks for the least wait.
	e.sink.Wait(t, 2, waitLimit) // both calls released, so the hold is recorded
	// Every call has ended, so nothing reads the hold channel now.
	e.up.hold, e.up.once = make(chan struct{}), sync.Once{}
	second := e.async(ctx, "POST", semanticMatch, twoRows, "Authorization", "Token t-pam", "X-Test-Do", "hold")
	e.up.waitEntered(t)
	r = e.do(ctx, "POST", semanticMatch, twoRows, "Authorization", "Token t-pam")
	ms, err := strconv.Atoi(r.Header.Get(ocl.SuggestedSpacing))
	if r.StatusCode != 429 || err != nil || ms <= 0 || ms >= 5000 {
		t.Errorf("status %d, spacing %q; want 429 and the observed hold (under 5000 ms)", r.StatusCode, r.Header.Get(ocl.SuggestedSpacing))
	}
	if got := r.Header.Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After %q, want 1", got)
	}
	e.up.release()
	recv(t, second)
}

func TestMiddlewareShadowRefusalCarriesTheSpacingHint(t *testing.T) {
	entered, hold := make(chan struct{}, 2), make(chan struct{})
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Test-Do") == "hold" {
			entered <- struct{}{}
			<-hold
		}
		_, _ = io.WriteString(w, "ok")
	})
	gate, err := capgate.NewGate(memory.New(nil), settings.NewFixed(settings.Default(nil, settings.ModeShadow)), nil, "t")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := identity.NewTokens([]identity.TokenEntry{{Token: "t-pam", Username: "pam"}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := capgatehttp.NewMiddleware(next, gate, ids)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	defer close(hold)
	ch := make(chan response, 1)
	go func() {
		req := newRequest(t, t.Context(), "POST", srv.URL+semanticMatch, twoRows, "Authorization", "Token t-pam", "X-Test-Do", "hold")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			ch <- response{Err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		ch <- response{resp, b, err}
	}()
	<-entered
	// pam (preview) may run one call: the second is shadow-refused, goes
	// ahead, and is told how often the lane frees a slot.
	r := send(t, newRequest(t, t.Context(), "POST", srv.URL+semanticMatch, twoRows, "Authorization", "Token t-pam"))
	if d := r.Header.Get(ocl.Decision); d != "shadow-refused" || r.StatusCode != 200 {
		t.Fatalf("%d %s, want 200 shadow-refused", r.StatusCode, d)
	}
	if got := r.Header.Get(ocl.SuggestedSpacing); got != "5000" {
		t.Errorf("spacing %q, want 5000", got)
	}
	if got := r.Header.Get("Retry-After"); got != "" {
		t.Errorf("shadow-refused call got Retry-After %q", got)
	}
}
