package main

import (
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capgate/capgate/tools/simapi"
)

// newAPI starts the simulated API with no latency and returns its URL.
func newAPI(t *testing.T) string {
	t.Helper()
	api := simapi.New(simapi.DemoUsers())
	api.Latency = func(string, int, bool) time.Duration { return 0 }
	up := httptest.NewServer(api)
	t.Cleanup(up.Close)
	return up.URL
}

// Why: /healthz answered 503 while Redis was down although calls flowed,
// so a load balancer drained every gateway during a Redis outage.
func TestServeProbesStayUpWithRedisDown(t *testing.T) {
	dir := t.TempDir()
	p := startServeProcess(t, nil, "--upstream", newAPI(t), "--redis", "redis://"+closedPort(t)+"/0",
		"--database", "sqlite:"+filepath.Join(dir, "c.db"), "--task-id", "t1")
	until(t, 20*time.Second, "the first health check", func() bool {
		_, b := p.staffHealth()
		return b.Checks["lanes"] != "unknown" && b.Ready
	})
	for _, path := range []string{"/livez", "/healthz", "/readyz"} {
		code, b := p.probe(path)
		if code != 200 || b.Status != "ok" || !b.Ready {
			t.Errorf("GET %s with Redis down = %d %+v; want 200, ok, ready", path, code, b)
		}
		// The public port says nothing of the stores: their errors would
		// tell an attacker when the gateway is degraded.
		if b.Checks != nil {
			t.Errorf("GET %s checks = %v; want none on the public port", path, b.Checks)
		}
	}
	if _, b := p.staffHealth(); !strings.Contains(b.Checks["lanes"], "refused") || b.Checks["config"] != "ok" {
		t.Errorf("GET /capacity/health/ checks = %v; want the lanes' error and config ok", b.Checks)
	}
	// The calls flow meanwhile, uncounted.
	if code, decision := p.heavy("ken-token"); code != 200 || decision != "unavailable" {
		t.Errorf("a heavy call with Redis down: %d %q; want 200 unavailable", code, decision)
	}
	_, metrics := p.get("/metrics")
	for _, want := range []string{`capgate_store_up{store="lanes"} 0`, `capgate_store_up{store="config"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// Why: capgate_config_version lagged until the next call; it follows the
// store now, read in the background.
func TestServeConfigVersionFollowsTheStoreWithoutTraffic(t *testing.T) {
	db := "sqlite:" + filepath.Join(t.TempDir(), "c.db")
	p := startServeProcess(t, nil, "--upstream", newAPI(t), "--database", db, "--config-cache", "1s")
	// Another process (the CLI) changes the config; no call reaches the gateway.
	if code, out := runProcess(t, "capacity", "set", "es2_knn=2", "--database", db, "--user", "ops"); code != 0 {
		t.Fatalf("capacity set: exit %d: %s", code, out)
	}
	until(t, 20*time.Second, "capgate_config_version 1 with no traffic", func() bool {
		_, m := p.get("/metrics")
		return strings.Contains(m, "\ncapgate_config_version 1\n")
	})
}
