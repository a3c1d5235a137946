// Package e2e is what the suites that drive real processes share
// (test/bypass: gateways in front of Django; test/decide: Django asking a
// decision service): the processes they start and stop, the capgate binary
// they build, the Django sites' set-up and gunicorn, the hand-written
// requests they send, the attack list they replay, and the ocl_capacity
// lines they read. It is a test helper under test/, not part of the
// library.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/capgate/capgate/internal/skipnote"
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

// PythonBin is the Python with Debian's Django and DRF.
const PythonBin = "/usr/bin/python3"

// SkipOrFail skips t with msg, or fails it when CAPGATE_REQUIRE_BYPASS=1
// (set by .ci/run once Debian's packages are in).
func SkipOrFail(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("CAPGATE_REQUIRE_BYPASS") == "1" {
		t.Fatal(msg + "; CAPGATE_REQUIRE_BYPASS=1")
	}
	t.Skip(msg)
}

// Lack is what a machine lacks for a rig (What) and what gets it (How);
// the zero Lack: nothing.
type Lack struct {
	What string // "gunicorn is not installed"
	How  string // "run scripts/bypass-deps.sh"
}

// MissingDjango says what of gunicorn, Django and DRF is missing, and
// that scripts/bypass-deps.sh installs them; the zero Lack when nothing.
func MissingDjango() Lack {
	const how = "run scripts/bypass-deps.sh"
	if _, err := exec.LookPath("gunicorn"); err != nil {
		return Lack{"gunicorn is not installed", how}
	}
	if err := exec.Command(PythonBin, "-c", "import django, rest_framework").Run(); err != nil {
		return Lack{PythonBin + " lacks Django or Django REST framework", how}
	}
	return Lack{}
}

// ModuleRoot returns the module's root folder.
func ModuleRoot() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("no caller")
	}
	return filepath.Abs(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

// TestBinEnv names a capgate binary the suites use instead of building one
// (BuildCapgate): CI builds one static binary for them all and the image.
const TestBinEnv = "CAPGATE_TEST_BIN"

// BuildCapgate builds ./cmd/capgate of the module at root into bin.
// With CAPGATE_TEST_BIN set it copies that binary instead.
func BuildCapgate(ctx context.Context, root, bin string) error {
	if built := os.Getenv(TestBinEnv); built != "" {
		// A binary built once for every suite (.ci/run: the image's).
		b, err := os.ReadFile(built)
		if err == nil {
			err = os.WriteFile(bin, b, 0o755)
		}
		if err != nil {
			return fmt.Errorf("capgate from %s: %w", TestBinEnv, err)
		}
		return nil
	}
	if out, err := Run(ctx, root, nil, "go", "build", "-o", bin, "./cmd/capgate"); err != nil {
		return fmt.Errorf("build capgate: %w: %s", err, out)
	}
	return nil
}

// Configure runs `bin capacity set --create` on the config database db
// (with note, unless ""), setting each of settings.
func Configure(ctx context.Context, bin, dir, db, note string, settings ...string) error {
	args := []string{"capacity", "set", "--create", "--database", db}
	if note != "" {
		args = append(args, "--note", note)
	}
	if out, err := Run(ctx, dir, nil, bin, append(args, settings...)...); err != nil {
		return fmt.Errorf("configure %s: %w: %s", db, err, out)
	}
	return nil
}

// Procs are the long-running processes a rig started.
type Procs struct {
	mu   sync.Mutex
	cmds []*exec.Cmd
}

// Spawn starts a long-running process in dir with env (nil: the test's),
// its output to logPath.
func (p *Procs) Spawn(dir string, env []string, logPath, name string, args ...string) (*exec.Cmd, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env, f, f
	// Its own process group (Stop signals gunicorn's workers too), and
	// killed if the test binary dies before TestMain can stop it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	f.Close() // the child has its own descriptor
	p.mu.Lock()
	p.cmds = append(p.cmds, cmd)
	p.mu.Unlock()
	return cmd, nil
}

// Terminate sends SIGTERM to cmd's process group and waits for cmd.
func Terminate(cmd *exec.Cmd) {
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	_ = cmd.Wait()
}

// Stop ends every process still running: SIGTERM to its process group,
// SIGKILL after 5 s.
func (p *Procs) Stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, cmd := range p.cmds {
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

// Run runs a short command and returns its combined output.
func Run(ctx context.Context, dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env = dir, env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// SpareAddr returns a loopback address with a free port.
func SpareAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// WaitHTTP polls u until it answers at all (any status), for at most 30 s;
// the error holds the end of logPath. A process start has no event to wait
// on but its port.
func WaitHTTP(ctx context.Context, u, logPath string) error {
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
			return fmt.Errorf("%s never answered: %w\n%s", u, err, TailFile(logPath, 20))
		case <-tick.C:
		}
	}
}

// TailFile returns the last n lines of the file at path.
func TailFile(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// ReadLines decodes the JSON lines of the file at path (none if it does not
// exist), skipping a line being written; an error fails t.
func ReadLines[T any](t testing.TB, path string) []T {
	t.Helper()
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
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
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// Report fails t with errs: the first 20, then how many more.
func Report(t testing.TB, errs []string) {
	t.Helper()
	const shown = 20
	for i, e := range errs {
		if i == shown {
			t.Errorf("... and %d more", len(errs)-shown)
			break
		}
		t.Error(e)
	}
}

// Suite is a suite's rig, R: started once, by the first test that needs it
// (Get), in a temporary folder of its own, and stopped when the tests are
// done (Main, from TestMain).
type Suite[R any] struct {
	Name    string      // "bypass": in messages and the folder's name
	Missing func() Lack // what the machine lacks for the rig, and how to get it; the zero Lack: nothing
	// Start starts the rig, within ctx (3 minutes).
	Start func(ctx context.Context, s Setup) (R, error)

	once  sync.Once
	dir   string
	procs Procs
	rig   R
	err   error
}

// Setup is what a rig starts with.
type Setup struct {
	Root  string // the module's root folder
	Dir   string // the rig's own temporary folder
	Procs *Procs // keeps what the rig spawns, for Main to stop
}

// Main runs the tests, then stops every process the rig started and
// removes its folder.
func (s *Suite[R]) Main(m *testing.M) {
	dir, err := os.MkdirTemp("", "capgate-"+s.Name+"-")
	if err != nil {
		fmt.Fprintln(os.Stderr, s.Name+":", err)
		os.Exit(1)
	}
	s.dir = dir
	stop := skipnote.Heartbeat() // these suites run for minutes
	code := m.Run()
	stop()
	s.procs.Stop()
	skipnote.Report()
	os.RemoveAll(dir)
	os.Exit(code)
}

// Get returns the running rig, starting it on first use. When the machine
// lacks what the rig needs it skips t, or fails it when
// CAPGATE_REQUIRE_BYPASS=1.
func (s *Suite[R]) Get(t *testing.T) R {
	t.Helper()
	if lack := s.Missing(); lack.What != "" {
		if os.Getenv("CAPGATE_REQUIRE_BYPASS") != "1" {
			skipnote.Record("the "+s.Name+" suite ("+lack.What+")", lack.How)
		}
		SkipOrFail(t, s.Name+" suite: "+lack.What+" ("+lack.How+")")
	}
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		root, err := ModuleRoot()
		if err != nil {
			s.err = err
			return
		}
		s.rig, s.err = s.Start(ctx, Setup{Root: root, Dir: s.dir, Procs: &s.procs})
	})
	if s.err != nil {
		t.Fatalf("%s rig: %v", s.Name, s.err)
	}
	return s.rig
}
