package main

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
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
