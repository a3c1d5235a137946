package inapp

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capgate/capgate/test/internal/e2e"
)

// reply is one answer an example gave.
type reply struct {
	status int
	header http.Header
	body   string
	took   time.Duration
}

// call sends one request to base+path with token's Authorization, for at
// most 60 s.
func call(t *testing.T, method, url, auth, body string, headers ...string) reply {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", auth)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	c := http.Client{Timeout: 60 * time.Second}
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, url, err)
		return reply{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: string(b), took: time.Since(start)}
}

// together sends n requests at once (each from its own goroutine) and
// returns their replies in order.
func together(n int, send func(i int) reply) []reply {
	out := make([]reply, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { out[i] = send(i) })
	}
	wg.Wait()
	return out
}

func statuses(rs []reply) map[int]int {
	m := map[int]int{}
	for _, r := range rs {
		m[r.status]++
	}
	return m
}

// TestDjangoExample walks examples/django/README.md: the reports policy
// (user lane 1, cluster 4), its DRF app under gunicorn with 4 sync
// workers, `capgate decide` on a unix socket in a directory of its own.
// The user limit holds at the view, a light view is never delayed (also
// beside six waiting heavy calls of one user, with no --max-waiting
// flag), a call the service can't take as read is counted, and with the
// service stopped the calls fail open.
func TestDjangoExample(t *testing.T) {
	need(t, []string{"django", "rest_framework"}, "gunicorn")
	build(t)
	dir := t.TempDir()
	app := filepath.Join(root, "examples", "django")
	// The fair wait on (20 s), and no --max-waiting flag: the default
	// bound is the one under test.
	svc := newService(t, dir, "examples/django/policy.yaml", "mode=enforce", "enforce_for=all", "wait.max_seconds=20")

	// Without the socket's directory the service says how to make it.
	if out, err := e2e.Run(t.Context(), dir, nil, bin, "decide", "--policy", svc.policy, "--listen", "unix:"+svc.sock,
		"--database", svc.db); err == nil || !strings.Contains(out, "does not exist: create it first") {
		t.Errorf("decide with no socket directory: %v\n%s\nwant an error saying to create it", err, out)
	}
	if err := os.Mkdir(filepath.Join(dir, "run"), 0o750); err != nil {
		t.Fatal(err)
	}
	svc.start(t)

	record := filepath.Join(dir, "reports.jsonl")
	env := append(os.Environ(), "PYTHONPATH="+filepath.Join(root, "python"), "PYTHONDONTWRITEBYTECODE=1",
		"DJANGO_SETTINGS_MODULE=reportsite.settings", "REPORTS_DB="+filepath.Join(dir, "db.sqlite3"),
		"CAPGATE_URL=unix:"+svc.sock, "REPORTS_RECORD="+record)
	if out, err := e2e.Run(t.Context(), app, env, e2e.PythonBin, "manage.py", "migrate", "-v0"); err != nil {
		t.Fatalf("migrate: %v\n%s", err, out)
	}
	out, err := e2e.Run(t.Context(), app, env, e2e.PythonBin, "manage.py", "demo_users")
	if err != nil {
		t.Fatalf("demo_users: %v\n%s", err, out)
	}
	var tokens map[string]string
	if err := json.Unmarshal([]byte(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:]), &tokens); err != nil {
		t.Fatalf("demo_users printed %q: %v", out, err)
	}
	addr, err := e2e.SpareAddr()
	if err != nil {
		t.Fatal(err)
	}
	glog := filepath.Join(dir, "gunicorn.log")
	if _, err := procs.Spawn(app, env, glog, "gunicorn", "--bind", addr, "--workers", "4", "--worker-class", "sync",
		"--timeout", "60", "reportsite.wsgi"); err != nil {
		t.Fatal(err)
	}
	base := "http://" + addr
	if err := e2e.WaitHTTP(t.Context(), base+"/reports/", glog); err != nil {
		t.Fatal(err)
	}
	auth := func(user string) string { return "Token " + tokens[user] }
	report := func(user string, seconds float64, headers ...string) reply {
		return call(t, "POST", base+"/report/", auth(user), fmt.Sprintf(`{"pages":[1,2,3],"seconds":%g}`, seconds), headers...)
	}
	light := func() reply { return call(t, "GET", base+"/reports/", auth("bob"), "") }
	// Every worker loads Django on its first request.
	together(8, func(int) reply { return light() })

	t.Run("the user limit holds at the view", func(t *testing.T) {
		// Four reports of alice at once, and one of bob: alice's run one at
		// a time (two wait in capgate's queue, the default --max-waiting;
		// the rest are refused at once), bob's beside hers.
		mark := lineCount(t, record)
		rs := together(5, func(i int) reply {
			if i == 4 {
				return report("bob", 1)
			}
			return report("alice", 1)
		})
		alice := statuses(rs[:4])
		if alice[200] < 1 || alice[200]+alice[429] != 4 || rs[4].status != 200 {
			t.Errorf("alice's four reports at once: %v, bob's %d; want each 200 or 429, bob 200", alice, rs[4].status)
		}
		for _, r := range rs[:4] {
			if r.status != 429 {
				continue
			}
			var body map[string]any
			_ = json.Unmarshal([]byte(r.body), &body)
			if r.header.Get("Capgate-Decision") != "refused" || r.header.Get("Retry-After") == "" ||
				!strings.HasPrefix(fmt.Sprint(body["detail"]), "Reports are busy.") || body["scope"] != "user" {
				t.Errorf("a refusal: %v %s; want the policy's words (Capgate-Decision, Reports are busy, scope user)", r.header, r.body)
			}
			if strings.Contains(r.body, "Matching") || r.header.Get("X-Ocl-Capacity-Decision") != "" {
				t.Errorf("a refusal in OCL's words: %v %s", r.header, r.body)
			}
		}
		runs := waitRuns(t, record, mark, alice[200]+1)
		if most := mostAtOnce(runs, func(l runLine) string { return l.User }); most["alice"] != 1 || most["bob"] != 1 {
			t.Errorf("most runs at once %v; want alice 1, bob 1", most)
		}
	})

	t.Run("a light view is never delayed beside waiting heavy calls", func(t *testing.T) {
		// Six heavy calls of alice (3 s each) at once, light calls
		// meanwhile: with no bound on waiting, five would wait on four
		// workers and the light calls queue behind them for 3 s and more.
		var wg sync.WaitGroup
		heavy := make([]reply, 6)
		for i := range heavy {
			wg.Go(func() { heavy[i] = report("alice", 3) })
		}
		time.Sleep(300 * time.Millisecond) // let them take the workers: timing is what is measured
		var worst time.Duration
		n := 0
		for deadline := time.Now().Add(4 * time.Second); time.Now().Before(deadline); n++ {
			r := light()
			if r.status != 200 {
				t.Errorf("a light call: %d", r.status)
			}
			worst = max(worst, r.took)
		}
		wg.Wait()
		st := statuses(heavy)
		t.Logf("heavy %v; %d light calls, the slowest %v", st, n, worst.Round(time.Millisecond))
		if st[200] < 1 || st[200]+st[429] != 6 {
			t.Errorf("heavy calls %v; want each 200 or 429", st)
		}
		// 1 s is the bound asked; 2 s leaves room for a loaded machine,
		// still short of the 3 s a light call waits behind a heavy one.
		if worst > 2*time.Second {
			t.Errorf("the slowest light call took %v beside waiting heavy calls; want ≤ 1 s (2 s on a loaded machine)", worst)
		}
	})

	t.Run("what the caller sends counts", func(t *testing.T) {
		// An Idempotency-Key the service can't take (a space) makes the
		// call as read a 400: the middleware counts it as the policy's
		// most expensive report of the caller, so while alice runs one it
		// waits for her lane, and never runs beside it.
		done := make(chan reply, 1)
		mark := lineCount(t, record)
		go func() { done <- report("alice", 1) }()
		waitStarted(t, record, mark)
		r := report("alice", 0, "Idempotency-Key", "a key with spaces")
		if r.status != 200 || r.header.Get("Capgate-Waited-Ms") == "" {
			t.Errorf("alice's call with a bad key while her report runs: %d %v; want 200 after waiting for her lane", r.status, r.header)
		}
		if first := <-done; first.status != 200 {
			t.Errorf("the running report: %d", first.status)
		}
		if most := mostAtOnce(waitRuns(t, record, mark, 2), func(l runLine) string { return l.User }); most["alice"] != 1 {
			t.Errorf("alice's most at once %d; want 1", most["alice"])
		}
	})

	t.Run("the service stopped: calls fail open", func(t *testing.T) {
		failsOpen(t, svc, record, func() reply { return report("alice", 0.2) })
		b, _ := os.ReadFile(glog)
		if !strings.Contains(string(b), "calls run unlimited (fail open)") {
			t.Errorf("gunicorn's log does not say the calls failed open:\n%s", e2e.TailFile(glog, 20))
		}
	})
}

// failsOpen stops svc and checks that two heavy calls at once (send) both
// run, uncounted: 200 with no capacity headers, failed-open at the view.
func failsOpen(t *testing.T, svc *service, record string, send func() reply) {
	t.Helper()
	svc.stop()
	mark := lineCount(t, record)
	for _, r := range together(2, func(int) reply { return send() }) {
		if r.status != 200 || r.header.Get("Capgate-Decision") != "" {
			t.Errorf("with the service stopped: %d %v; want 200, no capacity headers", r.status, r.header)
		}
	}
	for _, run := range waitRuns(t, record, mark, 2) {
		if run.start.Decision != "failed-open" {
			t.Errorf("a run with the service stopped: decision %q; want failed-open", run.start.Decision)
		}
	}
}

// waitStarted waits until a run since mark has started, for at most 30 s.
func waitStarted(t *testing.T, path string, mark int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for len(readRuns(t, path, mark)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no run started")
		}
		time.Sleep(20 * time.Millisecond) // another process's file: no event to wait on
	}
}
