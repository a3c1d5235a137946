// Package inapp runs the in-app examples end to end, as their READMEs
// walk through them: examples/django (a DRF app with a policy of its own
// under gunicorn sync workers) and examples/inference/app (the inference
// policy in a Starlette app under uvicorn), each asking a real `capgate
// decide` over a unix socket. Without Debian's Django, DRF and gunicorn
// (or uvicorn and Starlette) the tests skip, saying what is missing; with
// CAPGATE_REQUIRE_INAPP=1 (set by .ci/run once scripts/bypass-deps.sh and
// scripts/python-deps.sh installed them) they fail instead.
package inapp

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/capgate/capgate/internal/skipnote"
	"github.com/capgate/capgate/test/internal/e2e"
)

// requireEnv is the variable that turns a skip for a missing package into
// a failure.
const requireEnv = "CAPGATE_REQUIRE_INAPP"

var (
	root  string    // the module's root
	bin   string    // the capgate binary, built once
	procs e2e.Procs // every process the tests start
	tmp   string    // the package's temporary folder
)

func TestMain(m *testing.M) {
	var err error
	if root, err = e2e.ModuleRoot(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if tmp, err = os.MkdirTemp("", "capgate-inapp-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(tmp, "capgate")
	code := m.Run()
	procs.Stop()
	skipnote.Report()
	os.RemoveAll(tmp)
	os.Exit(code)
}

// need skips t (or fails it under CAPGATE_REQUIRE_INAPP=1) when the
// machine lacks a Python module of mods or a command of cmds, naming it.
func need(t *testing.T, mods []string, cmds ...string) {
	t.Helper()
	var missing []string
	for _, c := range cmds {
		if _, err := exec.LookPath(c); err != nil {
			missing = append(missing, c)
		}
	}
	for _, m := range mods {
		if exec.Command(e2e.PythonBin, "-c", "import "+m).Run() != nil {
			missing = append(missing, "python module "+m)
		}
	}
	if len(missing) == 0 {
		return
	}
	msg := fmt.Sprintf("%s lacks %v (scripts/bypass-deps.sh and scripts/python-deps.sh install Debian's packages)", e2e.PythonBin, missing)
	if os.Getenv(requireEnv) == "1" {
		t.Fatal(msg + "; " + requireEnv + "=1")
	}
	skipnote.Record("the in-app examples ("+fmt.Sprint(missing)+")", "run scripts/bypass-deps.sh and scripts/python-deps.sh")
	t.Skip(msg)
}

// build builds the capgate binary once.
func build(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(bin); err == nil {
		return
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	if err := e2e.BuildCapgate(ctx, root, bin); err != nil {
		t.Fatal(err)
	}
}

// service is a `capgate decide` an example asks.
type service struct {
	dir, policy, db, sock, log string
	cmd                        *exec.Cmd
}

// newService sets up a decision service of policy (a path under the
// module's root) in dir, its socket in dir/run, its config set to settings
// (mode=enforce enforce_for=all …); start starts it.
func newService(t *testing.T, dir, policy string, settings ...string) *service {
	t.Helper()
	s := &service{dir: dir, policy: filepath.Join(root, policy), db: "sqlite:" + filepath.Join(dir, "capgate.db"),
		sock: filepath.Join(dir, "run", "decide.sock"), log: filepath.Join(dir, "decide.log")}
	s.set(t, settings...)
	return s
}

// set changes the service's config (pushed to it within 250 ms; the
// tests wait for the change to be in force with inForce).
func (s *service) set(t *testing.T, settings ...string) {
	t.Helper()
	args := append([]string{"capacity", "set", "--create", "--policy", s.policy, "--database", s.db}, settings...)
	if out, err := e2e.Run(t.Context(), s.dir, nil, bin, args...); err != nil {
		t.Fatalf("capgate %v: %v\n%s", args, err, out)
	}
}

// start starts the service (the socket's directory must exist) and waits
// for its socket.
func (s *service) start(t *testing.T) {
	t.Helper()
	var err error
	s.cmd, err = procs.Spawn(s.dir, nil, filepath.Join(s.dir, "decide.stderr"), bin, "decide", "--policy", s.policy,
		"--listen", "unix:"+s.sock, "--socket-mode", "0660", "--database", s.db, "--log-file", s.log,
		"--config-cache", "1s", "--shutdown-timeout", "2s")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if c, err := net.Dial("unix", s.sock); err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("capgate decide never listened: %s", e2e.TailFile(filepath.Join(s.dir, "decide.stderr"), 20))
		}
		time.Sleep(20 * time.Millisecond) // another process's socket: no event to wait on
	}
}

// stop stops the service (SIGTERM) and waits for it.
func (s *service) stop() { e2e.Terminate(s.cmd) }

// runLine is a line of an example's record: the start or end of one heavy
// run in its view.
type runLine struct {
	Run      string  `json:"run"`
	Ev       string  `json:"ev"`
	User     string  `json:"user"`
	Model    string  `json:"model"`
	Decision string  `json:"decision"`
	T        float64 `json:"t"` // CLOCK_MONOTONIC seconds: one clock for every process
}

// runs are the record's runs since the mark-th line, each with its start
// and end (an end of 0 is a run still going).
type span struct {
	start, end runLine
}

func readRuns(t *testing.T, path string, mark int) []span {
	t.Helper()
	lines := e2e.ReadLines[runLine](t, path)[mark:]
	byID := map[string]*span{}
	var out []*span
	for _, l := range lines {
		switch l.Ev {
		case "start":
			s := &span{start: l}
			byID[l.Run] = s
			out = append(out, s)
		case "end":
			if s := byID[l.Run]; s != nil {
				s.end = l
			}
		}
	}
	res := make([]span, len(out))
	for i, s := range out {
		res[i] = *s
	}
	return res
}

// mostAtOnce returns the most runs whose key (by) is k that overlapped, for
// each k.
func mostAtOnce(runs []span, by func(runLine) string) map[string]int {
	type edge struct {
		t float64
		d int
	}
	edges := map[string][]edge{}
	for _, r := range runs {
		end := r.end.T
		if r.end.Ev == "" {
			end = 1e18
		}
		k := by(r.start)
		edges[k] = append(edges[k], edge{r.start.T, 1}, edge{end, -1})
	}
	most := map[string]int{}
	for k, es := range edges {
		slices.SortFunc(es, func(a, b edge) int {
			if a.t != b.t {
				if a.t < b.t {
					return -1
				}
				return 1
			}
			return a.d - b.d // an end before a start at the same instant
		})
		n := 0
		for _, e := range es {
			n += e.d
			most[k] = max(most[k], n)
		}
	}
	return most
}

// waitRuns waits until want runs since mark have ended, for at most 30 s.
func waitRuns(t *testing.T, path string, mark, want int) []span {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		runs := readRuns(t, path, mark)
		ended := 0
		for _, r := range runs {
			if r.end.Ev != "" {
				ended++
			}
		}
		if ended >= want {
			return runs
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d runs ended", ended, want)
		}
		time.Sleep(20 * time.Millisecond) // another process's file: no event to wait on
	}
}

// lineCount returns how many lines the file at path has (0 if none).
func lineCount(t *testing.T, path string) int {
	t.Helper()
	return len(e2e.ReadLines[json.RawMessage](t, path))
}
