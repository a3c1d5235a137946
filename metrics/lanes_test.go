package metrics_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/internal/randhex"
	"github.com/capgate/capgate/internal/skipnote"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/metrics"
	"github.com/capgate/capgate/mock"
	"github.com/capgate/capgate/redis"
	"github.com/capgate/capgate/settings"
)

// TestLaneGaugesAreReadFromTheStore is the stale-gauge finding: a gauge
// set by the last gated call kept reading "1 in flight" long after the
// call ended. Read from the store, it reads 0 once the cache (2 s) ages.
func TestLaneGaugesAreReadFromTheStore(t *testing.T) {
	t.Run("memory", func(t *testing.T) { testLaneGauges(t, memory.New(nil), "") })
	t.Run("redis", func(t *testing.T) {
		u := os.Getenv("CAPGATE_TEST_REDIS_URL")
		if u == "" {
			skipnote.Skip(t, "the real-Redis tests", "set CAPGATE_TEST_REDIS_URL=redis://127.0.0.1:6379/15")
		}
		rs, err := redis.Open(redis.Options{URL: u})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rs.Close() })
		// A key prefix of its own: the db is shared with other tests.
		testLaneGauges(t, rs, "metricstest:"+randhex.String(4))
	})
}

func testLaneGauges(t *testing.T, base capgate.LaneStore, prefix string) {
	reg := prometheus.NewPedanticRegistry()
	store := &mock.LaneStore{Base: base}
	var counts atomic.Int32
	store.CountFn = func(ctx context.Context, keys []string, c []int) error {
		counts.Add(1)
		return store.Base.Count(ctx, keys, c)
	}
	cfg := settings.Default(nil, settings.ModeShadow)
	gate, err := capgate.NewGate(store, settings.NewFixed(cfg), nil, "task-1")
	if err != nil {
		t.Fatal(err)
	}
	gate.KeyPrefix = prefix
	m, err := metrics.New(reg, metrics.WithLanes(gate, settings.NewFixed(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	clock := mock.NewClock(time.Unix(1_700_000_000, 0))
	m.SetLanesClock(clock.Now)
	gate.Observer = m
	ctx := t.Context()

	a := gate.Admit(ctx, call("pam", "preview"))
	inFlight := func(want string) {
		t.Helper()
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "capgate_lane_in_flight"); err != nil {
			t.Error(err)
		}
	}
	inFlight(`
# HELP capgate_lane_in_flight Calls in flight per lane, all gateways, read from the lane store (at most 2 s old); source local: this gateway's local lanes while the store is unavailable.
# TYPE capgate_lane_in_flight gauge
capgate_lane_in_flight{lane="api_heavy",source="store"} 1
capgate_lane_in_flight{lane="api_heavy_task",source="store"} 1
capgate_lane_in_flight{lane="es2_knn",source="store"} 1
capgate_lane_in_flight{lane="tier:core",source="store"} 0
capgate_lane_in_flight{lane="tier:early_access",source="store"} 0
capgate_lane_in_flight{lane="tier:preview",source="store"} 1
capgate_lane_in_flight{lane="tier:staff",source="store"} 0
`)
	a.Release(ctx)
	// Within the cache's age a scrape reuses the read: no store call.
	if _, err := testutil.GatherAndCount(reg, "capgate_lane_in_flight"); err != nil {
		t.Fatal(err)
	}
	if n := counts.Load(); n != 1 {
		t.Errorf("lane reads within the cache's age: %d, want 1", n)
	}
	clock.Advance(metrics.DefaultLanesMaxAge)
	inFlight(`
# HELP capgate_lane_in_flight Calls in flight per lane, all gateways, read from the lane store (at most 2 s old); source local: this gateway's local lanes while the store is unavailable.
# TYPE capgate_lane_in_flight gauge
capgate_lane_in_flight{lane="api_heavy",source="store"} 0
capgate_lane_in_flight{lane="api_heavy_task",source="store"} 0
capgate_lane_in_flight{lane="es2_knn",source="store"} 0
capgate_lane_in_flight{lane="tier:core",source="store"} 0
capgate_lane_in_flight{lane="tier:early_access",source="store"} 0
capgate_lane_in_flight{lane="tier:preview",source="store"} 0
capgate_lane_in_flight{lane="tier:staff",source="store"} 0
`)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP capgate_lane_limit Limit per lane in the config in force (api_heavy: the cluster limit); source local: the degraded limit the local lanes apply.
# TYPE capgate_lane_limit gauge
capgate_lane_limit{lane="api_heavy",source="store"} 4
capgate_lane_limit{lane="api_heavy_task",source="store"} 4
capgate_lane_limit{lane="es2_knn",source="store"} 3
capgate_lane_limit{lane="tier:core",source="store"} 4
capgate_lane_limit{lane="tier:early_access",source="store"} 3
capgate_lane_limit{lane="tier:preview",source="store"} 2
capgate_lane_limit{lane="tier:staff",source="store"} 4
# HELP capgate_wait_max_waiting The config's wait.max_waiting: the most calls that may wait at once, in all.
# TYPE capgate_wait_max_waiting gauge
capgate_wait_max_waiting 200
`), "capgate_lane_limit", "capgate_wait_max_waiting"); err != nil {
		t.Error(err)
	}
}

// A store that fails exports no lane series (no stale values) and counts
// the failed read.
func TestLaneGaugesAbsentWhenTheStoreFails(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	store := &mock.LaneStore{Base: memory.New(nil)}
	store.CountFn = func(context.Context, []string, []int) error { return errors.New("connection refused") }
	cfg := settings.NewFixed(settings.Default(nil, settings.ModeShadow))
	gate, err := capgate.NewGate(store, cfg, nil, "task-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := metrics.New(reg, metrics.WithLanes(gate, cfg)); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, "capgate_lane_in_flight", "capgate_lane_limit", "capgate_lane_queued"); n != 0 || err != nil {
		t.Errorf("lane series while the store fails: %d (%v), want 0", n, err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP capgate_lane_reads_failed_total Reads of the lane store for metrics that failed (the lane series then come from the local lanes, source local, or are absent).
# TYPE capgate_lane_reads_failed_total counter
capgate_lane_reads_failed_total 1
`), "capgate_lane_reads_failed_total"); err != nil {
		t.Error(err)
	}
}

// While the store fails, a gate with local lanes exports them instead,
// labelled source="local": this gateway's calls against the degraded
// limits, exactly what decides during the outage.
func TestLaneGaugesFromTheLocalLanesWhenTheStoreFails(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	store := &mock.LaneStore{Base: memory.New(nil)}
	store.CountFn = func(context.Context, []string, []int) error { return errors.New("connection refused") }
	cfg := settings.NewFixed(settings.Default(nil, settings.ModeShadow))
	gate, err := capgate.NewGate(store, cfg, nil, "task-1")
	if err != nil {
		t.Fatal(err)
	}
	gate.Local = memory.New(nil)
	if _, err := metrics.New(reg, metrics.WithLanes(gate, cfg)); err != nil {
		t.Fatal(err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP capgate_lane_limit Limit per lane in the config in force (api_heavy: the cluster limit); source local: the degraded limit the local lanes apply.
# TYPE capgate_lane_limit gauge
capgate_lane_limit{lane="api_heavy",source="local"} 4
capgate_lane_limit{lane="api_heavy_task",source="local"} 4
capgate_lane_limit{lane="es2_knn",source="local"} 3
capgate_lane_limit{lane="tier:core",source="local"} 4
capgate_lane_limit{lane="tier:early_access",source="local"} 3
capgate_lane_limit{lane="tier:preview",source="local"} 2
capgate_lane_limit{lane="tier:staff",source="local"} 4
# HELP capgate_lane_reads_failed_total Reads of the lane store for metrics that failed (the lane series then come from the local lanes, source local, or are absent).
# TYPE capgate_lane_reads_failed_total counter
capgate_lane_reads_failed_total 1
`), "capgate_lane_limit", "capgate_lane_reads_failed_total"); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(reg, "capgate_lane_in_flight"); n != 7 || err != nil {
		t.Errorf("local in-flight series: %d (%v), want 7", n, err)
	}
}

// TestPromlint lints every metric New can export, each with a sample.
func TestPromlint(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	cfg := settings.NewFixed(settings.Default(nil, settings.ModeShadow))
	gate, err := capgate.NewGate(memory.New(nil), cfg, nil, "task-1")
	if err != nil {
		t.Fatal(err)
	}
	m, err := metrics.New(reg, metrics.WithLanes(gate, cfg), metrics.WithBuildInfo("v1.2.3", "abc"),
		metrics.WithLogDropped(func() uint64 { return 0 }), metrics.WithConfigVersion(func() int64 { return 1 }),
		metrics.WithStoreUp(func(string) float64 { return 1 }, "lanes", "config"))
	if err != nil {
		t.Fatal(err)
	}
	gate.Observer = m
	gate.Admit(t.Context(), call("pam", "preview")).Release(t.Context())
	m.Request("heavy", 200)
	m.Upstream("light", 10*time.Millisecond)
	m.UpstreamError("connect")
	m.OversizeBody()
	m.BufferFull()
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	if err := testutil.GatherAndCompare(nonZero{reg}, strings.NewReader(`
# HELP capgate_build_info The capgate build running: always 1, labelled with its version and VCS revision.
# TYPE capgate_build_info gauge
capgate_build_info{revision="abc",version="v1.2.3"} 1
# HELP capgate_requests_total Requests the gateway answered, by status code and class (heavy: gated; light: proxied ungated; staff: capgate's own endpoints).
# TYPE capgate_requests_total counter
capgate_requests_total{class="heavy",code="200"} 1
# HELP capgate_upstream_errors_total Calls the upstream did not answer, by kind (timeout, connect, reset, other); clients that left are not counted.
# TYPE capgate_upstream_errors_total counter
capgate_upstream_errors_total{kind="connect"} 1
`), "capgate_build_info", "capgate_requests_total", "capgate_upstream_errors_total"); err != nil {
		t.Error(err)
	}
}
