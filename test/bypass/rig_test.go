package bypass

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
)

// The rig: one gunicorn serving the Django upstream (test/bypass/upstream),
// and three `capgate serve` processes in front of it, one per identity
// mode, all in enforce with enforce_for all, preview users paused
// (per_user.preview 0) and core users at one call (per_user.core 1). It is
// started once, by the first test that needs it, and stopped by TestMain.

// pythonBin is the Python with Debian's Django and DRF.
const pythonBin = "/usr/bin/python3"

// gatewayID names one of the rig's gateways.
type gatewayID string

const (
	gwUpstream gatewayID = "upstream" // --identity upstream: asks Django's /user/
	gwHeader   gatewayID = "header"   // --identity header, trusting a proxy range the tests are not in
	gwTokens   gatewayID = "tokens"   // --identity tokens, the same tokens as Django's
)

// Gateway limits the suite sets, and the per-user limits they make.
var (
	// The wait is on (wait.max_seconds 2: short, so the suite stays
	// quick) unless CAPGATE_BYPASS_WAIT=off: the suite runs both ways in
	// CI. Paused users (pam, pat) never wait, so the attacks' statuses are
	// the same either way; cora's calls over her limit wait, then run or
	// are refused, and the invariants check the same limits.
	configArgs = []string{"mode=enforce", "enforce_for=all", "per_user.preview=0", "per_user.core=1", "wait.max_seconds=" + waitSeconds()}
	// userLimit is the most heavy calls of each user the upstream may run
	// at once: pam and pat are preview (0), cora core (1), stan staff (4,
	// but per_task 2 binds first).
	userLimit = map[string]int{"pam": 0, "pat": 0, "cora": 1, "stan": 2}
	staffUser = map[string]bool{"stan": true}
)

// waitSeconds is the rig's wait.max_seconds: 2, or 0 when
// CAPGATE_BYPASS_WAIT=off.
func waitSeconds() string {
	if os.Getenv("CAPGATE_BYPASS_WAIT") == "off" {
		return "0"
	}
	return "2"
}

// maxBodyBytes is the gateways' --max-body-bytes: small, so the oversize
// attack needs only a few KiB.
const maxBodyBytes = 4096

type rig struct {
	dir      string
	bin      string // the capgate binary
	record   string // the upstream's JSON lines of heavy runs
	upstream string // http://127.0.0.1:port
	gateways map[gatewayID]*gateway
	creds    struct {
		Tokens   map[string]string `json:"tokens"`
		Sessions map[string]string `json:"sessions"`
		CSRF     string            `json:"csrf"`
	}
	procs []*exec.Cmd
}

type gateway struct {
	id      gatewayID
	addr    string // host:port
	logFile string
}

var (
	rigOnce sync.Once
	theRig  *rig
	rigErr  error
	rigDir  string
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "capgate-bypass-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "bypass:", err)
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

// missingDeps says what the rig lacks, or "".
func missingDeps() string {
	if _, err := exec.LookPath("gunicorn"); err != nil {
		return "gunicorn is not installed"
	}
	if err := exec.Command(pythonBin, "-c", "import django, rest_framework").Run(); err != nil {
		return pythonBin + " lacks Django or Django REST framework"
	}
	return ""
}

// getRig returns the running rig, starting it on first use. Without
// Django, DRF or gunicorn it skips the test, or fails it when
// CAPGATE_REQUIRE_BYPASS=1.
func getRig(t *testing.T) *rig {
	t.Helper()
	if why := missingDeps(); why != "" {
		msg := "bypass suite: " + why + " (scripts/bypass-deps.sh installs Debian's python3-django, python3-djangorestframework and gunicorn)"
		if os.Getenv("CAPGATE_REQUIRE_BYPASS") == "1" {
			t.Fatal(msg + "; CAPGATE_REQUIRE_BYPASS=1")
		}
		t.Skip(msg)
	}
	rigOnce.Do(func() {
		theRig = &rig{dir: rigDir, gateways: map[gatewayID]*gateway{}}
		rigErr = theRig.start()
	})
	if rigErr != nil {
		t.Fatalf("bypass rig: %v", rigErr)
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
	// CAPGATE_BYPASS_BIN runs the suite against another build (say, main's,
	// to see the attacks land).
	bin := os.Getenv("CAPGATE_BYPASS_BIN")
	if bin == "" {
		bin = filepath.Join(r.dir, "capgate")
		if out, err := run(ctx, root, nil, "go", "build", "-o", bin, "./cmd/capgate"); err != nil {
			return fmt.Errorf("build capgate: %w: %s", err, out)
		}
	}
	r.bin = bin

	// The upstream: database and users first, then gunicorn.
	updir := filepath.Join(root, "test", "bypass", "upstream")
	r.record = filepath.Join(r.dir, "heavy.jsonl")
	env := append(os.Environ(), "BYPASS_DIR="+r.dir, "BYPASS_RECORD="+r.record,
		"DJANGO_SETTINGS_MODULE=oclsim.settings", "PYTHONDONTWRITEBYTECODE=1")
	out, err := run(ctx, updir, env, pythonBin, "-m", "oclsim.setup_db")
	if err != nil {
		return fmt.Errorf("set up the Django database: %w: %s", err, out)
	}
	if err := json.Unmarshal([]byte(lastLine(out)), &r.creds); err != nil {
		return fmt.Errorf("read the credentials: %w: %s", err, out)
	}
	upAddr, err := spareAddr()
	if err != nil {
		return err
	}
	r.upstream = "http://" + upAddr
	// One process, many threads: the record's in-flight counts are exact.
	if err := r.spawn(updir, env, filepath.Join(r.dir, "gunicorn.log"), "gunicorn", "--bind", upAddr,
		"--workers", "1", "--worker-class", "gthread", "--threads", "48", "--timeout", "60",
		"oclsim.wsgi:application"); err != nil {
		return err
	}
	if err := waitHTTP(ctx, r.upstream+"/user/", filepath.Join(r.dir, "gunicorn.log")); err != nil {
		return err
	}

	tokens := filepath.Join(r.dir, "tokens.json")
	var entries []map[string]any
	for user, tok := range r.creds.Tokens {
		if user == "pat" {
			continue // a user the API knows and the tokens file does not
		}
		var groups []string
		if user == "cora" {
			groups = []string{"core_user"}
		}
		entries = append(entries, map[string]any{"token": tok, "username": user, "is_staff": staffUser[user], "auth_groups": groups})
	}
	b, _ := json.Marshal(entries)
	if err := os.WriteFile(tokens, b, 0o600); err != nil {
		return err
	}
	for id, extra := range map[gatewayID][]string{
		gwUpstream: {"--identity", "upstream"},
		gwHeader:   {"--identity", "header", "--trusted-proxies", "10.255.255.0/24"},
		gwTokens:   {"--identity", "tokens", "--tokens", tokens},
	} {
		db := "sqlite:" + filepath.Join(r.dir, string(id)+".db")
		set := append([]string{"capacity", "set", "--create"}, configArgs...)
		if out, err := run(ctx, r.dir, nil, bin, append(set, "--database", db, "--note", "bypass suite")...); err != nil {
			return fmt.Errorf("configure %s: %w: %s", id, err, out)
		}
		addr, err := spareAddr()
		if err != nil {
			return err
		}
		g := &gateway{id: id, addr: addr, logFile: filepath.Join(r.dir, string(id)+".log")}
		args := append([]string{"serve", "--listen", addr, "--upstream", r.upstream, "--database", db,
			"--task-id", "bypass-" + string(id), "--log-file", g.logFile, "--max-body-bytes", fmt.Sprint(maxBodyBytes),
			"--shutdown-timeout", "2s", "--drain-delay", "0"}, extra...)
		stderr := filepath.Join(r.dir, string(id)+".stderr")
		if err := r.spawn(r.dir, nil, stderr, bin, args...); err != nil {
			return err
		}
		if err := waitHTTP(ctx, "http://"+addr+"/healthz", stderr); err != nil {
			return err
		}
		r.gateways[id] = g
	}
	return nil
}

// spawn starts a long-running process, its output to logPath.
func (r *rig) spawn(dir string, env []string, logPath, name string, args ...string) error {
	f, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env, f, f
	// Its own process group (stop signals gunicorn's workers too), and
	// killed if the test binary dies before TestMain can stop it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", name, err)
	}
	f.Close() // the child has its own descriptor
	r.procs = append(r.procs, cmd)
	return nil
}

// stop ends every process the rig started: SIGTERM to its process group,
// SIGKILL after 5 s.
func (r *rig) stop() {
	for _, cmd := range r.procs {
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

// run runs a short command and returns its combined output.
func run(ctx context.Context, dir string, env []string, name string, args ...string) (string, error) {
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

// waitHTTP polls u until it answers at all (any status), for at most 30 s.
// A process start has no event to wait on but its port.
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

// heavyRun is one heavy call the upstream ran (a line of its record).
type heavyRun struct {
	CID          string `json:"cid"`
	User         string `json:"user"`
	Staff        bool   `json:"staff"`
	Endpoint     string `json:"endpoint"`
	UserInFlight int    `json:"user_in_flight"`
	Path         string `json:"path"`
	Case         string `json:"case"` // the X-Test-Case header: which attack
}

// gateLine is the part of a gateway's ocl_capacity line the suite reads.
type gateLine struct {
	Event    string `json:"event"`
	Decision string `json:"decision"`
	UserID   string `json:"user_id"`
	Tier     string `json:"tier"`
	CID      string `json:"cid"`
	// Degraded marks a call counted by the gateway's local lanes while the
	// store was out (the gatecore branch): counted, though "unavailable".
	Degraded bool `json:"degraded"`
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

// runs returns the heavy calls the upstream has run so far.
func (r *rig) runs(t *testing.T) []heavyRun {
	t.Helper()
	runs, err := readLines[heavyRun](r.record)
	if err != nil {
		t.Fatal(err)
	}
	return runs
}

// gateLines returns every gateway's ocl_capacity lines, by cid.
func (r *rig) gateLines(t *testing.T) map[string]gateLine {
	t.Helper()
	m := map[string]gateLine{}
	for _, g := range r.gateways {
		lines, err := readLines[gateLine](g.logFile)
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
