package main

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// keyedChat sends pia's chat on model to the gateway at addr with
// Idempotency-Key key, and returns its status and Capgate-Decision.
func keyedChat(t *testing.T, addr, key, model string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, addr+"/v1/chat/completions",
		strings.NewReader(`{"model":"`+model+`","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tokPia)
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get("Capgate-Decision")
}

// Why: every policy without names.key_prefix kept its keys under
// "capgate", so two APIs whose gateways share one Redis shared their
// lanes (one API's calls filled the other's user lanes) and their kept
// answers (a key sent to one API was answered with the other's answer).
// The default prefix now names the policy; OCL's keys are unchanged.
func TestTwoPoliciesSharingOneRedisShareNothing(t *testing.T) {
	clearLaneEnv(t)
	m := miniredis.RunT(t)
	dir := t.TempDir()
	tokens := writeInferenceTokens(t, dir)
	text := readInferencePolicy(t)
	polA, polB := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	writeFile(t, polA, text)
	writeFile(t, polB, edit(t, text, "\nname: inference\n", "\nname: other\n"))

	api := newInferenceAPI()
	start := func(pol, task string) (*inferenceRig, string) {
		srv, addr, _ := startServer(t, api, "--policy", pol, "--identity", "tokens", "--tokens", tokens,
			"--redis", "redis://"+m.Addr()+"/0", "--config-cache", "0", "--task-id", task)
		mustRun(t, "capacity", "set", "--database", srv.Options().Database, "--policy", pol,
			"mode=enforce", "enforce_for=all", "wait.max_seconds=0", "idempotency.mode=key")
		return &inferenceRig{t: t, api: api, addr: addr}, srv.Options().Database
	}
	a, _ := start(polA, "task-a")
	b, _ := start(polB, "task-b")

	// Lanes: fay (free, one call at a time) holds a call on each API.
	a.hold("/v1/chat/completions", tokFree, "large")
	a.refused("/v1/chat/completions", tokFree, "small", "user")
	b.hold("/v1/chat/completions", tokFree, "large") // her lane on the other API is her own
	a.held, b.held = append(a.held, b.held...), nil  // one API: let both go
	a.release()
	for _, k := range m.Keys() {
		if !strings.HasPrefix(k, "capgate:inference:") && !strings.HasPrefix(k, "capgate:other:") && !strings.HasPrefix(k, "capgate:journal:") {
			t.Errorf("key %q is under neither policy's prefix", k)
		}
	}

	// Kept answers: pia's keyed call on A is kept; the same key and
	// request on B runs at B's API rather than getting A's answer.
	go func() { api.Hold <- struct{}{} }()
	if code, d := keyedChat(t, a.addr, "k-1", "small"); code != http.StatusOK || d != "admitted" {
		t.Fatalf("keyed call on A: %d %q; want 200 admitted", code, d)
	}
	<-api.Started
	calls := api.Stats().Calls
	if code, d := keyedChat(t, a.addr, "k-1", "small"); code != http.StatusOK || api.Stats().Calls != calls {
		t.Fatalf("its repeat on A: %d %q, the API ran %d more; want the kept answer, not run", code, d, api.Stats().Calls-calls)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-api.Started:
			api.Hold <- struct{}{}
		case <-time.After(10 * time.Second):
		}
	}()
	if code, d := keyedChat(t, b.addr, "k-1", "small"); code != http.StatusOK || d != "admitted" || api.Stats().Calls != calls+1 {
		t.Errorf("the same key on B: %d %q, the API ran %d more; want B's own call, run", code, d, api.Stats().Calls-calls)
	}
	<-done
}
