package decide_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/decide"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/mock"
	"github.com/capgate/capgate/settings"
)

// waitLimit bounds every wait for an event in these tests.
const waitLimit = 10 * time.Second

type env struct {
	url   string
	srv   *decide.Server
	gate  *capgate.Gate
	cfg   *settings.Fixed
	sink  *mock.Sink
	store *memory.Store
}

// newEnv serves a decision service over in-process lanes in enforce for
// every call, core users at one call; edit changes the config.
func newEnv(t *testing.T, token string, edit func(*settings.Config)) *env {
	t.Helper()
	c := settings.Default(nil, settings.ModeEnforce)
	c.EnforceFor = settings.EnforceAll
	setNumbers(t, &c, map[string]int{"per_user.core": 1})
	c.Wait.MaxSeconds = 0
	if edit != nil {
		edit(&c)
	}
	e := &env{cfg: settings.NewFixed(c), sink: &mock.Sink{}, store: memory.New(nil)}
	gate, err := capgate.NewGate(e.store, e.cfg, e.sink, "host-a")
	if err != nil {
		t.Fatal(err)
	}
	e.gate = gate
	e.srv = decide.NewServer(e.gate)
	e.srv.Token = token
	hs := httptest.NewUnstartedServer(e.srv)
	hs.Config = decide.NewHTTPServer(e.srv, e.gate.Logger)
	hs.Start()
	t.Cleanup(func() {
		e.srv.Shutdown()
		hs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		e.srv.Wait(ctx)
		_ = e.srv.Close(context.Background())
		_ = e.gate.Close(context.Background())
	})
	e.url = hs.URL
	return e
}

// stream is one POST /v1/calls whose answer is being read.
type stream struct {
	resp *http.Response
	br   *bufio.Reader
	d    decide.Decision
}

func (s *stream) close() { s.resp.Body.Close() }

// nextLine reads the next JSON line of the answer into v.
func (s *stream) nextLine(t *testing.T, v any) {
	t.Helper()
	line, err := s.br.ReadBytes('\n')
	if err != nil {
		t.Fatalf("read a line: %v", err)
	}
	if err := json.Unmarshal(line, v); err != nil {
		t.Fatalf("line %q: %v", line, err)
	}
}

// post sends a call and reads its decision.
func (e *env) post(t *testing.T, ctx context.Context, body, token string) *stream {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "POST", e.url+"/v1/calls", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	s := &stream{resp: resp, br: bufio.NewReader(resp.Body)}
	t.Cleanup(s.close)
	if resp.StatusCode == 200 {
		s.nextLine(t, &s.d)
	}
	return s
}

const coraCall = `{"user":"cora","groups":["core_user"],"endpoint":"$match","semantic":true,"rows":1,"request_id":"rid-%d"}`

func call(n string) string { return strings.Replace(coraCall, "%d", n, 1) }

func TestUnknownFieldIsRefused(t *testing.T) {
	e := newEnv(t, "", nil)
	s := e.post(t, t.Context(), `{"user":"cora","endpoint":"$match","rows":1,"sematic":true}`, "")
	b, _ := io.ReadAll(s.resp.Body)
	if s.resp.StatusCode != 400 || !strings.Contains(string(b), `unknown field \"sematic\"`) {
		t.Errorf("status %d, body %s; want 400 naming the field", s.resp.StatusCode, b)
	}
	for _, bad := range []string{
		`{"endpoint":"$match","rows":1}`,
		`{"user":"u","endpoint":"$list","rows":1}`,
		`{"user":"u","endpoint":"$match","rows":-1}`,
		`{"user":"u","endpoint":"$match","rows":1,"tier":"core","groups":["core_user"]}`,
		`{"user":"u","endpoint":"$match","rows":1,"tier":"gold"}`,
		`{"user":"u","endpoint":"$match","rows":1,"task":"a b"}`,
		`{"user":"u","endpoint":"$match","rows":1} {}`,
	} {
		if s := e.post(t, t.Context(), bad, ""); s.resp.StatusCode != 400 {
			t.Errorf("%s: status %d, want 400", bad, s.resp.StatusCode)
		}
	}
	resp, err := http.Post(e.url+"/v1/calls", "text/plain", strings.NewReader(call("1")))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Errorf("a call as text/plain (what a web page may send cross-origin): %d, want 415", resp.StatusCode)
	}
	if n := len(e.sink.Raw()); n != 0 {
		t.Errorf("%d log lines for refused requests, want 0", n)
	}
}

// TestHeldUntilTheConnectionCloses: per_user 1 — the second call is
// refused with the 429 to copy while the first is held, and admitted once
// the first call's connection is closed.
func TestHeldUntilTheConnectionCloses(t *testing.T) {
	e := newEnv(t, "", nil)
	first := e.post(t, t.Context(), call("1"), "")
	if first.d.Decision != "admitted" || !first.d.Held || first.d.Status != 0 {
		t.Fatalf("first: %+v, want admitted and held", first.d)
	}
	if first.d.Headers["X-Ocl-Capacity-Tier"] != "core" || first.d.Headers["X-Request-Id"] != "rid-1" {
		t.Errorf("first headers %v: want tier core (from groups) and the request id", first.d.Headers)
	}
	second := e.post(t, t.Context(), call("2"), "")
	if second.d.Decision != "refused" || second.d.Status != 429 || second.d.Held {
		t.Fatalf("second: %+v, want refused with 429", second.d)
	}
	var body map[string]any
	if err := json.Unmarshal(second.d.Body, &body); err != nil || body["scope"] != "user" {
		t.Errorf("429 body %s: want scope user", second.d.Body)
	}
	if second.d.Headers["Retry-After"] == "" || second.d.Headers["Ratelimit"] == "" {
		t.Errorf("429 headers %v: want Retry-After and RateLimit", second.d.Headers)
	}
	// A refused call's answer ends after its line.
	if _, err := second.br.ReadByte(); err != io.EOF {
		t.Errorf("after a refusal's line: %v, want EOF", err)
	}
	first.close()
	e.sink.Wait(t, 2, waitLimit) // the refusal's line and the first call's, written at its release
	third := e.post(t, t.Context(), call("3"), "")
	if third.d.Decision != "admitted" {
		t.Errorf("after the first closed: %+v, want admitted", third.d)
	}
}

// TestReleaseByID ends a held call through POST /v1/calls/{id}/release;
// the stream then says why it ended.
func TestReleaseByID(t *testing.T) {
	const token = "s3cret"
	e := newEnv(t, token, nil)
	if s := e.post(t, t.Context(), call("1"), ""); s.resp.StatusCode != 401 {
		t.Fatalf("no token: status %d, want 401", s.resp.StatusCode)
	}
	if s := e.post(t, t.Context(), call("1"), "wrong"); s.resp.StatusCode != 401 {
		t.Fatalf("wrong token: status %d, want 401", s.resp.StatusCode)
	}
	s := e.post(t, t.Context(), call("1"), token)
	if !s.d.Held {
		t.Fatalf("%+v: want held", s.d)
	}
	for id, want := range map[string]int{"nope": 404, s.d.ID: 204} {
		req, _ := http.NewRequestWithContext(t.Context(), "POST", e.url+"/v1/calls/"+id+"/release", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("release %s: %d, want %d", id, resp.StatusCode, want)
		}
	}
	var end decide.End
	s.nextLine(t, &end)
	if end.Released != "release" {
		t.Errorf("end line %+v, want released: release", end)
	}
	if lines := e.sink.Wait(t, 1, waitLimit); lines[0]["decision"] != "admitted" {
		t.Errorf("log line %v", lines[0])
	}
	if s2 := e.post(t, t.Context(), call("2"), token); s2.d.Decision != "admitted" {
		t.Errorf("after release: %+v, want admitted", s2.d)
	}
}

// waitSignal tells a test when a call starts waiting.
type waitSignal struct{ started chan struct{} }

func (w waitSignal) Admitted(*capgate.Admission)                 {}
func (w waitSignal) Released(*capgate.Admission)                 {}
func (w waitSignal) StoreError(string, error)                    {}
func (w waitSignal) StoreSkipped(string)                         {}
func (w waitSignal) WaitStarted(*capgate.Admission)              { w.started <- struct{}{} }
func (w waitSignal) WaitEnded(*capgate.Admission, time.Duration) {}

// TestFairWait: with waiting on, a call over its limit waits inside the
// request (no line yet) and is admitted when the slot frees; a waiting
// client that disconnects leaves the queue.
func TestFairWait(t *testing.T) {
	e := newEnv(t, "", func(c *settings.Config) { c.Wait.MaxSeconds = 60 })
	sig := waitSignal{started: make(chan struct{}, 2)}
	e.gate.Observer = sig
	first := e.post(t, t.Context(), call("1"), "")
	if first.d.Decision != "admitted" {
		t.Fatalf("first: %+v", first.d)
	}
	// A waiter that leaves.
	ctx, cancel := context.WithCancel(t.Context())
	gone := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "POST", e.url+"/v1/calls", strings.NewReader(call("2")))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			// The headers come at once (the call may wait); the line never.
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		gone <- err
	}()
	awaitSignal(t, sig.started)
	cancel()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("the leaving waiter got %v, want its own cancellation", err)
	}
	e.sink.Wait(t, 1, waitLimit) // its line: it left the queue

	type result struct {
		d   decide.Decision
		err error
	}
	waited := make(chan result, 1)
	hdr := make(chan string, 1)
	go func() {
		req, _ := http.NewRequestWithContext(t.Context(), "POST", e.url+"/v1/calls", strings.NewReader(call("3")))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			waited <- result{err: err}
			return
		}
		defer resp.Body.Close()
		hdr <- resp.Header.Get(decide.HeaderWaitSeconds)
		var d decide.Decision
		err = json.NewDecoder(resp.Body).Decode(&d)
		waited <- result{d, err}
	}()
	awaitSignal(t, sig.started)
	// The headers come ahead of the decision, while the call waits.
	htimer := time.NewTimer(waitLimit)
	defer htimer.Stop()
	select {
	case h := <-hdr:
		if h != "60" {
			t.Errorf("a call that may wait got %s %q before its line, want 60", decide.HeaderWaitSeconds, h)
		}
	case <-htimer.C:
		t.Fatal("no headers while the call waited")
	}
	first.close()
	timer := time.NewTimer(waitLimit)
	defer timer.Stop()
	select {
	case r := <-waited:
		if r.err != nil || r.d.Decision != "admitted" || r.d.Headers["X-Ocl-Capacity-Waited-Ms"] == "" {
			t.Errorf("waiting call: %+v (%v), want admitted with the time waited", r.d, r.err)
		}
	case <-timer.C:
		t.Fatal("the waiting call was never admitted")
	}
}

func awaitSignal(t *testing.T, c <-chan struct{}) {
	t.Helper()
	timer := time.NewTimer(waitLimit)
	defer timer.Stop()
	select {
	case <-c:
	case <-timer.C:
		t.Fatal("no call started waiting")
	}
}

// TestModeOffAndTasks: mode off answers "off" and holds nothing; a call
// naming another task takes that task's lane.
func TestModeOffAndTasks(t *testing.T) {
	e := newEnv(t, "", nil)
	s := e.post(t, t.Context(), `{"user":"u","tier":"staff","endpoint":"$rerank","rows":3,"task":"host-b"}`, "")
	if s.d.Decision != "admitted" || !s.d.Held {
		t.Fatalf("%+v: want admitted and held", s.d)
	}
	counts := make([]int, 2)
	keys := []string{"ocl:capacity:api_heavy_task:host-b", "ocl:capacity:api_heavy_task:host-a"}
	if err := e.store.Count(t.Context(), keys, counts); err != nil || counts[0] != 1 || counts[1] != 0 {
		t.Errorf("counts %v (%v) of %v: want the call in host-b's task lane only", counts, err, keys)
	}
	s.close()
	e.sink.Wait(t, 1, waitLimit)
	e.cfg.Edit(func(c *settings.Config) { c.Mode = settings.ModeOff })
	if s := e.post(t, t.Context(), call("2"), ""); s.d.Decision != "off" || s.d.Held {
		t.Errorf("mode off: %+v, want off and not held", s.d)
	}
}

func TestListenNeedsATokenOnTCP(t *testing.T) {
	for _, tt := range []struct {
		addr, token string
		noToken     bool
		ok          bool
	}{
		{"127.0.0.1:0", "", false, false},
		{"127.0.0.1:0", "", true, true},
		{"[::1]:0", "", true, true},
		{"0.0.0.0:0", "", true, false},
		{":0", "", true, false},
		{"0.0.0.0:0", "t", false, true},
		{decide.UnixPrefix + t.TempDir() + "/d.sock", "", false, true},
	} {
		ln, err := decide.Listen(tt.addr, tt.token, tt.noToken, decide.SocketOptions{})
		if (err == nil) != tt.ok {
			t.Errorf("Listen(%q, token %q, no-token %v): %v, want ok %v", tt.addr, tt.token, tt.noToken, err, tt.ok)
		}
		if err != nil && !tt.ok && !errors.Is(err, decide.ErrNoToken) {
			var op *net.OpError
			if !errors.As(err, &op) { // [::1] may be missing on a host
				t.Errorf("%q: %v, want ErrNoToken", tt.addr, err)
			}
		}
		if ln != nil {
			ln.Close()
		}
	}
}

// TestMaxHold ends a call held past max_hold_seconds: its place is given
// back and the stream says why.
func TestMaxHold(t *testing.T) {
	e := newEnv(t, "", func(c *settings.Config) { c.MaxHoldSeconds, c.LeaseSeconds, c.RenewSeconds = 1, 1, 1 })
	s := e.post(t, t.Context(), call("1"), "")
	if !s.d.Held || s.d.MaxHoldSeconds != 1 {
		t.Fatalf("%+v: want held for at most 1 s", s.d)
	}
	var end decide.End
	s.nextLine(t, &end) // after max_hold_seconds
	if end.Released != "max_hold" {
		t.Errorf("end line %+v, want released: max_hold", end)
	}
	if s2 := e.post(t, t.Context(), call("2"), ""); s2.d.Decision != "admitted" {
		t.Errorf("after max hold: %+v, want admitted", s2.d)
	}
}

// TestWaitComesFromTheGate: whether a call may wait, and for how long, is
// the gate's reading of the config in force: under enforce_for aware an
// unaware call over its limit is never told it may wait (it goes ahead at
// once, shadow-refused), while an aware one queues and is told the bound.
func TestWaitComesFromTheGate(t *testing.T) {
	e := newEnv(t, "", func(c *settings.Config) { c.EnforceFor, c.Wait.MaxSeconds = settings.EnforceAware, 30 })
	sig := waitSignal{started: make(chan struct{}, 2)}
	e.gate.Observer = sig
	first := e.post(t, t.Context(), call("1"), "")
	if first.d.Decision != "admitted" || first.resp.Header.Get(decide.HeaderWaitSeconds) != "" {
		t.Fatalf("first: %+v, %s %q; want admitted, no wait header (it did not queue)", first.d,
			decide.HeaderWaitSeconds, first.resp.Header.Get(decide.HeaderWaitSeconds))
	}
	unaware := e.post(t, t.Context(), call("2"), "")
	if unaware.d.Decision != "shadow-refused" || unaware.resp.Header.Get(decide.HeaderWaitSeconds) != "" {
		t.Errorf("an unaware call over its limit: %+v, %s %q; want shadow-refused at once, no wait header",
			unaware.d, decide.HeaderWaitSeconds, unaware.resp.Header.Get(decide.HeaderWaitSeconds))
	}
	unaware.close()
	aware := strings.Replace(call("3"), `"rows":1`, `"rows":1,"aware":true`, 1)
	got := make(chan *http.Response, 1)
	go func() {
		req, _ := http.NewRequestWithContext(t.Context(), "POST", e.url+"/v1/calls", strings.NewReader(aware))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			got <- nil
			return
		}
		got <- resp
	}()
	awaitSignal(t, sig.started)
	timer := time.NewTimer(waitLimit)
	defer timer.Stop()
	select {
	case resp := <-got:
		if resp == nil {
			t.Fatal("the aware call failed")
		}
		defer resp.Body.Close()
		if h := resp.Header.Get(decide.HeaderWaitSeconds); h != "30" {
			t.Errorf("an aware call that queued: %s %q, want 30", decide.HeaderWaitSeconds, h)
		}
	case <-timer.C:
		t.Fatal("no head for the queued call")
	}
}

// TestMaxWaiting: past MaxWaiting calls waiting for one task, a call that
// would wait is refused at once, with Retry-After.
func TestMaxWaiting(t *testing.T) {
	e := newEnv(t, "", func(c *settings.Config) { c.Wait.MaxSeconds = 30 })
	e.srv.MaxWaiting = 1
	sig := waitSignal{started: make(chan struct{}, 2)}
	e.gate.Observer = sig
	if first := e.post(t, t.Context(), call("1"), ""); first.d.Decision != "admitted" {
		t.Fatalf("first: %+v", first.d)
	}
	go func() {
		req, _ := http.NewRequestWithContext(t.Context(), "POST", e.url+"/v1/calls", strings.NewReader(call("2")))
		req.Header.Set("Content-Type", "application/json")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	awaitSignal(t, sig.started) // the second waits
	third := e.post(t, t.Context(), call("3"), "")
	if third.d.Decision != "refused" || third.d.Headers["Retry-After"] == "" || third.resp.Header.Get(decide.HeaderWaitSeconds) != "" {
		t.Errorf("a call past MaxWaiting: %+v (wait header %q), want refused at once with Retry-After",
			third.d, third.resp.Header.Get(decide.HeaderWaitSeconds))
	}
}

// TestRunningIsCountedAgain: a call sent with "running": true is taken
// forced even over its limit, held, and its line says resumed.
func TestRunningIsCountedAgain(t *testing.T) {
	e := newEnv(t, "", func(c *settings.Config) { c.Wait.MaxSeconds = 30 })
	first := e.post(t, t.Context(), call("1"), "")
	if first.d.Decision != "admitted" {
		t.Fatalf("first: %+v", first.d)
	}
	running := e.post(t, t.Context(), strings.Replace(call("2"), `"rows":1`, `"rows":1,"running":true`, 1), "")
	if running.d.Decision != "admitted" || !running.d.Held || running.resp.Header.Get(decide.HeaderWaitSeconds) != "" {
		t.Fatalf("a running call over its limit: %+v, want admitted and held at once", running.d)
	}
	counts := make([]int, 1)
	if err := e.store.Count(t.Context(), []string{"ocl:capacity:user:cora"}, counts); err != nil || counts[0] != 2 {
		t.Errorf("user lane count %v (%v), want 2: the running call counted again", counts, err)
	}
	running.close()
	lines := e.sink.Wait(t, 1, waitLimit)
	if lines[0]["resumed"] != true || lines[0]["decision"] != "shadow-refused" {
		t.Errorf("its line %v: want resumed, the gate's decision shadow-refused", lines[0])
	}
}

// panicConfig is a config source that panics: the gate's guard reads it
// as shadow with the defaults.
type panicConfig struct{}

func (panicConfig) Config(context.Context) settings.Config { panic("config store exploded") }

// TestAPanickingConfigIsTheGates: a config source that panics is read
// through the gate's guard, as the gateway reads it: the call gets its
// line (it runs, counted as unavailable), no wait header, and the service
// keeps serving. (Before, the handler read the source itself and its
// panic cut the connection.)
func TestAPanickingConfigIsTheGates(t *testing.T) {
	gate, err := capgate.NewGate(memory.New(nil), panicConfig{}, &mock.Sink{}, "host-a")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gate.Close(context.Background()) })
	srv := decide.NewServer(gate)
	hs := httptest.NewUnstartedServer(srv)
	hs.Config = decide.NewHTTPServer(srv, gate.Logger)
	hs.Config.ErrorLog = nil
	hs.Start()
	t.Cleanup(func() {
		srv.Shutdown()
		hs.Close()
		srv.Wait(context.Background())
	})
	e := &env{url: hs.URL}
	for i := range 2 {
		s := e.post(t, t.Context(), call(strconv.Itoa(i)), "")
		if s.resp.StatusCode != 200 || s.d.Decision != "unavailable" || s.resp.Header.Get(decide.HeaderWaitSeconds) != "" {
			t.Errorf("call %d: status %d, %+v; want its line, unavailable, no wait header", i, s.resp.StatusCode, s.d)
		}
		s.close()
	}
}

// setNumbers sets lane numbers of c by config key (the OCL policy's).
func setNumbers(tb testing.TB, c *settings.Config, numbers map[string]int) {
	tb.Helper()
	for k, n := range numbers {
		if err := c.SetNumber(k, n); err != nil {
			tb.Fatal(err)
		}
	}
}

// TestReleaseWithUsage: the app reports what its call used on the release
// ({"usage": N}), and the call's line carries it; a release whose usage is
// not a whole number from 0 up is refused with 400 and ends nothing.
func TestReleaseWithUsage(t *testing.T) {
	e := newEnv(t, "", nil)
	s := e.post(t, t.Context(), call("1"), "")
	if !s.d.Held {
		t.Fatalf("%+v: want held", s.d)
	}
	release := func(body string) int {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), "POST", e.url+"/v1/calls/"+s.d.ID+"/release", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, bad := range []string{`{"usage":-1}`, `{"usage":2.5}`, `{"usage":"7"}`, `{"usage":1e3}`, `{"usage":99999999999999999999}`,
		`{"tokens":7}`, `{"usage":7}{}`, `not json`, `{"usage":7}` + strings.Repeat(" ", 2<<10)} {
		if code := release(bad); code != http.StatusBadRequest {
			t.Errorf("release %.40q: %d, want 400", bad, code)
		}
	}
	if code := release(`{"usage":2048}`); code != http.StatusNoContent {
		t.Fatalf("release with usage: %d, want 204", code)
	}
	var end decide.End
	s.nextLine(t, &end)
	if end.Released != "release" {
		t.Errorf("end line %+v, want released: release", end)
	}
	if line := e.sink.Wait(t, 1, waitLimit)[0]; line["usage"] != json.Number("2048") {
		t.Errorf("log line %v, want usage 2048", line)
	}
	// A release without a body (or with {}) reports none.
	s2 := e.post(t, t.Context(), call("2"), "")
	for _, body := range []string{`{}`} {
		req, _ := http.NewRequestWithContext(t.Context(), "POST", e.url+"/v1/calls/"+s2.d.ID+"/release", strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Errorf("release %s: %d, want 204", body, resp.StatusCode)
		}
	}
	if line := e.sink.Wait(t, 2, waitLimit)[1]; line["usage"] != nil {
		t.Errorf("log line %v, want no usage", line)
	}
}
