package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/capgate/capgate/config"
	"github.com/capgate/capgate/configtest"
	"github.com/capgate/capgate/server"
	"github.com/capgate/capgate/settings"
)

// forward accepts on addr and pipes each connection to target, until the
// test ends: a database "coming up" on an address nothing answered on.
func forward(t *testing.T, addr, target string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, in, out)
			mu.Unlock()
			wg.Go(func() { io.Copy(out, in); out.Close() })
			wg.Go(func() { io.Copy(in, out); in.Close() })
		}
	})
}

// Why: serve exited 1 when PostgreSQL was down at start, a crash loop in
// front of the API. Now it serves on the defaults (enforce as shadow) and
// picks the database up, migrating it, in the background.
func TestServeStartsWithPostgresDownAndPicksItUp(t *testing.T) {
	real := configtest.PostgresSchema(t) // a new, empty schema
	ru, err := url.Parse(real)
	if err != nil {
		t.Fatal(err)
	}
	down := closedPort(t)
	du := *ru
	du.Host = down
	p := startServeProcess(t, nil, "--upstream", newAPI(t), "--database", du.String(), "--mode", "enforce",
		"--config-cache", "1s", "--identity", "upstream")
	p.waitFor("config database not ready at start", 10*time.Second)
	waitReady(p)
	code, b := p.staffHealth()
	if code != 200 || !b.Ready || !strings.Contains(b.Checks["config"], "refused") {
		t.Errorf("/readyz with PostgreSQL down = %d %+v; want 200, ready, the config's error", code, b)
	}
	if code, _ := p.probe("/livez"); code != 200 {
		t.Errorf("/livez with PostgreSQL down = %d; want 200", code)
	}
	// Enforce at boot turns into shadow while the config can't be read.
	if code, decision := p.heavy("ken-token"); code != 200 || decision != "admitted" {
		t.Errorf("a heavy call with PostgreSQL down: %d %q; want 200 admitted", code, decision)
	}

	// The database comes up, with a config staff saved meanwhile.
	store, err := server.OpenConfigStore(context.Background(), real)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	svc := config.NewService(store, settings.ModeShadow)
	if _, err := svc.Save(context.Background(), config.Edit{Set: settings.Patch{"es2_knn": 2}, By: "ops", Source: config.SourceCommand}); err != nil {
		t.Fatal(err)
	}
	forward(t, down, ru.Host)
	p.waitFor("config database migrated", 60*time.Second)
	until(t, 20*time.Second, "the gateway reads the config", func() bool {
		_, m := p.get("/metrics")
		_, b := p.staffHealth()
		return strings.Contains(m, "\ncapgate_config_version 1\n") && b.Checks["config"] == "ok"
	})
}

// With --migrate=false the gateway never changes the schema (a database
// user without DDL rights); `capgate migrate` does, and the gateway then
// reads the config.
func TestMigrateCommandAndServeWithoutMigrating(t *testing.T) {
	databases(t, func(t *testing.T, db string) {
		p := startServeProcess(t, nil, "--upstream", newAPI(t), "--database", db, "--migrate=false", "--config-cache", "1s")
		p.waitFor("run capgate migrate", 10*time.Second)
		waitReady(p)
		if code, b := p.staffHealth(); code != 200 || b.Checks["config"] == "ok" {
			t.Errorf("/readyz before the migration = %d %+v; want 200 with the config's error", code, b)
		}
		code, out := runProcess(t, "migrate", "--database", db)
		if code != 0 || !strings.Contains(out, fmt.Sprintf(`"schema_version": %d`, server.LatestSchema(db))) {
			t.Fatalf("capgate migrate: exit %d: %s", code, out)
		}
		until(t, 20*time.Second, "the gateway reads the migrated database", func() bool {
			_, b := p.staffHealth()
			return b.Checks["config"] == "ok"
		})
		// Again: nothing to do, same answer.
		if code, out := runProcess(t, "migrate", "--database", db); code != 0 || !strings.Contains(out, fmt.Sprintf(`"schema_version": %d`, server.LatestSchema(db))) {
			t.Fatalf("capgate migrate again: exit %d: %s", code, out)
		}
	})
}

// waitReady waits for the gateway's first config read, well or not.
func waitReady(p *serveProcess) {
	p.t.Helper()
	until(p.t, 20*time.Second, "/readyz ready", func() bool {
		code, b := p.probe("/readyz")
		return code == 200 && b.Ready
	})
}

// capgate migrate --wait retries while the database is not up yet (a
// container started next to it), and succeeds once it answers.
func TestMigrateWaitsForTheDatabase(t *testing.T) {
	real := configtest.PostgresSchema(t)
	ru, err := url.Parse(real)
	if err != nil {
		t.Fatal(err)
	}
	down := closedPort(t)
	du := *ru
	du.Host = down
	if code, _, stderr := runIn(t, t.TempDir(), nil, "migrate", "--database", du.String()); code != 1 || !strings.Contains(stderr, "refused") {
		t.Fatalf("migrate without --wait, database down = %d %q; want a failure at once", code, stderr)
	}
	cmd := exec.Command(os.Args[0], "migrate", "--database", du.String(), "--wait", "60s")
	cmd.Env = []string{"CAPGATE_TEST_MAIN=1", "GORACE=atexit_sleep_ms=0", "PATH=" + os.Getenv("PATH")}
	var out strings.Builder
	cmd.Stdout = &out
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(errPipe)
	if !sc.Scan() || !strings.Contains(sc.Text(), "trying again") {
		t.Fatalf("migrate --wait with the database down: first line %q; want it to say it tries again", sc.Text())
	}
	go io.Copy(io.Discard, errPipe)
	forward(t, down, ru.Host) // the database comes up
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil || !strings.Contains(out.String(), fmt.Sprintf(`"schema_version": %d`, server.LatestSchema("postgres://"))) {
			t.Errorf("migrate --wait = %v %q; want success once the database answered", err, out.String())
		}
	case <-time.After(90 * time.Second):
		t.Fatal("migrate --wait did not finish")
	}
}

// With --migrate=false the gateway runs as a database user with the rights
// README.md lists and nothing more: it reads the config and saves changes.
func TestServeRunsAsALeastPrivilegeDatabaseUser(t *testing.T) {
	owner := configtest.PostgresSchema(t)
	if code, out := runProcess(t, "migrate", "--database", owner); code != 0 {
		t.Fatalf("migrate as the owner: %d %s", code, out)
	}
	ou, err := url.Parse(owner)
	if err != nil {
		t.Fatal(err)
	}
	schema := ou.Query().Get("search_path")
	role := "capgate_lp_" + strings.TrimPrefix(schema, "capgate_test_")
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, owner)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, q := range []string{
		"CREATE ROLE " + role + " LOGIN",
		"GRANT USAGE ON SCHEMA " + schema + " TO " + role,
		"GRANT SELECT, INSERT ON " + schema + ".capacity_configs TO " + role,
		"GRANT USAGE ON SEQUENCE " + schema + ".capacity_configs_id_seq TO " + role,
		"GRANT SELECT ON " + schema + ".capgate_schema_version TO " + role,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(ctx, owner)
		if err != nil {
			t.Errorf("drop role: %v", err)
			return
		}
		defer c.Close(ctx)
		for _, q := range []string{"DROP OWNED BY " + role, "DROP ROLE " + role} {
			if _, err := c.Exec(ctx, q); err != nil {
				t.Errorf("%s: %v", q, err)
			}
		}
	})
	lu := *ou
	lu.User = url.User(role)
	p := startServeProcess(t, nil, "--upstream", newAPI(t), "--database", lu.String(), "--migrate=false")
	waitReady(p)
	if _, b := p.staffHealth(); b.Checks["config"] != "ok" {
		t.Fatalf("config as the least-privilege user: %v", b.Checks)
	}
	req, _ := http.NewRequest("PATCH", p.addr+"/capacity/config/", strings.NewReader(`{"es2_knn": 2}`))
	req.Header.Set("Authorization", "Token ada-token") // staff
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"version":1`) {
		t.Errorf("PATCH as the least-privilege user = %d %s; want version 1", resp.StatusCode, b)
	}
}
