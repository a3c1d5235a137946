package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/capgate/capgate/internal/skipnote"
	"github.com/capgate/capgate/tools/simapi"
)

// The ops kit in deploy/, relative to this package.
const (
	rulesFile     = "../../deploy/prometheus/capgate.rules.yml"
	rulesTestFile = "../../deploy/prometheus/capgate.rules.test.yml"
	promConfig    = "../../deploy/prometheus/prometheus.yml"
	dashboardFile = "../../deploy/grafana/capgate-dashboard.json"
)

// needProm returns the path of the Prometheus binary named, or skips the
// test when it is missing; with CAPGATE_REQUIRE_PROMETHEUS=1 (set by
// .ci/run once scripts/prometheus-deps.sh installed it) it fails instead.
func needProm(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv("CAPGATE_REQUIRE_PROMETHEUS") == "1" {
		t.Fatalf("%s not found and CAPGATE_REQUIRE_PROMETHEUS=1: %v", name, err)
	}
	skipnote.Record("the Prometheus tests", "install prometheus and promtool (scripts/prometheus-deps.sh)")
	t.Skipf("%s not installed (Debian's prometheus package; scripts/prometheus-deps.sh installs it): skipping", name)
	return ""
}

// TestPrometheusRules checks the rules and the example config with
// promtool and runs the rules' unit tests.
func TestPrometheusRules(t *testing.T) {
	promtool := needProm(t, "promtool")
	for _, args := range [][]string{
		{"check", "rules", rulesFile},
		{"check", "config", promConfig},
		{"test", "rules", rulesTestFile},
	} {
		out, err := exec.CommandContext(t.Context(), promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestPrometheusScrapesAGateway runs a real Prometheus on loopback against
// a gateway (scraped with the metrics token, as in production while the
// API is down), with the rules of deploy/, and queries a recording rule;
// then it checks that every query of the Grafana dashboard is valid
// PromQL over the metrics the gateway exports.
func TestPrometheusScrapesAGateway(t *testing.T) {
	prom := needProm(t, "prometheus")
	api := simapi.New(simapi.DemoUsers())
	api.Latency = func(string, int, bool) time.Duration { return 0 }
	addr, _ := startServe(t, api, "--metrics-token", "prom-token")
	gw, err := url.Parse(addr)
	if err != nil {
		t.Fatal(err)
	}
	resp := post(t, addr+"/concepts/$match/?semantic=true", "grace-token", `{"rows":[{"name":"a"}]}`)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	dir := t.TempDir()
	rules, err := filepath.Abs(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: capgate
    authorization:
      type: Bearer
      credentials: prom-token
    static_configs:
      - targets: [%q]
`, rules, gw.Host)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	promAddr := freeLoopbackAddr(t)
	cmd := exec.CommandContext(t.Context(), prom, "--config.file="+cfgPath,
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+promAddr)
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus output:\n%s", log.String())
		}
	})

	base := "http://" + promAddr
	// The recording rule over the lane limit the gateway reads from its
	// config: 4, the default cluster limit of api_heavy.
	got := waitQuery(t, base, `capgate:lane_limit:max{lane="api_heavy"}`, 60*time.Second)
	if got != "4" {
		t.Errorf("capgate:lane_limit:max{lane=\"api_heavy\"} = %s, want 4", got)
	}
	if got := waitQuery(t, base, `up{job="capgate"}`, 10*time.Second); got != "1" {
		t.Errorf("up = %s, want 1 (the scrape with the metrics token failed)", got)
	}
	if got := waitQuery(t, base, `capgate_requests_total{class="heavy",code="200"}`, 10*time.Second); got != "1" {
		t.Errorf("capgate_requests_total{class=heavy,code=200} = %s, want 1", got)
	}

	// Every query of the dashboard parses and evaluates.
	for _, expr := range dashboardExprs(t) {
		expr = strings.NewReplacer("$__rate_interval", "1m", "$job", "capgate").Replace(expr)
		if _, err := query(base, expr); err != nil {
			t.Errorf("dashboard query %q: %v", expr, err)
		}
	}
}

// freeLoopbackAddr returns a loopback address with a port free a moment
// ago (Prometheus takes an address, not a listener).
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// waitQuery polls Prometheus until expr has exactly one sample, and
// returns its value; it fails the test after limit.
func waitQuery(t *testing.T, base, expr string, limit time.Duration) string {
	t.Helper()
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		vals, err := query(base, expr)
		if err == nil && len(vals) == 1 {
			return vals[0]
		}
		last = err
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("no single sample of %s within %v (last error: %v)", expr, limit, last)
			return ""
		}
	}
}

// query runs an instant query and returns the values of its samples.
func query(base, expr string) ([]string, error) {
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string            `json:"resultType"`
			Result     []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&body); err != nil {
		return nil, err
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("%s: %s", body.Status, body.Error)
	}
	var vals []string
	for _, raw := range body.Data.Result {
		var s struct {
			Value [2]any `json:"value"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, err
		}
		vals = append(vals, fmt.Sprint(s.Value[1]))
	}
	return vals, nil
}

// dashboardExprs returns the PromQL of every target of the dashboard.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	var exprs []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			if tg.Expr != "" {
				exprs = append(exprs, tg.Expr)
			}
		}
	}
	if len(exprs) == 0 {
		t.Fatal("the dashboard has no queries")
	}
	return exprs
}

// TestDashboardUsesExportedMetrics checks, without Prometheus, that every
// capgate_ metric the dashboard and the rules name is one the gateway
// exports (a renamed metric would leave a panel or an alert silently
// empty).
func TestDashboardUsesExportedMetrics(t *testing.T) {
	api := simapi.New(simapi.DemoUsers())
	api.Latency = func(string, int, bool) time.Duration { return 0 }
	addr, _ := startServe(t, api, "--public-metrics=true")
	resp := post(t, addr+"/concepts/$match/?semantic=true", "grace-token", `{"rows":[{"name":"a"}]}`)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	_, exposition := get(t, addr+"/metrics", "")
	exported := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (capgate_\w+) (\w+)`).FindAllStringSubmatch(exposition, -1) {
		exported[m[1]] = true
		if m[2] == "histogram" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				exported[m[1]+s] = true
			}
		}
	}
	// Series that appear only once something happens.
	for _, name := range []string{"capgate_upstream_errors_total", "capgate_lane_waiting", "capgate_store_errors_total",
		"capgate_store_skipped_total", "capgate_degraded_decisions_total", "capgate_wait_seconds_bucket"} {
		exported[name] = true
	}
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile(`\bcapgate_[a-z_]+`)
	for _, src := range []struct {
		what string
		text string
	}{{"rules", string(rules)}, {"dashboard", strings.Join(dashboardExprs(t), "\n")}} {
		for _, n := range name.FindAllString(src.text, -1) {
			if !exported[n] {
				t.Errorf("the %s name %s, which the gateway does not export", src.what, n)
			}
		}
	}
}
