package decide

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/capgate/capgate/internal/randhex"
)

// The rig: two API hosts sharing one Redis (CAPGATE_TEST_REDIS_URL, under a
// key prefix of their own) and one config database. Each host is gunicorn
// (2 workers × 4 threads) serving the Django app in test/decide/app with
// capgate.django.CapacityMiddleware, asking its own `capgate decide` over a
// unix socket. Enforce for every call, waiting off, preview users paused
// (per_user.preview 0), core users at one call (per_user.core 1). Started
// once, by the first test that needs it; stopped by TestMain.

const pythonBin = "/usr/bin/python3"

// configArgs is the suite's config; the fair-wait test turns waiting on
// for itself and off again.
// The shared lanes are wide enough that one user's calls never starve
// another's: the per-user limits are the ones under test.
var configArgs = []string{"mode=enforce", "enforce_for=all", "per_user.preview=0", "per_user.core=1", "wait.max_seconds=0",
	"api_heavy.cluster=16", "api_heavy.per_task=8", "es2_knn=16"}

// userLimit is the most heavy calls of each user the views may run at
// once: pam and pat preview (0), cora core (1), stan staff (per_user 4).
var userLimit = map[string]int{"pam": 0, "pat": 0, "cora": 1, "stan": 4}

type host struct {
	name     string
	addr     string // gunicorn's host:port
	sock     string // the decision service's unix socket
	logFile  string // its ocl_capacity lines
	decide   *exec.Cmd
	gunicorn *exec.Cmd
}

type rig struct {
	dir    string
	bin    string
	db     string // the config database
	redis  string
	prefix string
	record string
	appDir string
	pyPath string
	creds  struct {
		Tokens   map[string]string `json:"tokens"`
		Sessions map[string]string `json:"sessions"`
		CSRF     string            `json:"csrf"`
	}
	hosts []*host
	mu    sync.Mutex
	procs []*exec.Cmd
}

var (
	rigOnce sync.Once
	theRig  *rig
	rigErr  error
	rigDir  string
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "capgate-decide-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "decide:", err)
		os.Exit(1)
	}
	rigDir = dir
	code := m.Run()
	if theRig != nil {
		theRig.stop()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// redisURL is the Redis the hosts share: CAPGATE_TEST_DECIDE_REDIS_URL,
// else CAPGATE_TEST_REDIS_URL. The suite never flushes it (its keys have a
// prefix of their own), but other packages' tests flush theirs when they
// start, which would wipe this suite's leases mid-test: .ci/run gives it a
// database of its own.
func redisURL() string {
	if u := os.Getenv("CAPGATE_TEST_DECIDE_REDIS_URL"); u != "" {
		return u
	}
	return os.Getenv("CAPGATE_TEST_REDIS_URL")
}

// missingDeps says what the rig lacks, or "".
func missingDeps() string {
	if _, err := exec.LookPath("gunicorn"); err != nil {
		return "gunicorn is not installed"
	}
	if err := exec.Command(pythonBin, "-c", "import django, rest_framework").Run(); err != nil {
		return pythonBin + " lacks Django or Django REST framework"
	}
	if redisURL() == "" {
		return "neither CAPGATE_TEST_DECIDE_REDIS_URL nor CAPGATE_TEST_REDIS_URL is set (the hosts share a real Redis)"
	}
	return ""
}

// getRig returns the running rig, starting it on first use. Without
// Django, DRF, gunicorn or Redis it skips the test, or fails it when
// CAPGATE_REQUIRE_BYPASS=1 (set by .ci/run once Debian's packages are in).
func getRig(t *testing.T) *rig {
	t.Helper()
	if why := missingDeps(); why != "" {
		msg := "decide suite: " + why + " (scripts/bypass-deps.sh installs Debian's python3-django, python3-djangorestframework and gunicorn)"
		if os.Getenv("CAPGATE_REQUIRE_BYPASS") == "1" {
			t.Fatal(msg + "; CAPGATE_REQUIRE_BYPASS=1")
		}
		t.Skip(msg)
	}
	rigOnce.Do(func() {
		theRig = &rig{dir: rigDir}
		rigErr = theRig.start()
	})
	if rigErr != nil {
		t.Fatalf("decide rig: %v", rigErr)
	}
	return theRig
}

func moduleRoot() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("no caller")
	}
	return filepath.Abs(filepath.Join(filepath.Dir(file), "..", ".."))
}

func (r *rig) start() error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	r.bin = filepath.Join(r.dir, "capgate")
	if out, err := runCmd(ctx, root, nil, "go", "build", "-o", r.bin, "./cmd/capgate"); err != nil {
		return fmt.Errorf("build capgate: %w: %s", err, out)
	}
	r.redis = redisURL()
	r.prefix = "capgate-decide-test-" + randhex.String(4) // no flush: keys of its own
	r.db = "sqlite:" + filepath.Join(r.dir, "config.db")
	r.record = filepath.Join(r.dir, "heavy.jsonl")
	r.appDir = filepath.Join(root, "test", "decide", "app")
	// The app imports the package as pip installed it (pip install ./python,
	// from no index); with no pip for this Python, from the source tree.
	r.pyPath = filepath.Join(root, "python") + ":" + r.appDir
	if exec.Command(pythonBin, "-m", "pip", "--version").Run() == nil {
		site := filepath.Join(r.dir, "site")
		if out, err := runCmd(ctx, root, nil, pythonBin, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
			"--target", site, filepath.Join(root, "python")); err != nil {
			return fmt.Errorf("pip install ./python: %w: %s", err, out)
		}
		r.pyPath = site + ":" + r.appDir
	}
	out, err := runCmd(ctx, r.appDir, r.pyEnv(""), pythonBin, "-m", "decidesite.setup_db")
	if err != nil {
		return fmt.Errorf("set up the Django database: %w: %s", err, out)
	}
	if err := json.Unmarshal([]byte(lastLine(out)), &r.creds); err != nil {
		return fmt.Errorf("read the credentials: %w: %s", err, out)
	}
	if err := r.setConfig(ctx, configArgs...); err != nil {
		return err
	}
	for _, name := range []string{"a", "b"} {
		h := &host{name: name, sock: filepath.Join(r.dir, "decide-"+name+".sock"), logFile: filepath.Join(r.dir, "decide-"+name+".log")}
		if err := r.startDecide(ctx, h); err != nil {
			return err
		}
		addr, err := spareAddr()
		if err != nil {
			return err
		}
		h.addr = addr
		if err := r.startApp(ctx, h, appTimeout); err != nil {
			return err
		}
		r.hosts = append(r.hosts, h)
	}
	return r.warm(ctx)
}

// appTimeout is the middleware's TIMEOUT on the hosts: generous, so that a
// decision service slowed by a loaded machine does not make calls fail open
// and break the limits under test; the fail-open test restarts a host with
// the default (0.25 s).
const appTimeout = "1.0"

// startApp starts host's gunicorn (the middleware's TIMEOUT timeout) and
// waits for it to answer.
func (r *rig) startApp(ctx context.Context, h *host, timeout string) error {
	logPath := filepath.Join(r.dir, "gunicorn-"+h.name+".log")
	var err error
	h.gunicorn, err = r.spawn(r.appDir, append(r.pyEnv(h.name), "CAPGATE_TIMEOUT="+timeout), logPath, "gunicorn",
		"--bind", h.addr, "--workers", "2", "--worker-class", "gthread", "--threads", "4", "--timeout", "60",
		"decidesite.wsgi:application")
	if err != nil {
		return err
	}
	return waitHTTP(ctx, "http://"+h.addr+"/", logPath)
}

// restartApp stops host's gunicorn and starts it again with timeout, warm.
func (r *rig) restartApp(ctx context.Context, h *host, timeout string) error {
	_ = syscall.Kill(-h.gunicorn.Process.Pid, syscall.SIGTERM)
	_ = h.gunicorn.Wait()
	if err := r.startApp(ctx, h, timeout); err != nil {
		return err
	}
	return r.warmHost(ctx, h)
}

// pyEnv is the environment of the app on host (none for set-up).
func (r *rig) pyEnv(host string) []string {
	env := append(os.Environ(), "PYTHONPATH="+r.pyPath, "DECIDE_DIR="+r.dir, "DECIDE_RECORD="+r.record,
		"DJANGO_SETTINGS_MODULE=decidesite.settings", "PYTHONDONTWRITEBYTECODE=1", "DECIDE_HOST="+host)
	if host != "" {
		env = append(env, "CAPGATE_URL=unix:"+filepath.Join(r.dir, "decide-"+host+".sock"))
	}
	return env
}

// setConfig changes the shared config (the services read it on every call:
// --config-cache 0).
func (r *rig) setConfig(ctx context.Context, args ...string) error {
	set := append([]string{"capacity", "set", "--create", "--database", r.db, "--note", "decide suite"}, args...)
	if out, err := runCmd(ctx, r.dir, nil, r.bin, set...); err != nil {
		return fmt.Errorf("configure: %w: %s", err, out)
	}
	return nil
}

// startDecide starts host's decision service and waits for its socket.
func (r *rig) startDecide(ctx context.Context, h *host) error {
	cmd, err := r.spawn(r.dir, nil, filepath.Join(r.dir, "decide-"+h.name+".stderr"), r.bin, "decide",
		"--listen", "unix:"+h.sock, "--database", r.db, "--redis", r.redis, "--key-prefix", r.prefix,
		"--task-id", "host-"+h.name, "--config-cache", "0", "--log-file", h.logFile, "--shutdown-timeout", "2s")
	if err != nil {
		return err
	}
	h.decide = cmd
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if c, err := net.Dial("unix", h.sock); err == nil {
			c.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			b, _ := os.ReadFile(filepath.Join(r.dir, "decide-"+h.name+".stderr"))
			return fmt.Errorf("decide %s never listened: %s", h.name, tail(string(b), 20))
		case <-tick.C:
		}
	}
}

// stopDecide stops host's decision service (SIGTERM) and waits for it.
func (r *rig) stopDecide(h *host) {
	_ = syscall.Kill(-h.decide.Process.Pid, syscall.SIGTERM)
	_ = h.decide.Wait()
}

// warm sends light calls to every host until each of its workers has
// loaded Django (its first request does), so timing tests time calls.
func (r *rig) warm(ctx context.Context) error {
	for _, h := range r.hosts {
		if err := r.warmHost(ctx, h); err != nil {
			return err
		}
	}
	return nil
}

func (r *rig) warmHost(ctx context.Context, h *host) error {
	var wg sync.WaitGroup
	for range 24 {
		wg.Go(func() {
			q := request{target: "/concepts/$match/", body: oneRow, headers: []string{r.token("cora"), jsonCT}}
			_, _ = sendCtx(ctx, h.addr, q.raw(), 1)
		})
	}
	wg.Wait()
	return ctx.Err()
}

// spawn starts a long-running process in its own process group.
func (r *rig) spawn(dir string, env []string, logPath, name string, args ...string) (*exec.Cmd, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env, f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	f.Close()
	r.mu.Lock()
	r.procs = append(r.procs, cmd)
	r.mu.Unlock()
	return cmd, nil
}

// stop ends every process the rig started: SIGTERM to its group, SIGKILL
// after 5 s.
func (r *rig) stop() {
	for _, cmd := range r.procs {
		if cmd.ProcessState != nil {
			continue
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		timer := time.NewTimer(5 * time.Second)
		select {
		case <-done:
		case <-timer.C:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		timer.Stop()
	}
}

func runCmd(ctx context.Context, dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env = dir, env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func spareAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// waitHTTP polls u until it answers at all, for at most 30 s.
func waitHTTP(ctx context.Context, u, logPath string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, "GET", u, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			b, _ := os.ReadFile(logPath)
			return fmt.Errorf("%s never answered: %w\n%s", u, err, tail(string(b), 20))
		case <-tick.C:
		}
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// runEvent is a line of the views' record: the start or end of one heavy run.
type runEvent struct {
	Run      string  `json:"run"`
	Ev       string  `json:"ev"`
	User     string  `json:"user"`
	Decision string  `json:"decision"`
	CID      string  `json:"cid"`
	Case     string  `json:"case"`
	Host     string  `json:"host"`
	PID      int     `json:"pid"`
	T        float64 `json:"t"` // CLOCK_MONOTONIC seconds, one clock for every process
	// Delay is how long the middlewares took to let the view run
	// (seconds): what the limiter added to the call.
	Delay *float64 `json:"delay"`
}

// gateLine is the part of an ocl_capacity line the suite reads.
type gateLine struct {
	Event    string `json:"event"`
	Decision string `json:"decision"`
	UserID   string `json:"user_id"`
	CID      string `json:"cid"`
	Degraded bool   `json:"degraded"`
	HeldMS   *int64 `json:"held_ms"`
}

func readLines[T any](path string) ([]T, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			continue // a line being written
		}
		out = append(out, v)
	}
	return out, sc.Err()
}

func (r *rig) events(t *testing.T) []runEvent {
	t.Helper()
	ev, err := readLines[runEvent](r.record)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func (r *rig) gateLines(t *testing.T) map[string]gateLine {
	t.Helper()
	m := map[string]gateLine{}
	for _, h := range r.hosts {
		lines, err := readLines[gateLine](h.logFile)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines {
			if l.Event == "ocl_capacity" {
				m[l.CID] = l
			}
		}
	}
	return m
}

func (r *rig) token(user string) string {
	return "Authorization: Token " + r.creds.Tokens[user]
}

func (r *rig) session(user string) []string {
	return []string{
		"Cookie: sessionid=" + r.creds.Sessions[user] + "; csrftoken=" + r.creds.CSRF,
		"X-CSRFToken: " + r.creds.CSRF,
	}
}
