package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/config"
	"github.com/capgate/capgate/configtest"
	capgatehttp "github.com/capgate/capgate/http"
	"github.com/capgate/capgate/identity"
	"github.com/capgate/capgate/internal/skipnote"
	"github.com/capgate/capgate/lanetest"
	"github.com/capgate/capgate/redis"
	"github.com/capgate/capgate/server"
	"github.com/capgate/capgate/settings"
	"github.com/capgate/capgate/tune"
)

// TestMain runs capgate itself when CAPGATE_TEST_MAIN is set, so tests can
// start the real command as another process.
func TestMain(m *testing.M) {
	if os.Getenv("CAPGATE_TEST_MAIN") == "1" {
		os.Exit(processMain())
	}
	skipnote.Main(m)
}

// runProcess runs capgate with args in a process of its own.
func runProcess(t *testing.T, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	// A race-enabled binary sleeps 1 s at exit unless told not to.
	cmd.Env = append(os.Environ(), "CAPGATE_TEST_MAIN=1", "GORACE=atexit_sleep_ms=0")
	out, err := cmd.CombinedOutput()
	if exit, ok := errors.AsType[*exec.ExitError](err); ok {
		return exit.ExitCode(), string(out)
	}
	if err != nil {
		t.Fatalf("run capgate %s: %v", strings.Join(args, " "), err)
	}
	return 0, string(out)
}

// clearLaneEnv keeps the machine's environment out of the settings.
func clearLaneEnv(t *testing.T) {
	for _, name := range []string{"CAPGATE_DATABASE", "CAPACITY_LIMIT_MODE", "CAPGATE_REDIS_URL", "REDIS_HOST",
		"REDIS_SENTINELS", "REDIS_PASSWORD", "CAPGATE_KEY_PREFIX", "CAPGATE_REDIS"} {
		t.Setenv(name, "")
	}
}

// run runs capgate with args and returns its exit code and output.
func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := Run(context.Background(), args, strings.NewReader(""), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// mustRun runs capgate with args, fails unless it exits 0, and decodes
// its output.
func mustRun(t *testing.T, args ...string) map[string]any {
	t.Helper()
	code, out, errOut := run(t, args...)
	if code != 0 {
		t.Fatalf("capgate %s: exit %d, stderr %q", strings.Join(args, " "), code, errOut)
	}
	if !strings.HasPrefix(out, "{\n  \"") {
		t.Errorf("capgate %s: output %q; want JSON indented by 2 spaces", strings.Join(args, " "), out)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("capgate %s: output %q: %v", strings.Join(args, " "), out, err)
	}
	return v
}

// databases returns the --database values to test: a new SQLite file, and
// a new PostgreSQL schema when CAPGATE_TEST_POSTGRES_URL is set.
func databases(t *testing.T, fn func(t *testing.T, database string)) {
	t.Run("sqlite", func(t *testing.T) { fn(t, "sqlite:"+filepath.Join(t.TempDir(), "capgate.db")) })
	t.Run("postgres", func(t *testing.T) { fn(t, configtest.PostgresSchema(t)) })
}

func openStore(t *testing.T, database string) config.Store {
	t.Helper()
	store, err := server.OpenConfigStore(context.Background(), database)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return store
}

func wantJSON(t *testing.T, what string, got any, want string) {
	t.Helper()
	if g := configtest.JSON(t, got); g != want {
		t.Errorf("%s = %s; want %s", what, g, want)
	}
}

// TestCapacityShowSetResetHistory: show, set, reset and history, as the
// original implementation's CLI behaved.
func TestCapacityShowSetResetHistory(t *testing.T) {
	clearLaneEnv(t)
	databases(t, func(t *testing.T, db string) {
		store := openStore(t, db)
		out := mustRun(t, "capacity", "show", "--database", db)
		wantJSON(t, "show", out, `{"config":`+configtest.JSON(t, settings.Default(nil, settings.ModeShadow).Doc())+`,"version":null}`)

		code, stdout, stderr := run(t, "capacity", "set", "tiers.preview=1", "mode=enforce", "--note", "test", "--database", db)
		if code != 0 {
			t.Fatalf("set = %d %q", code, stderr)
		}
		if err := json.Unmarshal([]byte(stdout), &out); err != nil {
			t.Fatal(err)
		}
		wantJSON(t, "set changes", out["changes"], `{"mode":["shadow","enforce"],"tiers.preview":[2,1]}`)
		wantLine := fmt.Sprintf(`{"event":"ocl_capacity_config","version":%v,"changed_by":%q,"source":"command","note":"test","changes":{"mode":["shadow","enforce"],"tiers.preview":[2,1]},"mode":"enforce"}`+"\n", out["version"], osUser())
		if stderr != wantLine {
			t.Errorf("set stderr = %q; want the config log line %q", stderr, wantLine)
		}
		latest, err := store.Latest(context.Background())
		// Why: without --user, created_by was null; it is the OS user now.
		if err != nil || latest == nil || latest.Source != "command" || latest.Note != "test" || latest.CreatedBy != osUser() {
			t.Fatalf("latest row = %+v, %v; want source command, note test, created by %q", latest, err, osUser())
		}
		if got := fmt.Sprint(out["version"]); got != fmt.Sprint(latest.ID) {
			t.Errorf("set version = %s; want %d", got, latest.ID)
		}

		out = mustRun(t, "capacity", "reset", "--database", db, "--user", "root", "es2_knn=1")
		wantJSON(t, "reset changes", out["changes"], `{"mode":["enforce","shadow"],"tiers.preview":[1,2]}`)
		if latest, _ := store.Latest(context.Background()); latest.CreatedBy != "root" {
			t.Errorf("reset row created_by = %q; want root", latest.CreatedBy)
		}
	})
}

// staffCaller is an Identifier that takes every caller for staff.
type staffCaller struct{}

func (staffCaller) Identify(context.Context, *http.Request) (identity.Caller, bool, error) {
	return identity.Caller{UserID: "root", Staff: true}, true, nil
}

// TestCapacityHistoryMatchesStaffAPI: `capacity history` and the staff
// API's GET /capacity/config/history/ show the same versions identically,
// created_at included, so one can be checked against the other.
func TestCapacityHistoryMatchesStaffAPI(t *testing.T) {
	clearLaneEnv(t)
	databases(t, func(t *testing.T, db string) {
		store := openStore(t, db)
		mustRun(t, "capacity", "set", "tiers.preview=1", "--note", "<quiet> & calm", "--database", db)
		mustRun(t, "capacity", "reset", "--user", "root", "--database", db)

		code, out, errOut := run(t, "capacity", "history", "--database", db)
		if code != 0 {
			t.Fatalf("history = %d %q", code, errOut)
		}
		var cli []string
		for dec := json.NewDecoder(strings.NewReader(out)); dec.More(); {
			var e json.RawMessage
			if err := dec.Decode(&e); err != nil {
				t.Fatalf("history output %q: %v", out, err)
			}
			cli = append(cli, compactJSON(t, e))
		}

		staff := capgatehttp.NewStaffHandler(config.NewService(store, settings.ModeShadow), staffCaller{})
		rec := httptest.NewRecorder()
		staff.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/capacity/config/history/", nil))
		var entries []json.RawMessage
		if err := json.Unmarshal(rec.Body.Bytes(), &entries); rec.Code != http.StatusOK || err != nil {
			t.Fatalf("GET history = %d %q, %v", rec.Code, rec.Body, err)
		}
		var api []string
		for _, e := range entries {
			api = append(api, compactJSON(t, e))
		}
		if len(cli) != 2 || !slices.Equal(cli, api) {
			t.Fatalf("history:\n CLI %q\n API %q\nwant the same two versions", cli, api)
		}
		if !strings.Contains(cli[0], `"created_by":"root"`) || !strings.Contains(cli[1], `"note":"<quiet> & calm"`) {
			t.Errorf("history %q; want the reset by root, then the set with its note", cli)
		}
	})
}

// compactJSON returns b without insignificant space, keys in their order.
func compactJSON(t *testing.T, b []byte) string {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		t.Fatalf("compact %q: %v", b, err)
	}
	return buf.String()
}

func TestCapacitySetWait(t *testing.T) {
	clearLaneEnv(t)
	db := "sqlite:" + filepath.Join(t.TempDir(), "capgate.db")
	out := mustRun(t, "capacity", "set", "wait.max_seconds=5", "--database", db, "--create")
	wantJSON(t, "set changes", out["changes"], `{"wait.max_seconds":[20,5]}`)
	code, _, stderr := run(t, "capacity", "set", "wait.max_seconds=301", "--database", db)
	if code == 0 || !strings.Contains(stderr, `"wait.max_seconds" (301) must be at most 300.`) {
		t.Errorf("set wait.max_seconds=301 = %d %q; want the validation message", code, stderr)
	}
}

// fairness.by is set like any setting, validated, and rolled back.
func TestCapacitySetFairness(t *testing.T) {
	clearLaneEnv(t)
	db := "sqlite:" + filepath.Join(t.TempDir(), "capgate.db")
	out := mustRun(t, "capacity", "set", "fairness.by=usage", "--database", db, "--create")
	wantJSON(t, "set changes", out["changes"], `{"fairness.by":["time","usage"]}`)
	code, _, stderr := run(t, "capacity", "set", "fairness.by=work", "--database", db)
	if code == 0 || !strings.Contains(stderr, `"fairness.by" must be one of calls, time, usage.`) {
		t.Errorf("set fairness.by=work = %d %q; want the validation message", code, stderr)
	}
	out = mustRun(t, "capacity", "rollback", "--database", db)
	wantJSON(t, "rollback changes", out["changes"], `{"fairness.by":["usage","time"]}`)
}

func TestCapacityHistory(t *testing.T) {
	clearLaneEnv(t)
	db := "sqlite:" + filepath.Join(t.TempDir(), "capgate.db")
	mustRun(t, "capacity", "set", "--database", db, "--user", "root", "tiers.preview=1", "--create")
	mustRun(t, "capacity", "set", "--database", db, "es2_knn=2", "--note", "knn")
	code, out, errOut := run(t, "capacity", "history", "--limit", "5", "--database", db)
	if code != 0 || !strings.Contains(out, `"tiers.preview"`) || !strings.Contains(out, `"root"`) {
		t.Fatalf("history = %d %q %q; want the change and its user", code, out, errOut)
	}
	dec := json.NewDecoder(strings.NewReader(out))
	var entries []map[string]any
	for dec.More() {
		var e map[string]any
		if err := dec.Decode(&e); err != nil {
			t.Fatal(err)
		}
		entries = append(entries, e)
	}
	if len(entries) != 2 || entries[0]["note"] != "knn" || entries[1]["created_by"] != "root" || entries[0]["created_by"] != osUser() {
		t.Errorf("history entries = %v; want the es2_knn change first, then root's", entries)
	}
	if _, out, _ = run(t, "capacity", "history", "--database", db, "--limit", "1"); strings.Count(out, `"version"`) != 1 {
		t.Errorf("history --limit 1 = %q; want one entry", out)
	}
}

// TestCapacityErrors: the original CLI's error messages. Each fails with its exact
// message and adds no row.
func TestCapacityErrors(t *testing.T) {
	clearLaneEnv(t)
	tokens := filepath.Join(t.TempDir(), "tokens.json")
	if err := os.WriteFile(tokens, []byte(`[{"token":"t1","username":"root","is_staff":true,"auth_groups":[]}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	databases(t, func(t *testing.T, db string) {
		store := openStore(t, db)
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"set"}, "Give at least one <setting>=<value>.\n"},
			{[]string{"set", "--note", "x"}, "Give at least one <setting>=<value>.\n"},
			{[]string{"set", "mode"}, "Expected <setting>=<value>, got \"mode\".\n"},
			{[]string{"set", "=1"}, "Expected <setting>=<value>, got \"=1\".\n"},
			{[]string{"set", "es2_knn=-1"}, "\"es2_knn\" must be a whole number from 0 to 100000.\n"},
			{[]string{"set", "es2_knn=-1", "bogus=1"}, "\"es2_knn\" must be a whole number from 0 to 100000. Unknown setting \"bogus\".\n"},
			{[]string{"set", "mode=off", "--user", "nobody", "--tokens", tokens}, "No user \"nobody\".\n"},
			{[]string{"reset", "--user", "nobody", "--tokens", tokens}, "No user \"nobody\".\n"},
		} {
			args := append([]string{"capacity"}, tc.args...)
			args = append(args, "--database", db)
			code, out, errOut := run(t, args...)
			if code == 0 || errOut != tc.want || out != "" {
				t.Errorf("capgate %s = exit %d, stdout %q, stderr %q; want non-zero and %q", strings.Join(tc.args, " "), code, out, errOut, tc.want)
			}
		}
		if n := configtest.Rows(t, store); n != 0 {
			t.Errorf("%d rows after failed commands; want 0", n)
		}
		out := mustRun(t, "capacity", "set", "mode=off", "--user", "root", "--tokens", tokens, "--database", db)
		wantJSON(t, "set by a known user", out["changes"], `{"mode":["shadow","off"]}`)
	})
}

func TestCapacityUsage(t *testing.T) {
	clearLaneEnv(t)
	for _, args := range [][]string{
		{"capacity", "--help"}, {"capacity", "show", "-h"}, {"capacity", "set", "--help"}, {"capacity", "reset", "-h"},
		{"capacity", "history", "--help"}, {"capacity", "status", "--help"},
	} {
		code, out, errOut := run(t, args...)
		if code != 0 || !strings.HasPrefix(out, "Usage") || errOut != "" {
			t.Errorf("capgate %s = %d, %q, %q; want exit 0 and its usage", strings.Join(args, " "), code, out, errOut)
		}
	}
	for _, args := range [][]string{{"capacity"}, {"capacity", "frob"}, {"capacity", "show", "--bogus"}, {"capacity", "show", "extra"}} {
		if code, _, errOut := run(t, args...); code != 2 || !strings.Contains(errOut, "Usage") {
			t.Errorf("capgate %s = %d, %q; want exit 2 and the usage", strings.Join(args, " "), code, errOut)
		}
	}
	if code, _, errOut := run(t, "capacity", "show", "--database", "mysql://x"); code != 1 || !strings.Contains(errOut, "use sqlite:<path> or postgres://") {
		t.Errorf("unknown database = %d %q", code, errOut)
	}
}

// TestCapacityStatus: status, on a Redis protocol server.
func TestCapacityStatus(t *testing.T) {
	clearLaneEnv(t)
	db := "sqlite:" + filepath.Join(t.TempDir(), "capgate.db")
	code, _, errOut := run(t, "capacity", "status", "--database", db)
	if code == 0 || !strings.Contains(errOut, "In-process lanes live inside one gateway") {
		t.Errorf("status without Redis = %d %q; want an error saying why", code, errOut)
	}

	srv := miniredis.RunT(t)
	redisURL := "redis://" + srv.Addr() + "/0"
	lanes, err := redis.Open(redis.Options{URL: redisURL})
	if err != nil {
		t.Fatal(err)
	}
	defer lanes.Close()
	configs := config.NewService(openStore(t, db), settings.ModeShadow)
	gate, err := capgate.NewGate(lanes, configs, nil, "task1")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a := gate.Admit(ctx, lanetest.OCLCall("match", 2, true, false, "alice", "preview"))
	if a == nil || a.Outcome().Decision != capgate.DecisionAdmitted {
		t.Fatalf("Admit = %v; want admitted", a)
	}
	defer a.Release(ctx)

	out := mustRun(t, "capacity", "status", "--database", db, "--redis", redisURL)
	if out["mode"] != "shadow" || out["redis"] != "ok" {
		t.Errorf("status = %v; want shadow and redis ok", out)
	}
	wantJSON(t, "api_heavy", out["api_heavy"], `{"bulk_limit":3,"in_flight":1,"limit":4}`)
	wantJSON(t, "users", out["users"], `{"alice":{"in_flight":1}}`)

	t.Setenv("CAPGATE_REDIS_URL", redisURL)
	out = mustRun(t, "capacity", "status", "--database", db)
	wantJSON(t, "api_heavy from CAPGATE_REDIS_URL", out["api_heavy"], `{"bulk_limit":3,"in_flight":1,"limit":4}`)
}

// TestCapacityStatusShowsTheAdaptiveAdvice: the status command reads the
// cluster's adaptive state, as a gateway does, and shows the limit in
// force, the advice and why.
func TestCapacityStatusShowsTheAdaptiveAdvice(t *testing.T) {
	clearLaneEnv(t)
	db := "sqlite:" + filepath.Join(t.TempDir(), "capgate.db")
	mustRun(t, "capacity", "set", "--create", "--database", db,
		"adaptive.es2_knn.mode=apply", "adaptive.es2_knn.min=1", "adaptive.es2_knn.max=20")
	srv := miniredis.RunT(t)
	redisURL := "redis://" + srv.Addr() + "/0"
	lanes, err := redis.Open(redis.Options{URL: redisURL})
	if err != nil {
		t.Fatal(err)
	}
	defer lanes.Close()
	ctx := context.Background()
	// The loop of the gateways stepped it to 7, 2 s before now.
	at := time.Now().Add(-2 * time.Second).UnixMilli()
	state := fmt.Sprintf(`{"limit":7,"step":40,"reason":"queueing","at":%d,"last":{"calls":120,"mean_ms":150,"no_load_ms":100,"max_in_flight":10,"full":120}}`, at)
	const key = "ocl:capacity:tune:es2_knn"
	if err := lanes.TuneSave(ctx, key, []byte(state)); err != nil {
		t.Fatal(err)
	}
	// The loop took a window, and 3 calls are gathered for the next.
	if _, err := lanes.TuneExchange(ctx, key, tune.Window{}, time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := lanes.TuneExchange(ctx, key, tune.Window{Calls: 3}, time.Hour); err != nil {
		t.Fatal(err)
	}
	out := mustRun(t, "capacity", "status", "--database", db, "--redis", redisURL)
	wantJSON(t, "es2_knn", out["es2_knn"], `{"advised":7,"in_flight":0,"limit":7,"limit_source":"adaptive"}`)
	adv, _ := out["adaptive"].(map[string]any)
	knn, _ := adv["es2_knn"].(map[string]any)
	age, _ := knn["last_step_age_s"].(float64)
	if knn["mode"] != "apply" || knn["advised"] != 7.0 || knn["reason"] != "queueing" || knn["row_ms"] != 150.0 || age < 1 || age > 60 {
		t.Errorf("adaptive = %v; want es2_knn's advice: apply, 7, queueing, 150 ms a row, stepped about 2 s ago", out["adaptive"])
	}
	// Reading took no window: the loop's next step still gets those calls.
	r, err := lanes.TuneExchange(ctx, key, tune.Window{}, 0)
	if err != nil || !r.Due || r.Window.Calls != 3 {
		t.Errorf("the loop's exchange after the status = %+v, %v; want due with its own calls", r, err)
	}
}

// TestCLIAndGatewayShareSQLite: 50 set commands, each a process of its
// own, while a gateway's config service on the same file keeps reading and
// saving: no "database is locked", every command, read and save succeeds.
func TestCLIAndGatewayShareSQLite(t *testing.T) {
	clearLaneEnv(t)
	path := filepath.Join(t.TempDir(), "capgate.db")
	db := "sqlite:" + path
	store := openStore(t, db)
	configs, _, _, logs := configtest.Service(store)
	configs.CacheTTL = -1                  // read on every call
	configs.ReadTimeout = 10 * time.Second // the point is locking, not speed on a loaded machine

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var reads int
	var readErr error
	wg.Go(func() {
		for ctx.Err() == nil {
			configs.Config(ctx)
			if _, _, err := configs.Current(ctx); err != nil && ctx.Err() == nil && readErr == nil {
				readErr = err
			}
			reads++
		}
	})
	var saves int
	var saveErr error
	wg.Go(func() { // staff change the config through the gateway too, now and then
		for i := range 50 {
			change := settings.Patch{"tiers": map[string]any{"staff": json.Number(fmt.Sprint(i%5 + 1))}}
			if _, err := configs.Save(ctx, config.Edit{Set: change, By: "gw", Source: "api"}); err != nil && saveErr == nil {
				saveErr = err
			}
			saves++
		}
	})
	for i := range 50 {
		code, out := runProcess(t, "capacity", "set", fmt.Sprintf("es2_knn=%d", i%5+1), "--database", db)
		if code != 0 || strings.Contains(out, "locked") {
			t.Errorf("set #%d: exit %d, %q", i, code, out)
		}
	}
	stop()
	wg.Wait()
	if readErr != nil || logs.Count("WARN") != 0 {
		t.Errorf("gateway reads failed: %v, logs %q", readErr, logs.Records())
	}
	if saveErr != nil {
		t.Errorf("gateway saves failed: %v", saveErr)
	}
	if reads == 0 || saves == 0 {
		t.Errorf("the gateway made %d reads and %d saves; want some", reads, saves)
	}
	if n := configtest.Rows(t, store); n != 100 {
		t.Errorf("%d rows; want 100", n)
	}
	vs, err := store.History(context.Background(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	cli := 0
	for _, v := range vs {
		if v.Source == "command" {
			cli++
		}
	}
	if cli != 50 {
		t.Errorf("%d rows by the CLI; want 50", cli)
	}
}
