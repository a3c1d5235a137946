package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capgate/capgate/server"
	"github.com/capgate/capgate/tools/simapi"
)

// startServe runs capgate serve in front of api with args added, and
// returns its address and a function that stops it and returns Run's error.
func startServe(t *testing.T, api http.Handler, args ...string) (addr string, stop func() error) {
	t.Helper()
	up := httptest.NewServer(api)
	t.Cleanup(up.Close)
	dir := t.TempDir()
	ready := make(chan string, 1)
	cmd := &ServeCommand{Stdout: io.Discard, Stderr: io.Discard, Ready: ready,
		Getenv: func(string) string { return "" }}
	base := []string{"--listen", "127.0.0.1:0", "--upstream", up.URL, "--database", "sqlite:" + filepath.Join(dir, "c.db"),
		"--task-id", "task-a", "--log-file", filepath.Join(dir, "lines.log")}
	addr, stop = startCommand(t, "serve", ready, func(ctx context.Context) error { return cmd.Run(ctx, append(base, args...)) })
	return "http://" + addr, stop
}

// startCommand runs run (a command's Run) until it sends its address on
// ready, and returns the address and a function that stops it (cancels its
// context) and returns run's error, at most once; t's cleanup stops it too.
func startCommand(t *testing.T, name string, ready <-chan string, run func(context.Context) error) (addr string, stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- run(ctx) }()
	select {
	case addr = <-ready:
	case err := <-errc:
		cancel()
		t.Fatalf("%s exited at start: %v", name, err)
	}
	var stopped bool
	stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		timer := time.NewTimer(30 * time.Second)
		defer timer.Stop()
		select {
		case err := <-errc:
			return err
		case <-timer.C:
			t.Fatalf("%s did not stop within 30 s", name)
			return nil
		}
	}
	t.Cleanup(func() { _ = stop() })
	return addr, stop
}

func post(t *testing.T, url, token, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Token "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestServeGatesAHeavyCall(t *testing.T) {
	api := simapi.New(simapi.DemoUsers())
	api.Latency = func(string, int, bool) time.Duration { return 0 }
	addr, stop := startServe(t, api)
	resp := post(t, addr+"/concepts/$match/?semantic=true", "grace-token", `{"rows":[{"name":"a"},{"name":"b"}]}`)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-OCL-Capacity-Decision") != "admitted" ||
		resp.Header.Get("X-OCL-Capacity-Tier") != "core" {
		t.Fatalf("status %d headers %v", resp.StatusCode, resp.Header)
	}
	h, err := http.Get(addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	h.Body.Close()
	if h.StatusCode != 200 {
		t.Fatalf("healthz = %d", h.StatusCode)
	}
	if err := stop(); err != nil {
		t.Fatalf("serve returned %v", err)
	}
}

func TestServeShutdownLetsCallsFinishAndDrainsTheLog(t *testing.T) {
	api := simapi.New(simapi.DemoUsers())
	api.Hold = make(chan struct{})
	api.Started = make(chan string, 1)
	dir := t.TempDir()
	logFile := filepath.Join(dir, "gw.log")
	addr, stop := startServe(t, api, "--log-file", logFile, "--shutdown-timeout", "20s")

	done := make(chan *http.Response, 1)
	go func() { done <- post(t, addr+"/concepts/$rerank/", "ken-token", `{"rows":[{"a":1}],"q":"x"}`) }()
	<-api.Started
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	// The call in flight must finish; shutdown waits for it.
	select {
	case err := <-stopped:
		t.Fatalf("serve stopped (%v) with a call in flight", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(api.Hold)
	resp := <-done
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("call in flight at shutdown: status %d", resp.StatusCode)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("serve returned %v", err)
	}
	f, err := os.Open(logFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("bad line %q: %v", sc.Text(), err)
		}
		lines = append(lines, m)
	}
	if len(lines) != 1 || lines[0]["endpoint"] != "$rerank" || lines[0]["decision"] != "admitted" {
		t.Fatalf("log lines = %v, want the one $rerank call", lines)
	}
}

func TestServeRejectsBadSettings(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{}, "--upstream is required"},
		{[]string{"--upstream", "ftp://x"}, "want an absolute http(s) URL"},
		{[]string{"--upstream", "http://127.0.0.1:1", "--identity", "magic"}, `--identity "magic"`},
		{[]string{"--upstream", "http://127.0.0.1:1", "--identity", "tokens"}, "needs --tokens"},
		{[]string{"--upstream", "http://127.0.0.1:1", "--max-body-bytes", "-5"}, "--max-body-bytes"},
		{[]string{"--upstream", "http://127.0.0.1:1", "--database", "mysql://x"}, "use sqlite:<path> or postgres://"},
		{[]string{"--upstream", "http://127.0.0.1:1", "--trusted-proxies", "nope"}, "--trusted-proxies"},
		{[]string{"--nope"}, "flag provided but not defined"},
	}
	for _, c := range cases {
		cmd := &ServeCommand{Stdout: io.Discard, Stderr: io.Discard, Getenv: func(string) string { return "" }}
		args := append([]string{"--listen", "127.0.0.1:0", "--database", "sqlite:" + filepath.Join(t.TempDir(), "c.db")}, c.args...)
		err := cmd.Run(context.Background(), args)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("serve %v: error %v, want it to contain %q", c.args, err, c.want)
		}
	}
}

func TestServeReadsTheEnvironment(t *testing.T) {
	env := map[string]string{"CAPGATE_UPSTREAM": "http://127.0.0.1:9", "CAPACITY_TASK_ID": "task-env",
		"CAPACITY_REDIS_RETRY_SECONDS": "7", "CAPGATE_MAX_BODY_BYTES": "1024", "CAPACITY_LIMIT_MODE": "enforce"}
	cmd := &ServeCommand{Stdout: io.Discard, Stderr: io.Discard, Getenv: func(k string) string { return env[k] }}
	o, err := cmd.parse([]string{"--listen", "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	if o.Upstream != "http://127.0.0.1:9" || o.TaskID != "task-env" || o.RedisRetry != 7*time.Second ||
		o.MaxBodyBytes != 1024 || o.Mode != "enforce" {
		t.Fatalf("options = %+v", o)
	}
	o, err = cmd.parse([]string{"--task-id", "flag-wins", "--upstream", "http://x:1"})
	if err != nil || o.TaskID != "flag-wins" || o.Upstream != "http://x:1" {
		t.Fatalf("flags over env: %+v %v", o, err)
	}
}

func TestServeMetricsFollowTheConfigVersion(t *testing.T) {
	api := simapi.New(simapi.DemoUsers())
	addr, _ := startServe(t, api)
	req, _ := http.NewRequest("PATCH", addr+"/capacity/config/", strings.NewReader(`{"es2_knn": 2, "note": "t"}`))
	req.Header.Set("Authorization", "Token ada-token") // ada is staff
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("PATCH = %d", resp.StatusCode)
	}
	anon, err := http.Get(addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	anon.Body.Close()
	if anon.StatusCode != 401 {
		t.Errorf("anonymous GET /metrics = %d, want 401 (staff only)", anon.StatusCode)
	}
	mreq, _ := http.NewRequest("GET", addr+"/metrics", nil)
	mreq.Header.Set("Authorization", "Token ada-token")
	m, err := http.DefaultClient.Do(mreq)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(m.Body)
	m.Body.Close()
	if !strings.Contains(string(body), "\ncapgate_config_version 1\n") {
		t.Fatalf("metrics lack capgate_config_version 1:\n%s", body)
	}
}

// Local lanes are on by default with Redis; the environment or the flag
// turns them off; without Redis there are none (the lanes are in process).
func TestServeLocalLanes(t *testing.T) {
	env := map[string]string{"CAPGATE_UPSTREAM": "http://127.0.0.1:9"}
	cmd := &ServeCommand{Stdout: io.Discard, Stderr: io.Discard, Getenv: func(k string) string { return env[k] }}
	o, err := cmd.parse(nil)
	if err != nil || !o.LocalLanes {
		t.Fatalf("default: local lanes %v, %v; want on", o.LocalLanes, err)
	}
	if o, err = cmd.parse([]string{"--local-lanes=false"}); err != nil || o.LocalLanes {
		t.Fatalf("--local-lanes=false: %v, %v", o.LocalLanes, err)
	}
	env["CAPGATE_LOCAL_LANES"] = "0"
	if o, err = cmd.parse(nil); err != nil || o.LocalLanes {
		t.Fatalf("CAPGATE_LOCAL_LANES=0: %v, %v", o.LocalLanes, err)
	}

	o.LocalLanes = true
	o.Database = "sqlite:" + filepath.Join(t.TempDir(), "c.db")
	o.Redis = "redis://127.0.0.1:1/0" // never dialled: Open does not connect
	srv, err := server.NewServer(context.Background(), o.ServeOptions, io.Discard, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if srv.Gate.Local == nil {
		t.Fatal("with Redis and local lanes on, the gate has none")
	}
}
