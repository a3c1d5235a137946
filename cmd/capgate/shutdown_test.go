package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// hangingAPI is an upstream whose heavy calls hang until release is called
// or the test ends; started receives one value per heavy call that
// reached it.
func hangingAPI(t *testing.T) (url string, started <-chan struct{}, release func()) {
	t.Helper()
	ch := make(chan struct{}, 16)
	gate := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "$rerank") {
			ch <- struct{}{}
			select {
			case <-gate:
			case <-r.Context().Done():
			}
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(func() {
		release()
		api.Close()
	})
	return api.URL, ch, release
}

// shutdownGateway starts a gateway over hangingAPI with Redis lanes in
// miniredis, tokens identity and a log file, mode enforce.
func shutdownGateway(t *testing.T, args ...string) (*serveProcess, *miniredis.Miniredis, string, <-chan struct{}) {
	t.Helper()
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.json")
	if err := os.WriteFile(tokens, []byte(`[{"token":"t-ann","username":"ann","is_staff":false,"auth_groups":[]}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	m := miniredis.RunT(t)
	api, started, _ := hangingAPI(t)
	logFile := filepath.Join(dir, "capacity.log")
	p := startServeProcess(t, nil, append([]string{"--upstream", api, "--database", "sqlite:" + filepath.Join(dir, "c.db"),
		"--identity", "tokens", "--tokens", tokens, "--log-file", logFile, "--mode", "enforce",
		"--redis", "redis://" + m.Addr() + "/0"}, args...)...)
	waitReady(p)
	return p, m, logFile, started
}

// exitCode waits for the process to end, at most limit, and returns its
// exit code.
func (p *serveProcess) exitCode(limit time.Duration) int {
	p.t.Helper()
	select {
	case <-p.exited:
	case <-time.After(limit):
		p.t.Fatalf("capgate serve still running %s after the signal; stderr:\n%s", limit, p.Stderr())
	}
	return p.cmd.ProcessState.ExitCode()
}

// leasesHeld counts the members of the lane keys in Redis.
func leasesHeld(m *miniredis.Miniredis) int {
	n := 0
	for _, k := range m.Keys() {
		if m.Type(k) == "zset" && !strings.HasPrefix(k, "capgate:journal:") { // not a journal's roster
			members, _ := m.ZMembers(k)
			n += len(members)
		}
	}
	return n
}

// startHeavy sends a heavy call in the background and waits until the
// upstream has it.
func startHeavy(t *testing.T, p *serveProcess, started <-chan struct{}) *sync.WaitGroup {
	t.Helper()
	var wg sync.WaitGroup
	wg.Go(func() {
		req, _ := http.NewRequest("POST", p.addr+"/concepts/$rerank/", strings.NewReader(`{"rows":[{"a":1}],"q":"x"}`))
		req.Header.Set("Authorization", "Token t-ann")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	})
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatalf("the heavy call never reached the upstream; stderr:\n%s", p.Stderr())
	}
	return &wg
}

func wantShutdownLine(t *testing.T, logFile string) {
	t.Helper()
	b, _ := os.ReadFile(logFile)
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, `"event":"ocl_capacity"`) && strings.Contains(l, `"error":"shutdown"`) && strings.Contains(l, `"decision":"admitted"`) {
			return
		}
	}
	t.Errorf("no line of the cut call with error shutdown in:\n%s", b)
}

// Why: on SIGTERM the listener closed at once, with no phase where
// /readyz fails first.
func TestShutdownDrainsReadyzFirst(t *testing.T) {
	p := startServeProcess(t, nil, "--upstream", newAPI(t), "--database", "sqlite:"+filepath.Join(t.TempDir(), "c.db"),
		"--drain-delay", "1h")
	waitReady(p) // the first config read done
	p.signal(syscall.SIGTERM)
	p.waitFor("draining", 10*time.Second)
	if code, _ := p.get("/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz while draining: %d, want 503", code)
	}
	if code, _ := p.get("/livez"); code != http.StatusOK {
		t.Errorf("/livez while draining: %d, want 200: the listener still serves", code)
	}
	// Why: a second signal did not force exit.
	p.signal(syscall.SIGTERM)
	if code := p.exitCode(20 * time.Second); code != 0 {
		t.Errorf("exit code %d with no call cut, want 0", code)
	}
}

// Why: past --shutdown-timeout the cut calls left their leases in Redis,
// wrote no line, and the process exited 0.
func TestShutdownTimeoutCutsCalls(t *testing.T) {
	p, m, logFile, started := shutdownGateway(t, "--shutdown-timeout", "1s")
	wg := startHeavy(t, p, started)
	if leasesHeld(m) == 0 {
		t.Fatal("the heavy call holds no lease")
	}
	p.signal(syscall.SIGTERM)
	if code := p.exitCode(30 * time.Second); code != 1 {
		t.Errorf("exit code %d, want 1 (calls were cut)", code)
	}
	wg.Wait()
	if n := leasesHeld(m); n != 0 {
		t.Errorf("%d leases left in Redis after the shutdown", n)
	}
	wantShutdownLine(t, logFile)
}

// Why: a second signal did not force exit; now it cuts the calls at once,
// releasing their leases.
func TestSecondSignalExitsAtOnce(t *testing.T) {
	p, m, logFile, started := shutdownGateway(t, "--shutdown-timeout", "1h", "--drain-delay", "1h")
	wg := startHeavy(t, p, started)
	p.signal(syscall.SIGTERM)
	p.waitFor("draining", 10*time.Second)
	p.signal(syscall.SIGINT)
	if code := p.exitCode(30 * time.Second); code != 1 {
		t.Errorf("exit code %d, want 1 (a call was cut)", code)
	}
	wg.Wait()
	if n := leasesHeld(m); n != 0 {
		t.Errorf("%d leases left in Redis", n)
	}
	wantShutdownLine(t, logFile)
}

// Why: with the log sink blocked (a FIFO whose reader stalled) SIGTERM did
// not exit at all.
func TestShutdownWithABlockedLogSink(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "capacity.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	// The stalled reader: it opens the FIFO and never reads.
	r, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	const fSetPipeSz = 1031 // F_SETPIPE_SZ: a small pipe fills with a few lines
	_, _, _ = syscall.Syscall(syscall.SYS_FCNTL, r.Fd(), fSetPipeSz, 4096)
	p := startServeProcess(t, nil, "--upstream", newAPI(t), "--database", "sqlite:"+filepath.Join(dir, "c.db"),
		"--log-file", fifo)
	// Gated calls (mode shadow by default) write a line each: enough to
	// fill the pipe and block the writer.
	for range 64 {
		p.heavy("ada-token")
	}
	p.signal(syscall.SIGTERM)
	p.exitCode(30 * time.Second)
}

// waitLive waits until the gateway has read its config, asking /livez
// (whose body says ready too), never /readyz: no readiness probe watches.
func waitLive(p *serveProcess) {
	p.t.Helper()
	until(p.t, 20*time.Second, "/livez ready", func() bool {
		code, b := p.probe("/livez")
		return code == 200 && b.Ready
	})
}

// Why: stopping a gateway always waited the whole --drain-delay, even with
// nothing in flight and nothing routing by its /readyz.
func TestShutdownWithNothingInFlightExitsAtOnce(t *testing.T) {
	p := startServeProcess(t, nil, "--upstream", newAPI(t), "--database", "sqlite:"+filepath.Join(t.TempDir(), "c.db"),
		"--drain-delay", "1h")
	waitLive(p)
	p.signal(syscall.SIGTERM)
	if code := p.exitCode(20 * time.Second); code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
	p.waitFor("draining skipped", time.Second)
}

// With no readiness probe, the drain lasts while calls are in flight: the
// gateway still serves then, and exits as soon as the last one ends, long
// before the delay.
func TestShutdownWithoutProbeDrainsWhileCallsRun(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.json")
	if err := os.WriteFile(tokens, []byte(`[{"token":"t-ann","username":"ann","is_staff":false,"auth_groups":[]}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	api, started, release := hangingAPI(t)
	p := startServeProcess(t, nil, "--upstream", api, "--database", "sqlite:"+filepath.Join(dir, "c.db"),
		"--identity", "tokens", "--tokens", tokens, "--drain-delay", "1h", "--shutdown-timeout", "1h")
	waitLive(p)
	wg := startHeavy(t, p, started)
	p.signal(syscall.SIGTERM)
	p.waitFor("calls in flight, no readiness probe", 10*time.Second)
	if code, _ := p.get("/livez"); code != http.StatusOK {
		t.Errorf("/livez while a call runs after SIGTERM: %d, want 200: the listener still serves", code)
	}
	select {
	case <-p.exited:
		t.Fatal("the gateway exited with a call still in flight")
	default:
	}
	release()
	wg.Wait()
	if code := p.exitCode(20 * time.Second); code != 0 {
		t.Errorf("exit code %d, want 0 (no call was cut)", code)
	}
}
