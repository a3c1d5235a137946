package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capgate/capgate/tools/simapi"
)

// inferencePolicy is the example policy of an inference API, from the
// package's directory.
var inferencePolicy = filepath.Join("..", "..", "examples", "inference", "policy.yaml")

// The callers of the inference tests' tokens file: a free user and two pro
// users (auth group "pro").
const (
	tokFree = "t-fay" // fay, free
	tokPia  = "t-pia" // pia, pro
	tokPat  = "t-pat" // pat, pro
)

// writeInferenceTokens writes the tokens file of fay (free), pia and pat
// (pro) in dir and returns its path.
func writeInferenceTokens(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "tokens.json")
	body := `[{"token":"t-fay","username":"fay","is_staff":false,"auth_groups":[]},
{"token":"t-pia","username":"pia","is_staff":false,"auth_groups":["pro"]},
{"token":"t-pat","username":"pat","is_staff":false,"auth_groups":["pro"]},
{"token":"t-sam","username":"sam","is_staff":true,"auth_groups":[]}]`
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// syncBuffer is a bytes.Buffer safe for concurrent use: a command's
// stderr that the test reads while it runs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// answer is a call's response, its body read.
type answer struct {
	code   int
	header http.Header
	body   string
}

// callAPI sends method path (a JSON body with model, for a POST) to the
// gateway at addr as the holder of token (none: no Authorization), and
// returns the answer.
func callAPI(t *testing.T, addr, method, path, token, model string) answer {
	t.Helper()
	a, err := doCall(addr, method, path, token, model)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func doCall(addr, method, path, token, model string) (answer, error) {
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader(fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}]}`, model))
	}
	req, err := http.NewRequest(method, addr+path, body)
	if err != nil {
		return answer{}, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(b)}, err
}

// capacityHeaders returns the names of the header's fields a gate adds
// under the inference policy: Capgate-*, RateLimit*, Retry-After.
func capacityHeaders(h http.Header) []string {
	var out []string
	for k := range h {
		if strings.HasPrefix(k, "Capgate-") || strings.HasPrefix(k, "Ratelimit") || k == "Retry-After" {
			out = append(out, k)
		}
	}
	return out
}

// inferenceRig is the inference API (simapi.Inference, its calls held
// until the test lets them go) behind a gateway under a policy.
type inferenceRig struct {
	t    *testing.T
	api  *simapi.Inference
	addr string // the gateway, http://host:port
	held []<-chan answer
}

// newInferenceAPI returns the fake inference API, its calls held (Hold),
// and reporting each start (Started).
func newInferenceAPI() *simapi.Inference {
	return &simapi.Inference{Hold: make(chan struct{}), Started: make(chan string, 64)}
}

// hold sends a heavy call that the gateway admits and the API holds: it
// returns once the call runs at the API, and fails the test if the gateway
// answers it first.
func (r *inferenceRig) hold(path, token, model string) {
	r.t.Helper()
	done := make(chan answer, 1)
	go func() {
		a, err := doCall(r.addr, http.MethodPost, path, token, model)
		if err != nil {
			a = answer{code: -1, body: err.Error()}
		}
		done <- a
	}()
	select {
	case <-r.api.Started:
	case a := <-done:
		r.t.Fatalf("%s %s of %s: answered %d %q %v; want it held at the API", path, model, token, a.code, a.body, a.header)
	case <-time.After(10 * time.Second):
		r.t.Fatalf("%s %s of %s: not at the API within 10 s", path, model, token)
	}
	r.held = append(r.held, done)
}

// refused sends a heavy call and checks that the gateway refuses it with
// the policy's 429 (body, headers, Retry-After) naming scope, and returns
// the answer.
func (r *inferenceRig) refused(path, token, model, scope string) answer {
	r.t.Helper()
	a := callAPI(r.t, r.addr, http.MethodPost, path, token, model)
	if a.code != http.StatusTooManyRequests {
		r.t.Fatalf("%s %s of %s: %d %q; want 429 (%s full)", path, model, token, a.code, a.body, scope)
	}
	ra, err := strconv.Atoi(a.header.Get("Retry-After"))
	if err != nil || ra < 1 {
		r.t.Errorf("%s %s of %s: Retry-After %q; want whole seconds", path, model, token, a.header.Get("Retry-After"))
	}
	// OpenAI's error shape; the scope in the RateLimit field, the retry
	// in milliseconds too.
	want := fmt.Sprintf(`{"error": {"message": "The API is busy. Please retry in %d seconds.", "type": "requests", "param": null, "code": "capacity_exceeded"}}`, ra)
	if a.body != want {
		r.t.Errorf("%s %s of %s: 429 body\n %s\nwant\n %s", path, model, token, a.body, want)
	}
	if rl := a.header.Get("Ratelimit"); !strings.HasPrefix(rl, strconv.Quote(scope)+";r=0;t=") ||
		a.header.Get("Retry-After-Ms") != strconv.Itoa(ra*1000) || a.header.Get("X-Should-Retry") != "true" {
		r.t.Errorf("%s %s of %s: RateLimit %q, Retry-After-Ms %q, X-Should-Retry %q; want scope %s, %d, true", path, model, token,
			rl, a.header.Get("Retry-After-Ms"), a.header.Get("X-Should-Retry"), scope, ra*1000)
	}
	if a.header.Get("Capgate-Decision") != "refused" || a.header.Get("Capgate-Limit") == "" ||
		a.header.Get("Capgate-In-Flight") == "" || a.header.Get("Ratelimit-Policy") == "" {
		r.t.Errorf("%s %s of %s: refusal headers %v; want Capgate-Decision refused, Capgate-Limit, Capgate-In-Flight, RateLimit-Policy", path, model, token, a.header)
	}
	return a
}

// release lets every held call finish and returns their answers, each
// checked to be the API's 200 with the gateway's admitted headers.
func (r *inferenceRig) release() []answer {
	r.t.Helper()
	for range r.held {
		select {
		case r.api.Hold <- struct{}{}:
		case <-time.After(10 * time.Second):
			r.t.Fatal("a held call did not take its release within 10 s")
		}
	}
	var out []answer
	for _, done := range r.held {
		a := <-done
		if a.code != http.StatusOK || a.header.Get("Capgate-Decision") != "admitted" || a.header.Get("Capgate-Limit") == "" {
			r.t.Errorf("a held call: %d %q %v; want the API's 200, admitted", a.code, a.body, a.header)
		}
		out = append(out, a)
	}
	r.held = nil
	until(r.t, 10*time.Second, "the API idle", func() bool { return r.api.Stats().InFlight == 0 })
	return out
}

// logLines returns the per-call log lines of the file at path, decoded.
func logLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

// TestInferenceExampleEndToEnd runs capgate serve, as the docs do, with
// the inference example's policy (--policy examples/inference/policy.yaml,
// --identity tokens) in front of the fake inference API, in enforce mode
// for every caller, with the server-side wait off (wait.max_seconds=0: a
// call to a full lane gets its 429 at once, so which calls run is decided
// by the test alone), reading the config on every call (--config-cache 0:
// a change staff make applies to the next call). The API holds each call
// until the test lets it go, so the calls in flight are exactly the ones
// the test sent. Each chat or completions call names no max_tokens: it
// takes 2 seats of its model (1024 tokens), an embeddings call of one text
// 1. The API's own peaks show each limit held: the large model's 4 seats
// (its key limit), per user free 1 and pro 3, the cluster 8.
func TestInferenceExampleEndToEnd(t *testing.T) {
	clearLaneEnv(t)
	dir := t.TempDir()
	db := "sqlite:" + filepath.Join(dir, "c.db")
	logFile := filepath.Join(dir, "lines.log")
	tokens := writeInferenceTokens(t, dir)

	// The config staff would set: enforce for every caller, no wait. The
	// capacity CLI reads the policy's config keys only with --policy.
	if code, _, errOut := run(t, "capacity", "set", "--create", "--database", db, "lanes.model=1"); code == 0 || !strings.Contains(errOut, `"lanes"`) {
		t.Errorf("capacity set lanes.model=1 without --policy: exit %d %q; want the built-in policy's refusal of an unknown setting", code, errOut)
	}
	mustRun(t, "capacity", "set", "--create", "--database", db, "--policy", inferencePolicy,
		"mode=enforce", "enforce_for=all", "wait.max_seconds=0", "--note", "enforce, no wait")

	api := newInferenceAPI()
	up := httptest.NewServer(api)
	t.Cleanup(up.Close)
	ready := make(chan string, 1)
	stderr := &syncBuffer{}
	cmd := &ServeCommand{Stdout: io.Discard, Stderr: stderr, Ready: ready, Getenv: func(string) string { return "" }}
	args := []string{"--listen", "127.0.0.1:0", "--upstream", up.URL, "--database", db, "--task-id", "task-a",
		"--log-file", logFile, "--config-cache", "0", "--drain-delay", "0",
		"--policy", inferencePolicy, "--identity", "tokens", "--tokens", tokens}
	addr, stop := startCommand(t, "serve", ready, func(ctx context.Context) error { return cmd.Run(ctx, args) })
	r := &inferenceRig{t: t, api: api, addr: "http://" + addr}
	const chat, completions, embeddings = "/v1/chat/completions", "/v1/completions", "/v1/embeddings"

	// GET /v1/models is no route of the policy: it passes untouched,
	// counted light at the API.
	m := callAPI(t, r.addr, http.MethodGet, "/v1/models", tokPia, "")
	if m.code != http.StatusOK || !strings.Contains(m.body, `"id":"large"`) || len(capacityHeaders(m.header)) > 0 {
		t.Errorf("GET /v1/models = %d %q, capacity headers %v; want the API's list, untouched", m.code, m.body, capacityHeaders(m.header))
	}
	if st := api.Stats(); st.Light != 1 || st.Calls != 0 {
		t.Errorf("after GET /v1/models the API saw %d light, %d heavy; want 1, 0", st.Light, st.Calls)
	}

	// Per user: fay (free) runs one call at a time.
	r.hold(chat, tokFree, "large")
	r.refused(chat, tokFree, "small", "user")
	// Per model: "large" (key_limits.model.large 4) runs two calls of 2
	// seats at a time, whoever sends them.
	r.hold(chat, tokPia, "large")
	r.refused(completions, tokPat, "large", "model")
	// Per user: pia (pro) runs three.
	r.hold(completions, tokPia, "small")
	r.hold(embeddings, tokPia, "medium")
	r.refused(chat, tokPia, "tiny", "user")
	// pat (pro) three too: 7 calls in flight.
	r.hold(chat, tokPat, "small")
	r.hold(chat, tokPat, "m3")
	r.hold(embeddings, tokPat, "m3")
	r.refused(chat, tokPat, "m4", "user")
	// A token the file lacks is one more caller, "(anonymous)", of the
	// default tier (free): the 8th call.
	r.hold(chat, "t-nobody", "m4")
	// Its lane and the cluster's are full now: a refusal names the first
	// full lane of the plan, the cluster.
	r.refused(chat, "t-nobody", "m5", "cluster")

	st := api.Stats()
	wantPeaks := func(what string, got, want map[string]int) {
		t.Helper()
		for k, n := range want {
			if got[k] != n {
				t.Errorf("%s peak of %s = %d; want %d (all: %v)", what, k, got[k], n, got)
			}
		}
		if len(got) != len(want) {
			t.Errorf("%s peaks %v; want %v", what, got, want)
		}
	}
	if st.InFlight != 8 || st.Peak != 8 || st.Calls != 8 {
		t.Errorf("API stats %+v; want 8 calls, 8 in flight at most", st)
	}
	wantPeaks("model", st.PeakPerModel, map[string]int{"large": 2, "small": 2, "medium": 1, "m3": 2, "m4": 1})
	wantPeaks("caller", st.PeakPerCaller, map[string]int{tokFree: 1, tokPia: 3, tokPat: 3, "t-nobody": 1})
	for _, a := range r.release() {
		if tier := a.header.Get("Capgate-Tier"); tier != "free" && tier != "pro" {
			t.Errorf("admitted call's Capgate-Tier %q; want free or pro", tier)
		}
		if a.header.Get("Capgate-Limit") != "8" {
			t.Errorf("admitted call's Capgate-Limit %q; want 8 (the cluster lane's)", a.header.Get("Capgate-Limit"))
		}
	}

	// The cluster lane alone: with pro users allowed 5 (a runtime change
	// through the CLI), pia's 5 and pat's 3 fill the cluster's 8, and fay,
	// with room of her own and on a model no one runs, is refused by it.
	mustRun(t, "capacity", "set", "--database", db, "--policy", inferencePolicy, "lanes.user.pro=5", "--note", "pro 5")
	for i, model := range []string{"a", "a", "b", "b", "c"} {
		r.hold([]string{chat, completions, embeddings}[i%3], tokPia, model)
	}
	for _, model := range []string{"c", "d", "d"} {
		r.hold(chat, tokPat, model)
	}
	cl := r.refused(chat, tokFree, "e", "cluster")
	if cl.header.Get("Capgate-Limit") != "8" || cl.header.Get("Capgate-In-Flight") != "8" || cl.header.Get("Capgate-Tier") != "free" {
		t.Errorf("the cluster's refusal: Capgate-Limit %q, Capgate-In-Flight %q, Capgate-Tier %q; want 8, 8, free",
			cl.header.Get("Capgate-Limit"), cl.header.Get("Capgate-In-Flight"), cl.header.Get("Capgate-Tier"))
	}
	if st := api.Stats(); st.Peak != 8 || st.InFlight != 8 || st.PeakPerCaller[tokPia] != 5 {
		t.Errorf("API stats %+v; want 8 at most, pia's peak 5", st)
	}
	r.release()

	// A runtime change of a model's own limit: the next calls see 1 (a
	// call's seats capped at it: one call at a time).
	mustRun(t, "capacity", "set", "--database", db, "--policy", inferencePolicy, "key_limits.model.large=1", "--note", "one on large")
	r.hold(chat, tokPia, "large")
	r.refused(chat, tokPat, "large", "model")
	r.release()
	code, hist, errOut := run(t, "capacity", "history", "--database", db, "--policy", inferencePolicy)
	if code != 0 {
		t.Fatalf("capacity history: exit %d %q", code, errOut)
	}
	var newest struct {
		Changes map[string][2]any `json:"changes"`
		Note    string            `json:"note"`
	}
	if err := json.NewDecoder(strings.NewReader(hist)).Decode(&newest); err != nil {
		t.Fatalf("capacity history %q: %v", hist, err)
	}
	if c := newest.Changes["key_limits.model.large"]; fmt.Sprint(c[0], c[1]) != "4 1" || newest.Note != "one on large" {
		t.Errorf("capacity history, newest = %+v; want key_limits.model.large 4→1", newest)
	}
	if !strings.Contains(hist, `"lanes.user.pro"`) {
		t.Errorf("capacity history %q lacks the lanes.user.pro change", hist)
	}
	// The status (staff) shows the model lane's configured values, none
	// in flight; a rollback puts large's limit back, as any limit.
	largeLimit := func() string {
		t.Helper()
		a := callAPI(t, r.addr, http.MethodGet, "/capacity/status/", "t-sam", "")
		var st struct {
			Model map[string]struct {
				InFlight int `json:"in_flight"`
				Limit    int `json:"limit"`
			} `json:"model"`
		}
		if err := json.Unmarshal([]byte(a.body), &st); a.code != http.StatusOK || err != nil {
			t.Fatalf("GET /capacity/status/ as staff: %d %s (%v)", a.code, a.body, err)
		}
		return fmt.Sprint(st.Model["large"])
	}
	if got := largeLimit(); got != "{0 1}" {
		t.Errorf("status of model large %s; want none in flight, limit 1", got)
	}
	mustRun(t, "capacity", "rollback", "--database", db, "--policy", inferencePolicy, "--to", "2", "--note", "large back")
	if got := largeLimit(); got != "{0 4}" {
		t.Errorf("status of model large after the rollback %s; want limit 4 again", got)
	}

	if err := stop(); err != nil {
		t.Fatalf("serve: %v", err)
	}
	// The per-call log lines are the policy's: its event, the route under
	// "route", the model field, each lane's count and limit under its keys.
	lines := logLines(t, logFile)
	var admitted, refusedModel, refusedCluster map[string]any
	for _, l := range lines {
		if l["event"] != "capgate_call" {
			t.Errorf("log line %v: event %v; want capgate_call", l, l["event"])
		}
		if l["user_id"] == "fay" && l["model"] == "e" {
			refusedCluster = l
		}
		if l["route"] == "chat" && l["model"] == "large" {
			switch l["decision"] {
			case "admitted":
				if l["user_id"] == "fay" {
					admitted = l
				}
			case "refused":
				refusedModel = l // the last: under key_limits.model.large=1
			}
		}
	}
	if len(lines) != 8+5+8+1+2 {
		t.Errorf("%d log lines; want one per heavy call, 24", len(lines))
	}
	if admitted == nil || refusedModel == nil {
		t.Fatalf("no admitted and refused chat on large among the log lines:\n%v", lines)
	}
	for _, k := range []string{"cluster_in_flight", "cluster_limit", "model_in_flight", "model_limit", "user_in_flight", "user_limit", "tier", "user_id"} {
		if _, ok := admitted[k]; !ok {
			t.Errorf("admitted line %v lacks %q", admitted, k)
		}
	}
	if admitted["user_id"] != "fay" || admitted["tier"] != "free" || admitted["cluster_limit"] != 8.0 ||
		admitted["model_limit"] != 4.0 || admitted["model_in_flight"] != 2.0 || admitted["max_tokens"] != 1024.0 ||
		fmt.Sprint(admitted["seats"]) != "map[model:2]" || admitted["user_limit"] != 1.0 || admitted["mode"] != "enforce" {
		t.Errorf("fay's chat on large: %v; want user fay, tier free, limits cluster 8, model 4 (its 2 seats in flight), user 1, mode enforce", admitted)
	}
	if refusedModel["user_id"] != "pat" || refusedModel["model_limit"] != 1.0 || refusedModel["model_in_flight"] != 1.0 ||
		refusedModel["user_limit"] != 5.0 || refusedModel["scope"] != "model" {
		t.Errorf("pat's refused chat on large after key_limits.model.large=1: %v; want model limit 1 (1 in flight), user limit 5, scope model", refusedModel)
	}
	if fmt.Sprint(refusedCluster["full"]) != "[cluster]" || refusedCluster["cluster_in_flight"] != 8.0 || refusedCluster["user_in_flight"] != 0.0 {
		t.Errorf("fay's call refused by the cluster: %v; want full [cluster], 8 in flight there, none of hers", refusedCluster)
	}
	// The raw line, as written: the keys the brief of the log names.
	raw, _ := os.ReadFile(logFile)
	for _, want := range []string{`"event":"capgate_call"`, `"route":"chat"`, `"model":"large"`, `"cluster_in_flight":`, `"model_limit":`, `"user_limit":`} {
		if !bytes.Contains(raw, []byte(want)) {
			t.Errorf("the log file lacks %s", want)
		}
	}
}
