package decide

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/capgate/capgate/internal/randhex"
	"github.com/capgate/capgate/test/internal/e2e"
)

// The rig: two API hosts sharing one Redis (CAPGATE_TEST_REDIS_URL, under a
// key prefix of their own) and one config database. Each host is gunicorn
// (2 workers × 4 threads) serving the Django app in test/decide/app with
// capgate.django.CapacityMiddleware, asking its own `capgate decide` over a
// unix socket. Enforce for every call, waiting off, preview users paused
// (per_user.preview 0), core users at one call (per_user.core 1). Started
// once, by the first test that needs it; stopped by TestMain.

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
	root   string // the module's
	bin    string
	db     string // the config database
	redis  string
	prefix string
	record string
	appDir string
	pyPath []string
	creds  e2e.Creds
	hosts  []*host
	logs   []string // the decision services' ocl_capacity lines
	procs  *e2e.Procs
}

// suite.Get(t) returns the running rig, starting it on first use. Without
// Django, DRF, gunicorn or Redis it skips the test, or fails it when
// CAPGATE_REQUIRE_BYPASS=1 (set by .ci/run once Debian's packages are in).
var suite = e2e.Suite[*rig]{Name: "decide", Missing: missingDeps,
	Start: func(ctx context.Context, s e2e.Setup) (*rig, error) {
		r := &rig{dir: s.Dir, root: s.Root, procs: s.Procs}
		return r, r.start(ctx)
	}}

func TestMain(m *testing.M) { suite.Main(m) }

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

// missingDeps says what the rig lacks and how to get it; the zero Lack
// when nothing.
func missingDeps() e2e.Lack {
	if lack := e2e.MissingDjango(); lack.What != "" {
		return lack
	}
	if redisURL() == "" {
		return e2e.Lack{What: "no real Redis: neither CAPGATE_TEST_DECIDE_REDIS_URL nor CAPGATE_TEST_REDIS_URL is set",
			How: "set CAPGATE_TEST_DECIDE_REDIS_URL=redis://127.0.0.1:6379/14 (a database of its own: the suite never flushes, other packages flush theirs)"}
	}
	return e2e.Lack{}
}

func (r *rig) start(ctx context.Context) error {
	root := r.root
	r.bin = filepath.Join(r.dir, "capgate")
	if err := e2e.BuildCapgate(ctx, root, r.bin); err != nil {
		return err
	}
	r.redis = redisURL()
	r.prefix = "capgate-decide-test-" + randhex.String(4) // no flush: keys of its own
	r.db = "sqlite:" + filepath.Join(r.dir, "config.db")
	r.record = filepath.Join(r.dir, "heavy.jsonl")
	r.appDir = filepath.Join(root, "test", "decide", "app")
	// The app imports the package as pip installed it (pip install ./python,
	// from no index: its setuptools build runs with the machine's setuptools,
	// --no-build-isolation); with no pip for this Python, from the source tree.
	r.pyPath = []string{filepath.Join(root, "python"), r.appDir}
	if exec.Command(e2e.PythonBin, "-m", "pip", "--version").Run() == nil {
		site := filepath.Join(r.dir, "site")
		if out, err := e2e.Run(ctx, root, nil, e2e.PythonBin, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--no-build-isolation",
			"--target", site, filepath.Join(root, "python")); err != nil {
			return fmt.Errorf("pip install ./python: %w: %s", err, out)
		}
		r.pyPath = []string{site, r.appDir}
	}
	var err error
	if r.creds, err = e2e.SetUpUsers(ctx, r.appDir, r.pyEnv("")); err != nil {
		return err
	}
	if err := r.setConfig(ctx, configArgs...); err != nil {
		return err
	}
	for _, name := range []string{"a", "b"} {
		h := &host{name: name, sock: filepath.Join(r.dir, "decide-"+name+".sock"), logFile: filepath.Join(r.dir, "decide-"+name+".log")}
		if err := r.startDecide(ctx, h); err != nil {
			return err
		}
		addr, err := e2e.SpareAddr()
		if err != nil {
			return err
		}
		h.addr = addr
		if err := r.startApp(ctx, h, appTimeout); err != nil {
			return err
		}
		r.hosts = append(r.hosts, h)
		r.logs = append(r.logs, h.logFile)
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
	var err error
	h.gunicorn, err = r.procs.StartGunicorn(ctx, e2e.Gunicorn{Dir: r.appDir, Env: append(r.pyEnv(h.name), "CAPGATE_TIMEOUT="+timeout),
		App: "decidesite.wsgi:application", Addr: h.addr, Workers: 2, Threads: 4,
		Log: filepath.Join(r.dir, "gunicorn-"+h.name+".log"), ReadyURL: "http://" + h.addr + "/"})
	return err
}

// restartApp stops host's gunicorn and starts it again with timeout, warm.
func (r *rig) restartApp(ctx context.Context, h *host, timeout string) error {
	e2e.Terminate(h.gunicorn)
	if err := r.startApp(ctx, h, timeout); err != nil {
		return err
	}
	return r.warmHost(ctx, h)
}

// pyEnv is the environment of the app on host (none for set-up).
func (r *rig) pyEnv(host string) []string {
	env := e2e.DjangoEnv(r.root, "decidesite.settings", r.pyPath, "DECIDE_DIR="+r.dir, "DECIDE_RECORD="+r.record,
		"DECIDE_HOST="+host)
	if host != "" {
		env = append(env, "CAPGATE_URL=unix:"+filepath.Join(r.dir, "decide-"+host+".sock"))
	}
	return env
}

// setConfig changes the shared config (the services read it on every call:
// --config-cache 0).
func (r *rig) setConfig(ctx context.Context, args ...string) error {
	return e2e.Configure(ctx, r.bin, r.dir, r.db, "decide suite", args...)
}

// startDecide starts host's decision service and waits for its socket.
func (r *rig) startDecide(ctx context.Context, h *host) error {
	cmd, err := r.procs.Spawn(r.dir, nil, filepath.Join(r.dir, "decide-"+h.name+".stderr"), r.bin, "decide",
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
			return fmt.Errorf("decide %s never listened: %s", h.name, e2e.TailFile(filepath.Join(r.dir, "decide-"+h.name+".stderr"), 20))
		case <-tick.C:
		}
	}
}

// stopDecide stops host's decision service (SIGTERM) and waits for it.
func (r *rig) stopDecide(h *host) {
	e2e.Terminate(h.decide)
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
			q := e2e.Request{Target: "/concepts/$match/", Body: oneRow, Headers: []string{r.creds.Token("cora"), jsonCT}}
			_, _ = e2e.Send(ctx, h.addr, q.Raw(), 1)
		})
	}
	wg.Wait()
	return ctx.Err()
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

func (r *rig) events(t *testing.T) []runEvent {
	t.Helper()
	return e2e.ReadLines[runEvent](t, r.record)
}
