package main

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// runIn runs capgate with args in dir, in a process of its own with a
// clean capgate environment plus env.
func runIn(t *testing.T, dir string, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Dir = dir
	cmd.Env = append([]string{"CAPGATE_TEST_MAIN=1", "GORACE=atexit_sleep_ms=0", "PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"), "USER=" + os.Getenv("USER")}, env...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("run capgate %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return code, stdout.String(), stderr.String()
}

// Why: `cd /tmp && capgate capacity set mode=enforce` exited 0 after
// writing a brand-new capgate.db that no gateway reads.
func TestCapacityRefusesToCreateADatabase(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{{"set", "mode=enforce"}, {"show"}, {"history"}, {"reset"}} {
		code, _, stderr := runIn(t, dir, nil, append([]string{"capacity"}, args...)...)
		want := "no config database at " + filepath.Join(dir, "capgate.db")
		if code != 1 || !strings.Contains(stderr, want) || !strings.Contains(stderr, "--create") || strings.Count(stderr, "\n") != 1 {
			t.Errorf("capacity %v in an empty directory = %d %q; want exit 1, one line naming %s and --create", args, code, stderr, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "capgate.db")); !os.IsNotExist(err) {
		t.Fatalf("a refused command left capgate.db behind: %v", err)
	}
	if code, out, stderr := runIn(t, dir, nil, "capacity", "set", "mode=enforce", "--create"); code != 0 || !strings.Contains(out, `"version": 1`) {
		t.Fatalf("capacity set --create = %d %q %q", code, out, stderr)
	}
	if code, out, _ := runIn(t, dir, nil, "capacity", "show"); code != 0 || !strings.Contains(out, `"mode": "enforce"`) {
		t.Errorf("capacity show after --create = %d %q", code, out)
	}
}

// Why: `capacity status` against a dead Redis exited 0 with the error in
// the JSON, and go-redis wrote raw "redis: … pool.go:…" lines to stderr.
func TestCapacityStatusFailsWhenTheStoreFails(t *testing.T) {
	dir := t.TempDir()
	db := "sqlite:" + filepath.Join(dir, "c.db")
	runIn(t, dir, nil, "capacity", "show", "--database", db, "--create")
	code, out, stderr := runIn(t, dir, nil, "capacity", "status", "--database", db, "--redis", "redis://"+closedPort(t)+"/0")
	if code != 1 || !strings.Contains(out, `"redis": "`) || !strings.Contains(stderr, "lane store redis://") {
		t.Errorf("status with Redis down = %d %q %q; want exit 1, the JSON, and the error on stderr", code, out, stderr)
	}
	for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
		if strings.HasPrefix(l, "redis: ") || strings.Contains(l, "pool.go:") {
			t.Errorf("raw go-redis line on stderr: %q", l)
		}
	}
	srv := miniredis.RunT(t)
	if code, out, stderr := runIn(t, dir, nil, "capacity", "status", "--database", db, "--redis", "redis://"+srv.Addr()+"/0"); code != 0 || !strings.Contains(out, `"redis": "ok"`) {
		t.Errorf("status with Redis up = %d %q %q", code, out, stderr)
	}
}

// Why: go-redis's own lines bypassed the log format; they go through slog
// now, as JSON with --log-format json.
func TestServeRoutesRedisClientLogsIntoSlog(t *testing.T) {
	p := startServeProcess(t, nil, "--upstream", newAPI(t), "--database", "sqlite:"+filepath.Join(t.TempDir(), "c.db"),
		"--redis", "redis://:s3cret@"+closedPort(t)+"/0", "--log-format", "json")
	p.waitFor(`"component":"go-redis"`, 20*time.Second)
	for _, l := range strings.Split(p.Stderr(), "\n") {
		if !strings.HasPrefix(l, "{") {
			t.Errorf("a stderr line that is not JSON with --log-format json: %q", l)
		}
	}
	settings := p.waitFor(`"msg":"capgate settings"`, time.Second)
	if strings.Contains(p.Stderr(), "s3cret") || !strings.Contains(settings, `"redis":"redis://:xxxxx@`) ||
		!strings.Contains(settings, `"mode":"shadow"`) || !strings.Contains(settings, `"version":`) {
		t.Errorf("start-up settings line %q: want every setting, the version, the password masked", settings)
	}
}

// Why: `--mode enforc` silently ran shadow; CAPACITY_CONFIG_CACHE_SECONDS
// wanted a number but --config-cache a duration; CAPGATE_SHUTDOWN_TIMEOUT
// wanted a duration. One syntax now, and a typo refuses to start.
func TestServeSettingsOneSyntaxAndOneLineErrors(t *testing.T) {
	api := newAPI(t)
	db := "sqlite:" + filepath.Join(t.TempDir(), "c.db")
	bad := []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"--mode", "enforc"}, `"enforc" is not a mode`},
		{[]string{"CAPACITY_LIMIT_MODE=enforc"}, nil, `CAPACITY_LIMIT_MODE="enforc" is not a mode`},
		{[]string{"CAPACITY_CONFIG_CACHE_SECONDS=ten"}, nil, `CAPACITY_CONFIG_CACHE_SECONDS="ten"`},
		{nil, []string{"--config-cache", "-1s"}, `flag --config-cache`},
		{[]string{"CAPGATE_SHUTDOWN_TIMEOUT=soon"}, nil, `CAPGATE_SHUTDOWN_TIMEOUT="soon"`},
		{nil, []string{"--log-format", "xml"}, `--log-format "xml"`},
		{[]string{"CAPGATE_MIGRATE=maybe"}, nil, `CAPGATE_MIGRATE="maybe"`},
	}
	for _, c := range bad {
		args := append([]string{"serve", "--listen", "127.0.0.1:0", "--upstream", api, "--database", db}, c.args...)
		code, _, stderr := runIn(t, t.TempDir(), c.env, args...)
		if code == 0 || !strings.Contains(stderr, c.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("serve %v %v = exit %d %q; want a one-line error naming %s", c.env, c.args, code, stderr, c.want)
		}
	}
	// Both forms, in flags and in the environment.
	p := startServeProcess(t, []string{"CAPACITY_CONFIG_CACHE_SECONDS=10s", "CAPGATE_SHUTDOWN_TIMEOUT=30",
		"CAPACITY_CONFIG_READ_TIMEOUT_MS=250", "CAPACITY_REDIS_RETRY_SECONDS=1m"},
		"--upstream", api, "--database", db, "--redis-deadline", "2", "--mode", "enforce")
	line := p.waitFor("capgate settings", time.Second)
	for _, want := range []string{"config-cache=10s", "shutdown-timeout=30s", "config-read-timeout=250ms", "redis-retry=1m0s", "redis-deadline=2s", "mode=enforce"} {
		if !strings.Contains(line, want) {
			t.Errorf("settings line %q lacks %s", line, want)
		}
	}
	p.waitFor("boot mode enforce", time.Second)
}

func TestVersion(t *testing.T) {
	code, out, _ := runIn(t, t.TempDir(), nil, "--version")
	if code != 0 || !strings.HasPrefix(out, "capgate ") || strings.Count(out, "\n") != 1 {
		t.Errorf("--version = %d %q", code, out)
	}
}

// Why: there was no way to reopen the log file (logrotate) or reload the
// tokens file without a restart. SIGHUP does both.
func TestServeSIGHUPReopensTheLogAndReloadsTokens(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.json")
	write := func(body string) {
		if err := os.WriteFile(tokens, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`[{"token":"t-ann","username":"ann","is_staff":false,"auth_groups":[]}]`)
	logFile := filepath.Join(dir, "capacity.log")
	p := startServeProcess(t, nil, "--upstream", newAPI(t), "--database", "sqlite:"+filepath.Join(dir, "c.db"),
		"--identity", "tokens", "--tokens", tokens, "--log-file", logFile)
	heavy := func(token string) string {
		_, decision := p.heavy(token)
		return decision
	}
	// An unknown token is gated as "(anonymous)", never as bob: the rotated
	// file below must hold no line of bob's.
	heavy("t-bob")
	heavy("t-ann")
	// The line is written at release, after the response: wait for it.
	until(t, 10*time.Second, "ann's line in the log file", func() bool {
		b, _ := os.ReadFile(logFile)
		return strings.Contains(string(b), `"user_id":"ann"`)
	})
	// logrotate moves the file away; staff add a token.
	if err := os.Rename(logFile, logFile+".1"); err != nil {
		t.Fatal(err)
	}
	write(`[{"token":"t-ann","username":"ann","is_staff":false,"auth_groups":[]},{"token":"t-bob","username":"bob","is_staff":false,"auth_groups":[]}]`)
	p.signal(syscall.SIGHUP)
	p.waitFor("reloaded the tokens file", 10*time.Second)
	p.waitFor("reopened the log file", 10*time.Second)
	if d := heavy("t-bob"); d != "admitted" {
		t.Errorf("a token added before SIGHUP: decision %q; want admitted", d)
	}
	until(t, 10*time.Second, "bob's line in the new log file", func() bool {
		b, _ := os.ReadFile(logFile)
		return strings.Contains(string(b), `"user_id":"bob"`)
	})
	if b, _ := os.ReadFile(logFile + ".1"); !strings.Contains(string(b), `"user_id":"ann"`) || strings.Contains(string(b), "bob") {
		t.Errorf("the rotated file = %q; want ann's line only", b)
	}
	// A broken tokens file keeps the tokens in force.
	write(`not json`)
	p.signal(syscall.SIGHUP)
	p.waitFor("reload failed", 10*time.Second)
	if d := heavy("t-bob"); d != "admitted" {
		t.Errorf("after a failed reload: decision %q; want the old tokens still in force", d)
	}
}

// Why: loadgen's \r progress was one endless line when piped, and the demo
// printed a log path it then deleted.
func TestProgressLinesWhenPipedAndTheDemoLogPath(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo and loadgen for a few seconds")
	}
	dir := t.TempDir()
	tokens := filepath.Join(dir, "users.json")
	if err := os.WriteFile(tokens, []byte(`[{"token":"ken-token","username":"ken","is_staff":false,"auth_groups":["core_user"]}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startServeProcess(t, nil, "--upstream", newAPI(t), "--database", "sqlite:"+filepath.Join(dir, "c.db"))
	code, _, stderr := runIn(t, dir, nil, "loadgen", "--url", p.addr, "--users", tokens, "--duration", "3s")
	if code != 0 || strings.Contains(stderr, "\r") || strings.Count(stderr, "calls ") < 2 {
		t.Errorf("loadgen piped = %d %q; want a progress line each, no \\r", code, stderr)
	}

	code, out, _ := runIn(t, dir, nil, "demo", "--duration", "2s")
	if code != 0 || strings.Contains(out, "capgate-demo-") || !strings.Contains(out, "--log-file FILE") {
		t.Errorf("demo without --log-file = %d %q; want no temporary path, and how to keep the log", code, out)
	}
}

// Why: `capacity history -h` and `status -h` showed other commands' help.
func TestEveryCommandHasItsOwnHelp(t *testing.T) {
	for _, c := range []struct {
		args          []string
		want, notWant []string
	}{
		{[]string{"capacity", "history", "-h"}, []string{"--limit", "-create"}, []string{"assignments", "-redis", "-note"}},
		{[]string{"capacity", "status", "-h"}, []string{"-redis", "exits 1", "-create"}, []string{"assignments", "in-process lanes"}},
		{[]string{"capacity", "set", "-h"}, []string{"assignments", "-user", "operating system user"}, []string{"-limit"}},
		{[]string{"capacity", "show", "-h"}, []string{"-create"}, []string{"assignments", "-limit"}},
		{[]string{"migrate", "-h"}, []string{"Usage: capgate migrate", "-database"}, []string{"-redis"}},
		{[]string{"serve", "-h"}, []string{"-log-format", "-migrate", "/readyz", "-mode off|shadow|enforce", "-config-cache duration", "-shutdown-timeout duration", "-max-body-bytes bytes", "SIGHUP"}, []string{"invalid means shadow"}},
	} {
		code, out, _ := run(t, c.args...)
		if code != 0 {
			t.Errorf("%v: exit %d", c.args, code)
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("%v help lacks %q:\n%s", c.args, w, out)
			}
		}
		for _, w := range c.notWant {
			if strings.Contains(out, w) {
				t.Errorf("%v help has %q, another command's:\n%s", c.args, w, out)
			}
		}
	}
}

// Why: the staff API's status said "redis":"ok" with in-process lanes; it
// names the lane store now, and "redis" says there is none.
func TestStatusNamesTheLaneStore(t *testing.T) {
	p := startServeProcess(t, nil, "--upstream", newAPI(t), "--database", "sqlite:"+filepath.Join(t.TempDir(), "c.db"))
	req, _ := http.NewRequest("GET", p.addr+"/capacity/status/", nil)
	req.Header.Set("Authorization", "Token ada-token") // staff
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"lanes":"memory"`) || !strings.Contains(string(b), `"lanes_health":"ok"`) ||
		!strings.Contains(string(b), `"redis":"none: lanes in memory"`) {
		t.Errorf("status = %d %s; want lanes memory, lanes_health ok, and no \"redis\":\"ok\" (there is no Redis)", resp.StatusCode, b)
	}
}

func TestHealthcheckCommand(t *testing.T) {
	p := startServeProcess(t, nil, "--upstream", newAPI(t), "--database", "sqlite:"+filepath.Join(t.TempDir(), "c.db"))
	if code, _, stderr := runIn(t, t.TempDir(), nil, "healthcheck", p.addr+"/livez"); code != 0 {
		t.Errorf("healthcheck of a live gateway = %d %q", code, stderr)
	}
	listen := strings.TrimPrefix(p.addr, "http://")
	if code, _, stderr := runIn(t, t.TempDir(), []string{"CAPGATE_LISTEN=" + listen}, "healthcheck"); code != 0 {
		t.Errorf("healthcheck from CAPGATE_LISTEN = %d %q", code, stderr)
	}
	if code, _, _ := runIn(t, t.TempDir(), nil, "healthcheck", "http://"+closedPort(t)+"/livez"); code != 1 {
		t.Errorf("healthcheck of nothing = %d; want 1", code)
	}
	if got := probeAddr("0.0.0.0:9090"); got != "127.0.0.1:9090" {
		t.Errorf("probeAddr(0.0.0.0:9090) = %q", got)
	}
}
