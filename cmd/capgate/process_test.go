package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// serveProcess is capgate serve running in a process of its own (the test
// binary, through TestMain), with its stderr recorded.
type serveProcess struct {
	t    *testing.T
	cmd  *exec.Cmd
	addr string // http://host:port

	mu     sync.Mutex
	stderr []string
	lines  chan string // every stderr line, as it comes
	exited chan struct{}
}

var listenRE = regexp.MustCompile(`"?listen"?[=:]"?([0-9.]+:[0-9]+)`)

// startServeProcess runs `capgate serve` with args and env (added to a
// clean environment), and waits for it to listen. It fails the test if
// the process exits first.
func startServeProcess(t *testing.T, env []string, args ...string) *serveProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = append([]string{"CAPGATE_TEST_MAIN=1", "GORACE=atexit_sleep_ms=0", "PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
		// The tests read /metrics without a staff token.
		"CAPGATE_PUBLIC_METRICS=true",
		// No drain phase unless a test asks: SIGTERM ends the test processes.
		"CAPGATE_DRAIN_DELAY=0"}, env...)
	cmd.Stdout = io.Discard
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &serveProcess{t: t, cmd: cmd, lines: make(chan string, 1000), exited: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(errPipe)
		for sc.Scan() {
			p.mu.Lock()
			p.stderr = append(p.stderr, sc.Text())
			p.mu.Unlock()
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
		_ = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(p.stop)
	line := p.waitFor(`capgate serving`, 30*time.Second)
	m := listenRE.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("no listen address in %q", line)
	}
	p.addr = "http://" + m[1]
	return p
}

// waitFor waits for a stderr line containing want (one written before the
// call counts) and returns it.
func (p *serveProcess) waitFor(want string, limit time.Duration) string {
	p.t.Helper()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for {
		p.mu.Lock()
		for _, l := range p.stderr {
			if strings.Contains(l, want) {
				p.mu.Unlock()
				return l
			}
		}
		p.mu.Unlock()
		select {
		case <-p.lines:
		case <-p.exited:
			p.t.Fatalf("capgate serve exited waiting for %q; stderr:\n%s", want, p.Stderr())
		case <-timer.C:
			p.t.Fatalf("no %q from capgate serve within %s; stderr:\n%s", want, limit, p.Stderr())
		}
	}
}

// Stderr returns what the process wrote on stderr so far.
func (p *serveProcess) Stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.stderr, "\n")
}

// signal sends sig to the process.
func (p *serveProcess) signal(sig syscall.Signal) {
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatal(err)
	}
}

// stop ends the process with SIGTERM and waits for it.
func (p *serveProcess) stop() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// get fetches path from the gateway and returns the status and body.
func (p *serveProcess) get(path string) (int, string) {
	p.t.Helper()
	resp, err := http.Get(p.addr + path)
	if err != nil {
		p.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// heavy sends one heavy call ($rerank) as the holder of token and returns
// the status and the capacity decision header.
func (p *serveProcess) heavy(token string) (int, string) {
	p.t.Helper()
	req, _ := http.NewRequest("POST", p.addr+"/concepts/$rerank/", strings.NewReader(`{"rows":[{"a":1}],"q":"x"}`))
	req.Header.Set("Authorization", "Token "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("X-OCL-Capacity-Decision")
}

// probe is the body of /livez and /readyz.
type probe struct {
	Status string            `json:"status"`
	Ready  bool              `json:"ready"`
	Checks map[string]string `json:"checks"`
}

func (p *serveProcess) probe(path string) (int, probe) {
	p.t.Helper()
	code, body := p.get(path)
	var b probe
	if err := json.Unmarshal([]byte(body), &b); err != nil {
		p.t.Fatalf("GET %s: %d %q: %v", path, code, body, err)
	}
	return code, b
}

// staffHealth is the body of GET /capacity/health/ as staff (ada, of
// simapi.DemoUsers): /readyz with the stores' checks, which the public
// probes leave out.
func (p *serveProcess) staffHealth() (int, probe) {
	p.t.Helper()
	req, _ := http.NewRequest("GET", p.addr+"/capacity/health/", nil)
	req.Header.Set("Authorization", "Token ada-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatalf("GET /capacity/health/: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var b probe
	if err := json.Unmarshal(body, &b); err != nil {
		p.t.Fatalf("GET /capacity/health/: %d %q: %v", resp.StatusCode, body, err)
	}
	return resp.StatusCode, b
}

// until polls cond every 50 ms until it holds, failing after limit.
func until(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
