package http_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/answer"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
)

// waitSignal tells a test when a call starts waiting.
type waitSignal struct{ started chan struct{} }

func (w waitSignal) Admitted(*capgate.Admission)                 {}
func (w waitSignal) Released(*capgate.Admission)                 {}
func (w waitSignal) StoreError(string, error)                    {}
func (w waitSignal) StoreSkipped(string)                         {}
func (w waitSignal) WaitStarted(*capgate.Admission)              { w.started <- struct{}{} }
func (w waitSignal) WaitEnded(*capgate.Admission, time.Duration) {}

// TestWaitingCallIsServedWhenTheSlotFrees: through real HTTP, a call that
// finds its lane full waits at the gateway and goes to the API the moment
// the call ahead of it ends, with the time it waited in a header.
func TestWaitingCallIsServedWhenTheSlotFrees(t *testing.T) {
	e := newEnv(t, func(c *settings.Config) {
		c.Mode, c.EnforceFor = settings.ModeEnforce, settings.EnforceAll
		c.Wait.MaxSeconds = 60
	}, nil)
	sig := waitSignal{started: make(chan struct{}, 1)}
	e.gate.Observer = sig
	ctx := t.Context()
	first := e.async(ctx, "POST", semanticMatch, twoRows, "Authorization", "Token t-pam", "X-Test-Do", "hold")
	e.up.waitEntered(t)
	second := e.async(ctx, "POST", semanticMatch, twoRows, "Authorization", "Token t-pam", "Origin", "https://mapper.example")
	timer := time.NewTimer(waitLimit)
	defer timer.Stop()
	select {
	case <-sig.started:
	case <-timer.C:
		t.Fatal("the second call never started waiting")
	}
	if n := len(e.up.requests()); n != 1 {
		t.Fatalf("the upstream saw %d calls while the second waited, want 1", n)
	}
	e.up.release()
	if r := recv(t, first); r.StatusCode != 200 {
		t.Fatalf("first call: status %d", r.StatusCode)
	}
	r := recv(t, second)
	if r.StatusCode != 200 || r.Header.Get(ocl.Decision) != "admitted" {
		t.Fatalf("waiting call: status %d, decision %q; want 200 admitted", r.StatusCode, r.Header.Get(ocl.Decision))
	}
	if ms, err := strconv.Atoi(r.Header.Get(ocl.Waited)); err != nil || ms < 0 {
		t.Errorf("%s = %q, want whole milliseconds", ocl.Waited, r.Header.Get(ocl.Waited))
	}
	if r.Header.Get("Retry-After") != "" {
		t.Error("an admitted call carries Retry-After")
	}
	lines := e.sink.Wait(t, 2, waitLimit)
	waited := 0
	for _, l := range lines {
		if _, ok := l["wait_ms"]; ok {
			waited++
		}
	}
	if waited != 1 {
		t.Errorf("%d log lines carry wait_ms, want 1", waited)
	}
	if n := len(e.up.requests()); n != 2 {
		t.Errorf("the upstream saw %d calls, want 2", n)
	}
	if m := e.inFlight(); len(m) != 0 {
		t.Errorf("leases left: %v", m)
	}
}

func TestWaitedHeaderIsExposed(t *testing.T) {
	found := false
	for _, h := range answer.ExposedHeaders(policy.OCL()) {
		found = found || strings.EqualFold(h, ocl.Waited)
	}
	if !found {
		t.Errorf("ExposedHeaders() = %v lacks %s", answer.ExposedHeaders(policy.OCL()), ocl.Waited)
	}
}

// endSignal tells a test when a wait ends.
type endSignal struct {
	waitSignal
	ended chan struct{}
}

func (w endSignal) WaitEnded(*capgate.Admission, time.Duration) { w.ended <- struct{}{} }

// TestWaitingClientHangsUp: a client that hangs up while its call waits
// leaves the waitlist at once, and its call never reaches the API.
func TestWaitingClientHangsUp(t *testing.T) {
	e := newEnv(t, func(c *settings.Config) {
		c.Mode, c.EnforceFor = settings.ModeEnforce, settings.EnforceAll
		c.Wait.MaxSeconds = 60
	}, nil)
	sig := endSignal{waitSignal{started: make(chan struct{}, 1)}, make(chan struct{}, 1)}
	e.gate.Observer = sig
	first := e.async(t.Context(), "POST", semanticMatch, twoRows, "Authorization", "Token t-pam", "X-Test-Do", "hold")
	e.up.waitEntered(t)
	ctx, cancel := context.WithCancel(t.Context())
	second := e.async(ctx, "POST", semanticMatch, twoRows, "Authorization", "Token t-pam")
	timer := time.NewTimer(waitLimit)
	defer timer.Stop()
	select {
	case <-sig.started:
	case <-timer.C:
		t.Fatal("the second call never started waiting")
	}
	cancel()
	select {
	case <-sig.ended:
	case <-timer.C:
		t.Fatal("the wait did not end when the client hung up")
	}
	if r := recv(t, second); r.Err == nil {
		t.Errorf("the hung-up call got status %d", r.StatusCode)
	}
	counts := make([]int, 1)
	if err := e.store.Waiting(t.Context(), "ocl:capacity", []string{"ocl:capacity:api_heavy"}, counts); err != nil || counts[0] != 0 {
		t.Errorf("waiting after the hang-up = %v, %v; want 0", counts, err)
	}
	e.up.release()
	recv(t, first)
	if n := len(e.up.requests()); n != 1 {
		t.Errorf("the upstream saw %d calls, want 1", n)
	}
	gone := 0
	for _, l := range e.sink.Wait(t, 2, waitLimit) { // written at release
		if strings.Contains(jsonText(l["error"]), "caller gone while waiting") {
			gone++
		}
	}
	if gone != 1 {
		t.Errorf("%d log lines say the caller left while waiting, want 1", gone)
	}
	if m := e.inFlight(); len(m) != 0 {
		t.Errorf("leases left: %v", m)
	}
}
