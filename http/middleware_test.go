package http_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/capgate/capgate"
	capgatehttp "github.com/capgate/capgate/http"
	"github.com/capgate/capgate/identity"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/mock"
	"github.com/capgate/capgate/settings"
)

// mwEnv is the middleware alone, in front of a Go handler, served over
// real HTTP.
type mwEnv struct {
	store *memory.Store
	sink  *mock.Sink
	srv   *httptest.Server
}

func newMWEnv(t *testing.T, next http.Handler) *mwEnv {
	t.Helper()
	e := &mwEnv{store: memory.New(nil), sink: &mock.Sink{}}
	gate, err := capgate.NewGate(e.store, settings.NewFixed(settings.Default(nil, settings.ModeShadow)), e.sink, "t")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := identity.NewTokens([]identity.TokenEntry{{Token: "t-pam", Username: "pam"}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := capgatehttp.NewMiddleware(next, gate, ids,
		capgatehttp.WithLogger(slog.New(slog.NewTextHandler(t.Output(), nil))))
	if err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewUnstartedServer(h)
	e.srv.Config.ErrorLog = slog.NewLogLogger(slog.NewTextHandler(t.Output(), nil), slog.LevelError)
	e.srv.Start()
	t.Cleanup(e.srv.Close)
	return e
}

func (e *mwEnv) post(t *testing.T) (*http.Response, []byte, error) {
	t.Helper()
	req := newRequest(t, t.Context(), "POST", e.srv.URL+semanticMatch, twoRows, "Authorization", "Token t-pam")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

func (e *mwEnv) leases(t *testing.T) int {
	t.Helper()
	keys, err := e.store.Keys(t.Context(), "ocl:capacity")
	if err != nil {
		t.Fatal(err)
	}
	counts := make([]int, len(keys))
	if err := e.store.Count(t.Context(), keys, counts); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}

func TestMiddlewarePanics(t *testing.T) {
	// Before anything is written: a 500 carrying the capacity headers.
	e := newMWEnv(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }))
	resp, body, err := e.post(t)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 500 || resp.Header.Get(ocl.Decision) != "admitted" || string(body) != "Internal Server Error\n" {
		t.Errorf("got %d %q %v", resp.StatusCode, body, capacityHeaders(resp.Header))
	}
	e.sink.Wait(t, 1, waitLimit)
	if n := e.leases(t); n != 0 {
		t.Errorf("%d leases left after a panic", n)
	}

	// After the header went out, and http.ErrAbortHandler: the panic goes
	// on up, net/http drops the connection, and the leases are released.
	for _, p := range []any{"late boom", http.ErrAbortHandler} {
		e := newMWEnv(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if p != http.ErrAbortHandler {
				w.Write([]byte("partial"))
				http.NewResponseController(w).Flush()
			}
			panic(p)
		}))
		if _, _, err := e.post(t); err == nil {
			t.Errorf("panic %v: the client saw a clean response", p)
		}
		e.sink.Wait(t, 1, waitLimit)
		if n := e.leases(t); n != 0 {
			t.Errorf("panic %v: %d leases left", p, n)
		}
	}
}

func TestMiddlewareKeepsTheWriterInterfaces(t *testing.T) {
	type result struct {
		flusher, hijacker, ctrlFlush bool
		hdrAtFlush                   string
	}
	got := make(chan result, 1)
	e := newMWEnv(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var res result
		_, res.hijacker = w.(http.Hijacker)
		f, ok := w.(http.Flusher)
		res.flusher = ok
		if ok {
			f.Flush() // headers go out with the first flush
			res.hdrAtFlush = w.Header().Get(ocl.Decision)
		}
		res.ctrlFlush = http.NewResponseController(w).Flush() == nil
		got <- res
	}))
	resp, _, err := e.post(t)
	if err != nil {
		t.Fatal(err)
	}
	res := <-got
	if !res.flusher || !res.hijacker || !res.ctrlFlush || res.hdrAtFlush != "admitted" {
		t.Errorf("writer: %+v", res)
	}
	if resp.Header.Get(ocl.Decision) != "admitted" {
		t.Errorf("headers %v", capacityHeaders(resp.Header))
	}

	// A hijacked connection is the handler's.
	e = newMWEnv(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("Hijack: %v", err)
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
		brw.Flush()
	}))
	resp, _, err = e.post(t)
	if err != nil || resp.StatusCode != 204 {
		t.Errorf("hijacked: %v %v", resp, err)
	}
}

func TestMiddlewareErrorResponsesCarryTheHeaders(t *testing.T) {
	e := newMWEnv(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		http.Error(w, `{"detail":"Not found."}`, http.StatusNotFound)
	}))
	resp, body, err := e.post(t)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 404 || resp.Header.Get(ocl.Decision) != "admitted" || !strings.Contains(string(body), "Not found") {
		t.Errorf("got %d %v %q", resp.StatusCode, capacityHeaders(resp.Header), body)
	}
	if !hex32.MatchString(resp.Header.Get("X-Request-ID")) {
		t.Errorf("X-Request-ID %q", resp.Header.Get("X-Request-ID"))
	}
}

func TestMiddlewareReplaysTheBody(t *testing.T) {
	got := make(chan string, 1)
	e := newMWEnv(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			t.Error(err)
		}
		got <- string(b)
	}))
	if _, _, err := e.post(t); err != nil {
		t.Fatal(err)
	}
	if b := <-got; b != twoRows {
		t.Errorf("handler read %q", b)
	}
}

func TestNewMiddlewareRejectsMissingParts(t *testing.T) {
	gate, err := capgate.NewGate(memory.New(nil), settings.NewFixed(settings.Default(nil, "")), nil, "t")
	if err != nil {
		t.Fatal(err)
	}
	ids, _ := identity.NewTokens(nil)
	next := http.NotFoundHandler()
	for i, f := range []func() (*capgatehttp.Middleware, error){
		func() (*capgatehttp.Middleware, error) { return capgatehttp.NewMiddleware(nil, gate, ids) },
		func() (*capgatehttp.Middleware, error) { return capgatehttp.NewMiddleware(next, nil, ids) },
		func() (*capgatehttp.Middleware, error) { return capgatehttp.NewMiddleware(next, gate, nil) },
	} {
		if _, err := f(); err == nil {
			t.Errorf("case %d accepted", i)
		}
	}
}

// blockingSink holds every line until release is closed.
type blockingSink struct{ release chan struct{} }

func (s blockingSink) Emit([]byte) error { <-s.release; return nil }

// The response reaches the client before the leases are given back (the
// log line is written at release): a release must not delay the answer.
func TestResponseIsSentBeforeRelease(t *testing.T) {
	sink := blockingSink{release: make(chan struct{})}
	gate, err := capgate.NewGate(memory.New(nil), settings.NewFixed(settings.Default(nil, settings.ModeShadow)), sink, "t")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := identity.NewTokens([]identity.TokenEntry{{Token: "t-pam", Username: "pam"}})
	if err != nil {
		t.Fatal(err)
	}
	next := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok") // small: net/http would buffer it until the handler returns
	})
	h, err := capgatehttp.NewMiddleware(next, gate, ids)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	defer close(sink.release) // before srv.Close, which waits for the handler
	got := make(chan string, 1)
	go func() {
		req := newRequest(t, t.Context(), "POST", srv.URL+semanticMatch, twoRows, "Authorization", "Token t-pam")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			got <- err.Error()
			return
		}
		defer resp.Body.Close()
		b := make([]byte, 2)
		_, _ = io.ReadFull(resp.Body, b)
		got <- string(b)
	}()
	select {
	case s := <-got:
		if s != "ok" {
			t.Fatalf("client got %q", s)
		}
	case <-time.After(waitLimit):
		t.Fatal("the response did not reach the client while the release was in progress")
	}
}
