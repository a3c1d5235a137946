package main

import (
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
