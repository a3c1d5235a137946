package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/server"
	"github.com/capgate/capgate/tools/simapi"
)

// startServer builds capgate serve's server.Server from args (as serve parses
// them, over an empty environment) in front of api, and serves it until
// the test ends. Unlike ServeCommand.Run it hands back the server.Server, so a
// test can call Reload, which is what SIGHUP does. It returns the server,
// the gateway's address, and the operational log (text) as it grows.
func startServer(t *testing.T, api http.Handler, args ...string) (*server.Server, string, *syncBuffer) {
	t.Helper()
	up := httptest.NewServer(api)
	t.Cleanup(up.Close)
	dir := t.TempDir()
	cmd := &ServeCommand{Stdout: io.Discard, Stderr: io.Discard, Getenv: func(string) string { return "" }}
	base := []string{"--listen", "127.0.0.1:0", "--upstream", up.URL, "--database", "sqlite:" + filepath.Join(dir, "c.db"),
		"--task-id", "task-a", "--log-file", filepath.Join(dir, "lines.log"), "--drain-delay", "0"}
	o, err := cmd.parse(append(base, args...))
	if err != nil {
		t.Fatalf("serve %q: %v", args, err)
	}
	stderr := &syncBuffer{}
	logger, err := newLogger(o.LogFormat, stderr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := server.NewServer(ctx, o.ServeOptions, io.Discard, logger)
	if err != nil {
		cancel()
		t.Fatalf("serve %q: %v", args, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ctx, ln, nil) }()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("Serve: %v", err)
		}
		if err := srv.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return srv, "http://" + ln.Addr().String(), stderr
}

// writeFile writes body to path, failing the test on an error.
func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

// readInferencePolicy returns the text of the inference example's policy.
func readInferencePolicy(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(inferencePolicy)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// edit returns s with old replaced by new, failing the test unless old is
// in s once.
func edit(t *testing.T, s, old, new string) string {
	t.Helper()
	if strings.Count(s, old) != 1 {
		t.Fatalf("%q is not once in the policy", old)
	}
	return strings.Replace(s, old, new, 1)
}

// policyErrors returns the lines of the errors policy.Load finds in path:
// what serve and decide must print.
func policyErrors(t *testing.T, path string) []string {
	t.Helper()
	_, err := policy.Load(path)
	var es policy.Errors
	if !errors.As(err, &es) || len(es) == 0 {
		t.Fatalf("policy.Load(%s) = %v; want policy errors", path, err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Error())
	}
	return out
}

// Why: --identity defaults to the policy's resolver, but the gateway still
// compared the flag itself: under a tokens policy an unknown token's calls
// passed ungated (no "(anonymous)" lane) and --tokens alone was refused;
// under the built-in one the start-up line said identity "" and the error
// of --tokens without --identity tokens named identity "", not upstream.
func TestServeIdentityDefaultsToThePolicys(t *testing.T) {
	// The built-in policy: upstream, as before the policy was data.
	_, err := parseServeEnv(map[string]string{"CAPGATE_TOKENS": "/x"})
	if err == nil || !strings.Contains(err.Error(), `needs --identity tokens (the identity is "upstream")`) {
		t.Errorf("--tokens under the built-in policy: %v; want it refused, the identity upstream", err)
	}
	api := simapi.New(simapi.DemoUsers())
	up := httptest.NewServer(api)
	t.Cleanup(up.Close)
	ready := make(chan string, 1)
	stderr := &syncBuffer{}
	cmd := &ServeCommand{Stdout: io.Discard, Stderr: stderr, Ready: ready, Getenv: func(string) string { return "" }}
	args := []string{"--listen", "127.0.0.1:0", "--upstream", up.URL, "--database", "sqlite:" + filepath.Join(t.TempDir(), "c.db"),
		"--drain-delay", "0"}
	_, stop := startCommand(t, "serve", ready, func(ctx context.Context) error { return cmd.Run(ctx, args) })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr.String(), `msg="capgate serving"`) || !strings.Contains(stderr.String(), " identity=upstream") {
		t.Errorf("start-up log %q; want the capgate serving line with identity=upstream", stderr)
	}

	// The inference policy's resolver is tokens: --tokens is enough, and
	// a token the file lacks is gated as "(anonymous)".
	if _, err := parseServeEnv(nil, "--policy", inferencePolicy, "--tokens", "/x"); err != nil {
		t.Errorf("--tokens under a tokens policy: %v", err)
	}
	tokens := writeInferenceTokens(t, t.TempDir())
	inf := &simapi.Inference{Latency: time.Millisecond}
	srv, addr, _ := startServer(t, inf, "--policy", inferencePolicy, "--tokens", tokens)
	if srv.Identity() != "tokens" {
		t.Errorf("identity in force %q; want the policy's, tokens", srv.Identity())
	}
	for tok, tier := range map[string]string{tokPia: "pro", "t-nobody": "free"} {
		a := callAPI(t, addr, http.MethodPost, "/v1/chat/completions", tok, "small")
		if a.code != http.StatusOK || a.header.Get("Capgate-Decision") != "admitted" || a.header.Get("Capgate-Tier") != tier {
			t.Errorf("a call with token %s: %d, headers %v; want it gated, tier %s", tok, a.code, a.header, tier)
		}
	}
}

// TestServeAndDecideRefuseABadPolicy: a policy that does not check stops
// serve and decide at start, every error on stderr as file:line: field:
// message.
func TestServeAndDecideRefuseABadPolicy(t *testing.T) {
	clearLaneEnv(t)
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	// The docs' example: the model lane keyed by "modl", a tier "por".
	text := edit(t, readInferencePolicy(t), "key: model", "key: modl")
	writeFile(t, bad, edit(t, text, "limit: {free: 1, pro: 3}", "limit: {free: 1, por: 3}"))
	want := policyErrors(t, bad)
	if len(want) != 5 || !strings.HasPrefix(want[0], bad+":") || !strings.HasSuffix(want[0], `: lanes[1].key: route "chat" has no field "modl"`) {
		t.Fatalf("the bad policy's errors: %q; want the docs' five, the first of lanes[1].key", want)
	}
	db := "sqlite:" + filepath.Join(dir, "c.db")
	for _, args := range [][]string{
		{"serve", "--policy", bad, "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:9", "--database", db},
		{"decide", "--policy", bad, "--listen", "unix:" + filepath.Join(dir, "d.sock"), "--database", db},
	} {
		code, _, stderr := run(t, args...)
		if code == 0 {
			t.Errorf("%s with a bad policy: exit 0", args[0])
		}
		for _, w := range want {
			if !strings.Contains(stderr, w+"\n") {
				t.Errorf("%s with a bad policy: stderr lacks %q:\n%s", args[0], w, stderr)
			}
		}
		if strings.Contains(stderr, "capgate serving") || strings.Contains(stderr, "capgate decision service") {
			t.Errorf("%s with a bad policy started:\n%s", args[0], stderr)
		}
	}
	// CAPGATE_POLICY is --policy; a file that is not there is refused too.
	t.Setenv("CAPGATE_POLICY", filepath.Join(dir, "missing.yaml"))
	code, _, stderr := run(t, "serve", "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:9", "--database", db)
	if code == 0 || !strings.Contains(stderr, "missing.yaml") {
		t.Errorf("serve with CAPGATE_POLICY a missing file: exit %d %q; want it refused, naming the file", code, stderr)
	}
}

// TestServeReloadsThePolicy: SIGHUP (the server's Reload) reads --policy
// again. A policy that checks is in force at once: a new route is heavy,
// a lane's limit default is the new one, a setting staff made is kept. A
// broken file, or one with another key_prefix (the lane keys are laid out
// at start: that takes a restart), leaves the policy in force and the
// error is logged.
func TestServeReloadsThePolicy(t *testing.T) {
	clearLaneEnv(t)
	dir := t.TempDir()
	polFile := filepath.Join(dir, "policy.yaml")
	v1 := readInferencePolicy(t)
	writeFile(t, polFile, v1)
	tokens := writeInferenceTokens(t, dir)
	api := &simapi.Inference{Latency: time.Millisecond}
	// The config cache as it is by default (10 s): a reload must not wait
	// for it.
	srv, addr, stderr := startServer(t, api, "--policy", polFile, "--identity", "tokens", "--tokens", tokens)

	// limits returns the Capgate-Limit of a chat call and of GET
	// /v1/models ("" when it passed untouched).
	limits := func() (chat, models string) {
		t.Helper()
		c := callAPI(t, addr, http.MethodPost, "/v1/chat/completions", tokPia, "small")
		m := callAPI(t, addr, http.MethodGet, "/v1/models", tokPia, "")
		if c.code != http.StatusOK || m.code != http.StatusOK {
			t.Fatalf("chat %d %q, models %d %q; want both 200", c.code, c.body, m.code, m.body)
		}
		if m.header.Get("Capgate-Limit") == "" && len(capacityHeaders(m.header)) > 0 {
			t.Errorf("untouched GET /v1/models has capacity headers %v", capacityHeaders(m.header))
		}
		return c.header.Get("Capgate-Limit"), m.header.Get("Capgate-Limit")
	}
	modelLimit := func() int {
		t.Helper()
		n, ok := srv.Configs.Config(context.Background()).Number("lanes.model")
		if !ok {
			t.Fatal("the config has no lanes.model")
		}
		return n
	}
	if c, m := limits(); c != "8" || m != "" {
		t.Fatalf("v1: chat's Capgate-Limit %q, GET /v1/models's %q; want 8, untouched", c, m)
	}

	// v2: GET /v1/models is a heavy route (the cluster and user lanes),
	// the cluster's default 5.
	v2 := edit(t, v1, "\nidentity:", `  - name: models
    method: GET
    path: {exact: /v1/models}

identity:`)
	v2 = edit(t, v2, `    routes: [chat, completions, embeddings]
    limit: 8
    headers:`, `    routes: [chat, completions, embeddings, models]
    limit: 5
    headers:`)
	v2 = edit(t, v2, `    routes: [chat, completions, embeddings]
    limit: {free: 1, pro: 3}`, `    routes: [chat, completions, embeddings, models]
    limit: {free: 1, pro: 3}`)
	writeFile(t, polFile, v2)
	if err := srv.Reload(); err != nil {
		t.Fatalf("Reload with a good policy: %v", err)
	}
	if !strings.Contains(stderr.String(), `msg="reloaded the policy"`) {
		t.Errorf("no reloaded the policy line:\n%s", stderr)
	}
	if c, m := limits(); c != "5" || m != "5" {
		t.Errorf("v2: chat's Capgate-Limit %q, GET /v1/models's %q; want 5, 5 (the new route heavy, the new default)", c, m)
	}
	// Staff set the model lane (the CLI takes the policy's keys). The
	// version saved holds the whole config: lanes.cluster 5 too.
	mustRun(t, "capacity", "set", "--database", srv.Options().Database, "--policy", polFile, "lanes.model=1")
	until(t, 20*time.Second, "lanes.model 1 in force", func() bool { return modelLimit() == 1 })

	// A broken file: the error is logged, v2 stays.
	writeFile(t, polFile, "version: 1\nname: broken\nroutes: nope\n")
	err := srv.Reload()
	if err == nil || !strings.Contains(err.Error(), polFile+":") {
		t.Errorf("Reload with a broken policy: %v; want its errors, naming the file", err)
	}
	if !strings.Contains(stderr.String(), `msg="reload failed; keeping what was in force"`) || !strings.Contains(stderr.String(), "reload the policy: --policy: "+polFile+":") {
		t.Errorf("the broken policy's reload is not logged:\n%s", stderr)
	}
	if c, m := limits(); c != "5" || m != "5" {
		t.Errorf("after a broken policy: %q, %q; want v2 in force (5, 5)", c, m)
	}

	// Another key prefix takes a restart: refused, logged, v2 stays.
	writeFile(t, polFile, v2+"  key_prefix: elsewhere\n")
	err = srv.Reload()
	if err == nil || !strings.Contains(err.Error(), "takes a restart") || !strings.Contains(err.Error(), `"elsewhere"`) {
		t.Errorf("Reload with another key prefix: %v; want it refused: that takes a restart", err)
	}
	if n := strings.Count(stderr.String(), "takes a restart"); n != 1 {
		t.Errorf("the key prefix's refusal logged %d times; want once:\n%s", n, stderr)
	}
	if c, m := limits(); c != "5" || m != "5" {
		t.Errorf("after another key prefix: %q, %q; want v2 in force (5, 5)", c, m)
	}

	// v1 again: GET /v1/models passes untouched; the settings of the
	// version staff saved are keys v1 has too, so they keep their values
	// (lanes.model 1, lanes.cluster 5), not v1's defaults.
	writeFile(t, polFile, v1)
	if err := srv.Reload(); err != nil {
		t.Fatalf("Reload with v1: %v", err)
	}
	if c, m := limits(); c != "5" || m != "" {
		t.Errorf("v1 again: %q, %q; want 5 (the saved version's), untouched", c, m)
	}
	if n := modelLimit(); n != 1 {
		t.Errorf("v1 again: lanes.model %d; want staff's 1 kept", n)
	}
}
