package main

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/capgate/capgate/configtest"
)

// Why: the `capgate serving` line logged the upstream URL with its
// password in clear.
func TestServeLogsNoUpstreamPassword(t *testing.T) {
	u, _ := url.Parse(newAPI(t))
	u.User = url.UserPassword("gw", "s3cret-pw")
	p := startServeProcess(t, nil, "--upstream", u.String(), "--database", "sqlite:"+filepath.Join(t.TempDir(), "c.db"))
	p.waitFor("capgate serving", 5*time.Second)
	p.stop()
	if strings.Contains(p.Stderr(), "s3cret-pw") {
		t.Errorf("a log line carries the upstream's password:\n%s", p.Stderr())
	}
}

// Why: CAPGATE_MODE was silently ignored (the mode read only
// CAPACITY_LIMIT_MODE), and a misspelt CAPGATE_ variable went unnoticed.
func TestServeEnvScheme(t *testing.T) {
	api := newAPI(t)
	db := "sqlite:" + filepath.Join(t.TempDir(), "c.db")
	p := startServeProcess(t, []string{"CAPGATE_MODE=enforce"}, "--upstream", api, "--database", db)
	p.waitFor("boot mode enforce", 5*time.Second)
	p.stop()

	code, _, stderr := runIn(t, t.TempDir(), []string{"CAPGATE_UPSTREM=" + api}, "serve", "--listen", "127.0.0.1:0", "--database", db)
	if code == 0 || !strings.Contains(stderr, "CAPGATE_UPSTREM") || !strings.Contains(stderr, "did you mean CAPGATE_UPSTREAM") ||
		strings.Count(stderr, "\n") != 1 {
		t.Errorf("exit %d, stderr %q: want one line refusing CAPGATE_UPSTREM", code, stderr)
	}
}

// Why: a permanent misconfiguration started "ready": a Redis refusing
// the password or the DB index failed open for ever, and a sqlite: path in
// a directory that does not exist was treated as an outage.
func TestServeRefusesWhatCannotHeal(t *testing.T) {
	api := newAPI(t)
	db := "sqlite:" + filepath.Join(t.TempDir(), "c.db")
	m := miniredis.RunT(t)
	m.RequireAuth("right")
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--database", db, "--redis", "redis://:wrong@" + m.Addr() + "/0"}, "Redis refuses these settings"},
		{[]string{"--database", "sqlite:" + filepath.Join(t.TempDir(), "missing-dir", "x.db")}, "does not exist"},
	}
	if u := os.Getenv("CAPGATE_TEST_REDIS_URL"); u != "" {
		host := strings.TrimPrefix(u, "redis://")
		host, _, _ = strings.Cut(host, "/")
		cases = append(cases, struct {
			args []string
			want string
		}{[]string{"--database", db, "--redis", "redis://" + host + "/99"}, "DB index is out of range"})
	}
	if u := os.Getenv(configtest.PostgresURLEnv); u != "" {
		pu, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		pu.Path = "/capgate_no_such_database"
		cases = append(cases, struct {
			args []string
			want string
		}{[]string{"--database", pu.String()}, "capgate_no_such_database"})
	}
	for _, c := range cases {
		code, _, stderr := runIn(t, t.TempDir(), nil, append([]string{"serve", "--listen", "127.0.0.1:0", "--upstream", api}, c.args...)...)
		last := strings.TrimSpace(stderr)
		if i := strings.LastIndex(last, "\n"); i >= 0 {
			last = last[i+1:]
		}
		if code != 1 || !strings.Contains(last, c.want) || strings.Contains(stderr, "wrong@") {
			t.Errorf("serve %v: exit %d, stderr:\n%s\nwant exit 1 and a last line with %q", c.args, code, stderr, c.want)
		}
	}
}

// metricValue returns the value of the metric line starting with name on
// the gateway's /metrics, "" when there is none.
func (p *serveProcess) metricValue(name string) string {
	_, body := p.get("/metrics")
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			return v
		}
	}
	return ""
}

// Why: a change made with `capgate capacity set` reached the gateways up
// to --config-cache later. It is pushed now: through Redis where the lanes
// are, through PostgreSQL NOTIFY where the config is, and SQLite's commit
// counter for a database file on the gateways' host. The gateways here
// keep their config for an hour: only the push can bring the change.
func TestConfigChangeIsPushed(t *testing.T) {
	clearLaneEnv(t)
	api := newAPI(t)
	cases := map[string]func(t *testing.T) (db string, lanes []string){
		"redis": func(t *testing.T) (string, []string) {
			m := miniredis.RunT(t)
			return "sqlite:" + filepath.Join(t.TempDir(), "c.db"), []string{"--redis", "redis://" + m.Addr() + "/0"}
		},
		"postgres": func(t *testing.T) (string, []string) { return configtest.PostgresSchema(t), nil },
		"sqlite": func(t *testing.T) (string, []string) {
			return "sqlite:" + filepath.Join(t.TempDir(), "c.db"), nil
		},
	}
	for name, setup := range cases {
		t.Run(name, func(t *testing.T) {
			db, lanes := setup(t)
			var gws []*serveProcess
			for range 2 {
				p := startServeProcess(t, nil, append([]string{"--upstream", api, "--database", db, "--config-cache", "1h"}, lanes...)...)
				p.waitFor("Capacity config changes are pushed", 10*time.Second)
				gws = append(gws, p)
			}
			out := mustRun(t, append([]string{"capacity", "set", "mode=off", "--database", db}, lanes...)...)
			applies, _ := out["applies"].(string)
			if !strings.HasPrefix(applies, "now: pushed through") {
				t.Errorf("applies = %q, want it to say the change applies now", applies)
			}
			want := fmt.Sprint(out["version"])
			for i, p := range gws {
				until(t, 10*time.Second, fmt.Sprintf("gateway %d on version %s", i, want), func() bool {
					return p.metricValue("capgate_config_version") == want
				})
			}
		})
	}
}
