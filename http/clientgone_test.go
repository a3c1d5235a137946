package http_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	capgatehttp "github.com/capgate/capgate/http"
	"github.com/capgate/capgate/mock"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
)

// clientGonePolicy has a route whose API stops when its client goes
// (cancel) and one whose API runs the call to its end (hold, the default).
const clientGonePolicy = `version: 1
name: gone
routes:
  - name: chat
    method: POST
    path: {exact: /v1/chat/completions}
    on_client_gone: cancel
  - name: batch
    method: POST
    path: {exact: /v1/batch}
identity: {resolver: tokens, scheme: Token, default_tier: all}
lanes:
  - {name: cluster, scope: cluster, routes: [chat, batch], limit: 4}
names:
  header_prefix: Capgate-
  refusal: {detail: "busy", error_code: busy}
  log_event: capgate_call
`

// streamer is an upstream that streams server-sent events, one every
// 10 ms, up to 500; it records whether a stream ran to its end and closes
// gone when a request's connection closed before that.
type streamer struct {
	*httptest.Server
	finished atomic.Int32
	gone     chan struct{}
}

func newStreamer(t *testing.T) *streamer {
	s := &streamer{gone: make(chan struct{}, 8)}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for i := range 500 {
			if _, err := w.Write([]byte("data: {\"n\":" + strings.Repeat("1", 1+i%3) + "}\n\n")); err != nil {
				break
			}
			_ = rc.Flush()
			select {
			case <-r.Context().Done():
				s.gone <- struct{}{}
				return
			case <-tick.C:
			}
		}
		s.finished.Add(1)
	}))
	t.Cleanup(s.Close)
	return s
}

// abortAfter sends a streamed call to path, reads n events and hangs up.
func abortAfter(t *testing.T, e *env, path string, n int) {
	t.Helper()
	req := newRequest(t, t.Context(), "POST", e.front.URL+path, `{}`, "Authorization", "Token t-cora")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	for range n {
		readEvent(t, br)
	}
	resp.Body.Close() // before the end: the client's connection closes
}

// on_client_gone: cancel cuts the upstream request as soon as the client
// aborts a stream: the upstream sees its connection close, the place is
// freed, the line says "client gone" and the access log 499. A hold route
// keeps the call running to its end, holding its place.
func TestClientGoneCancel(t *testing.T) {
	p, err := policy.Parse("gone.yaml", []byte(clientGonePolicy))
	if err != nil {
		t.Fatal(err)
	}
	up := newStreamer(t)
	access := &mock.Sink{}
	e := newPolicyEnv(t, p, func(c *settings.Config) { c.Mode = settings.ModeEnforce }, func(c *capgatehttp.GatewayConfig) {
		c.Upstream, _ = url.Parse(up.URL)
		c.AccessLog = access
	})

	abortAfter(t, e, "/v1/chat/completions", 3)
	select {
	case <-up.gone:
	case <-time.After(waitLimit):
		t.Fatal("the upstream did not see its connection close after the client aborted")
	}
	line := e.sink.Wait(t, 1, waitLimit)[0]
	if line["error"] != "client gone" || line["decision"] != "admitted" {
		t.Errorf("line %v; want admitted, error client gone", line)
	}
	if m := e.inFlight(); len(m) != 0 {
		t.Errorf("leases after the aborted stream's line: %v; want none", m)
	}
	if a := access.Wait(t, 1, waitLimit)[0]; a["status"] != json.Number("499") {
		t.Errorf("access line %v; want status 499", a)
	}

	// hold: the upstream runs the stream to its end, the place held.
	abortAfter(t, e, "/v1/batch", 3)
	lines := e.sink.Wait(t, 2, 20*time.Second)
	if up.finished.Load() != 1 || lines[1]["error"] != nil {
		t.Errorf("hold: %d streams finished, line %v; want the stream run to its end, no error", up.finished.Load(), lines[1])
	}
	select {
	case <-up.gone:
		t.Error("hold: the upstream's stream was cut")
	default:
	}
}
