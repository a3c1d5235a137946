package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capgate/capgate/tools/simapi"
)

func get(t *testing.T, url, auth string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestMetricsLaneGaugesAreNotStale is the finding "capgate_lane_in_flight
// still reads the last call's count minutes after the load stopped": once
// a gated call has ended, /metrics reads its lanes as empty.
func TestMetricsLaneGaugesAreNotStale(t *testing.T) {
	api := simapi.New(simapi.DemoUsers())
	api.Latency = func(string, int, bool) time.Duration { return 0 }
	addr, _ := startServe(t, api, "--public-metrics=true")
	// One keep-alive connection: the call's leases are released before
	// the connection's next request (the scrape) is read.
	resp := post(t, addr+"/concepts/$match/?semantic=true", "grace-token", `{"rows":[{"name":"a"},{"name":"b"}]}`)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.Header.Get("X-OCL-Capacity-Decision") != "admitted" {
		t.Fatalf("decision %q, want admitted", resp.Header.Get("X-OCL-Capacity-Decision"))
	}
	code, body := get(t, addr+"/metrics", "")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	for _, want := range []string{
		`capgate_lane_in_flight{lane="api_heavy",source="store"} 0`,
		`capgate_lane_in_flight{lane="es2_knn",source="store"} 0`,
		`capgate_lane_in_flight{lane="api_heavy_task",source="store"} 0`,
		`capgate_requests_total{class="heavy",code="200"} 1`,
		`capgate_upstream_seconds_count{class="heavy"} 1`,
		`capgate_build_info{`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestObservabilityWhileTheAPIIsDown is the finding "/metrics and the
// staff API answer 503 while the API is down" (--identity upstream): the
// metrics token reads /metrics and a static staff token reads the status,
// without the identity lookup.
func TestObservabilityWhileTheAPIIsDown(t *testing.T) {
	down := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down", http.StatusServiceUnavailable)
	})
	staff := filepath.Join(t.TempDir(), "staff.json")
	if err := os.WriteFile(staff, []byte(`[{"token":"ops-static","username":"ops","is_staff":true}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	addr, _ := startServe(t, down, "--metrics-token", "scrape-me", "--staff-tokens", staff)
	if code, _ := get(t, addr+"/metrics", "Bearer scrape-me"); code != http.StatusOK {
		t.Errorf("/metrics with the metrics token: %d, want 200", code)
	}
	if code, _ := get(t, addr+"/metrics", "Token ops-static"); code != http.StatusOK {
		t.Errorf("/metrics with a static staff token: %d, want 200", code)
	}
	code, body := get(t, addr+"/capacity/status/", "Token ops-static")
	if code != http.StatusOK || !strings.Contains(body, `"api_heavy"`) {
		t.Errorf("/capacity/status/ with a static staff token: %d %s, want 200 and the lanes", code, body)
	}
	if code, _ := get(t, addr+"/metrics", "Token someone"); code != http.StatusServiceUnavailable {
		t.Errorf("/metrics with an unknown token while the API is down: %d, want 503", code)
	}
	if code, _ := get(t, addr+"/readyz", ""); code != http.StatusOK {
		t.Errorf("/readyz while the API is down: %d, want 200", code)
	}
}

// With an admin listener the probes are only there: `capgate healthcheck`
// asks it, not --listen (where /livez would be proxied to the API).
func TestHealthcheckAsksTheAdminListener(t *testing.T) {
	probe := func(code int) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/livez" {
				code = http.StatusNotFound
			}
			w.WriteHeader(code)
		}))
		t.Cleanup(srv.Close)
		return strings.TrimPrefix(srv.URL, "http://")
	}
	admin, public := probe(http.StatusOK), probe(http.StatusBadGateway)
	env := map[string]string{"CAPGATE_LISTEN": public, "CAPGATE_ADMIN_LISTEN": admin}
	c := &HealthcheckCommand{Stdout: io.Discard, Stderr: io.Discard, Getenv: func(k string) string { return env[k] }}
	if err := c.Run(t.Context(), nil); err != nil {
		t.Errorf("healthcheck with an admin listener: %v", err)
	}
	delete(env, "CAPGATE_ADMIN_LISTEN")
	if err := c.Run(t.Context(), nil); err == nil {
		t.Error("healthcheck of --listen whose /livez answers 502: no error")
	}
}

// The metrics token never reaches the start-up settings line.
func TestMetricsTokenIsNotLogged(t *testing.T) {
	c := &ServeCommand{Stdout: io.Discard, Stderr: io.Discard, Getenv: func(k string) string {
		if k == "CAPGATE_METRICS_TOKEN" {
			return "very-secret"
		}
		return ""
	}}
	o, err := c.parse([]string{"--upstream", "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	if o.MetricsToken != "very-secret" {
		t.Fatalf("MetricsToken %q, want it from CAPGATE_METRICS_TOKEN", o.MetricsToken)
	}
	line := fmt.Sprintln(o.effective...)
	if strings.Contains(line, "very-secret") || !strings.Contains(line, "metrics-token ***") {
		t.Errorf("settings line %q: want the metrics token masked", line)
	}
}
