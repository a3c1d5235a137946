package metrics_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/capgate/capgate"
	capgatehttp "github.com/capgate/capgate/http"
	"github.com/capgate/capgate/identity"
	"github.com/capgate/capgate/lanetest"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/metrics"
	"github.com/capgate/capgate/mock"
	"github.com/capgate/capgate/settings"

	dto "github.com/prometheus/client_model/go"
)

// nonZero gathers from g without the counter series still at 0, which
// New exports from the start (TestEveryFamilyFromTheStart): the
// comparisons below check what the events counted.
type nonZero struct{ g prometheus.Gatherer }

func (n nonZero) Gather() ([]*dto.MetricFamily, error) {
	fams, err := n.g.Gather()
	var out []*dto.MetricFamily
	for _, f := range fams {
		var kept []*dto.Metric
		for _, m := range f.GetMetric() {
			if c := m.GetCounter(); c != nil && c.GetValue() == 0 {
				continue
			}
			kept = append(kept, m)
		}
		if len(kept) > 0 {
			f.Metric = kept
			out = append(out, f)
		}
	}
	return out, err
}

// Every labelled counter and gauge family is exported from the start,
// its known series at 0, so dashboards and alerts have a series before
// the first event: the store's errors and skips by op, the upstream's
// errors by kind, the decisions (degraded too) by decision, the waiting
// gauge by lane, requests by class.
func TestEveryFamilyFromTheStart(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	if _, err := metrics.New(reg); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]int{
		"capgate_store_errors_total":       3,  // acquire, renew, release
		"capgate_store_skipped_total":      3,  // the same
		"capgate_upstream_errors_total":    4,  // timeout, connect, reset, other
		"capgate_degraded_decisions_total": 4,  // every decision
		"capgate_decisions_total":          48, // decision (the four, joined, replayed) × endpoint × tier
		"capgate_requests_total":           3,  // code 200 of heavy, light, staff
		"capgate_lane_waiting":             7,  // api_heavy, api_heavy_task, es2_knn, every tier
	} {
		if n, err := testutil.GatherAndCount(reg, name); n != want || err != nil {
			t.Errorf("%s at start: %d series (%v), want %d", name, n, err, want)
		}
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP capgate_upstream_errors_total Calls the upstream did not answer, by kind (timeout, connect, reset, other); clients that left are not counted.
# TYPE capgate_upstream_errors_total counter
capgate_upstream_errors_total{kind="connect"} 0
capgate_upstream_errors_total{kind="other"} 0
capgate_upstream_errors_total{kind="reset"} 0
capgate_upstream_errors_total{kind="timeout"} 0
`), "capgate_upstream_errors_total"); err != nil {
		t.Error(err)
	}
}

func call(user string, tier string) capgate.Call {
	return lanetest.OCLCall("match", 2, true, false, user, tier)
}

func TestObserver(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	var dropped atomic.Uint64
	dropped.Store(7)
	m, err := metrics.New(reg, metrics.WithLogDropped(dropped.Load), metrics.WithConfigVersion(func() int64 { return 12 }))
	if err != nil {
		t.Fatal(err)
	}
	failing := errors.New("connection refused")
	store := &mock.LaneStore{Base: memory.New(nil)}
	gate, err := capgate.NewGate(store, settings.NewFixed(settings.Default(nil, settings.ModeShadow)), nil, "task-1")
	if err != nil {
		t.Fatal(err)
	}
	gate.Observer = m
	ctx := t.Context()

	a1 := gate.Admit(ctx, call("pam", "preview"))
	a2 := gate.Admit(ctx, call("pam", "preview"))
	a2.Release(ctx)
	a1.Release(ctx)
	store.AcquireFn = func(context.Context, capgate.AcquireRequest, []int) (bool, error) { return false, failing }
	gate.Admit(ctx, call("cora", "core")).Release(ctx) // fails: opens the skip window
	gate.Admit(ctx, call("cora", "core")).Release(ctx) // skipped
	m.OversizeBody()

	want := `
# HELP capgate_decisions_total Gated calls by decision, endpoint and tier.
# TYPE capgate_decisions_total counter
capgate_decisions_total{decision="admitted",endpoint="$match",tier="preview"} 1
capgate_decisions_total{decision="shadow-refused",endpoint="$match",tier="preview"} 1
capgate_decisions_total{decision="unavailable",endpoint="$match",tier="core"} 2
# HELP capgate_store_errors_total Lane store operations that failed, by operation.
# TYPE capgate_store_errors_total counter
capgate_store_errors_total{op="acquire"} 1
# HELP capgate_store_skipped_total Lane store operations skipped because the store failed recently, by operation.
# TYPE capgate_store_skipped_total counter
capgate_store_skipped_total{op="acquire"} 1
# HELP capgate_log_lines_dropped_total Log lines dropped because the log queue was full.
# TYPE capgate_log_lines_dropped_total counter
capgate_log_lines_dropped_total 7
# HELP capgate_config_version Version of the runtime capacity config in force (0: the defaults).
# TYPE capgate_config_version gauge
capgate_config_version 12
# HELP capgate_oversize_bodies_total Heavy-path calls gated as bulk because their body exceeded --max-body-bytes.
# TYPE capgate_oversize_bodies_total counter
capgate_oversize_bodies_total 1
`
	if err := testutil.GatherAndCompare(nonZero{reg}, strings.NewReader(want),
		"capgate_decisions_total", "capgate_store_errors_total", "capgate_store_skipped_total",
		"capgate_log_lines_dropped_total", "capgate_config_version", "capgate_oversize_bodies_total"); err != nil {
		t.Error(err)
	}

	if n, err := testutil.GatherAndCount(reg, "capgate_held_seconds"); n != 1 || err != nil {
		t.Errorf("held_seconds series: %d, %v", n, err)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}

	// Registering twice on one registry fails.
	if _, err := metrics.New(reg); err == nil {
		t.Error("a second registration succeeded")
	}
}

func TestMetricsThroughTheGateway(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "[]")
	}))
	defer api.Close()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	gate, err := capgate.NewGate(memory.New(nil), settings.NewFixed(settings.Default(nil, settings.ModeShadow)), nil, "task-1")
	if err != nil {
		t.Fatal(err)
	}
	released := make(chan struct{}, 4)
	gate.Observer = signalling{m, released}
	ids, err := identity.NewTokens([]identity.TokenEntry{{Token: "t", Username: "pam"}})
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(api.URL)
	gw, err := capgatehttp.NewGateway(capgatehttp.GatewayConfig{
		Upstream: u, Gate: gate, Identify: ids,
		Classifier:    &capgatehttp.Classifier{MaxBodyBytes: 64, Oversize: m.OversizeBody},
		Metrics:       promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
		PublicMetrics: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(gw)
	defer front.Close()

	post := func(body string) {
		req, _ := http.NewRequestWithContext(t.Context(), "POST", front.URL+"/concepts/$match/?reranker=1", strings.NewReader(body))
		req.Header.Set("Authorization", "Token t")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	post(`{"rows":[{}]}`)
	post(`{"rows":[{}],"pad":"` + strings.Repeat("x", 100) + `"}`) // oversize: gated as bulk
	<-released                                                     // the gated calls' metrics are in
	<-released

	resp, err := http.Get(front.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`capgate_decisions_total{decision="admitted",endpoint="$match",tier="preview"} 2`,
		`capgate_oversize_bodies_total 1`,
		`capgate_held_seconds_count 2`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// signalling tells the test when the observer has seen a release.
type signalling struct {
	*metrics.Metrics
	released chan<- struct{}
}

func (s signalling) Released(a *capgate.Admission) {
	s.Metrics.Released(a)
	s.released <- struct{}{}
}

func TestDegradedDecisionsCounted(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	store := &mock.LaneStore{Base: memory.New(nil)}
	store.AcquireFn = func(context.Context, capgate.AcquireRequest, []int) (bool, error) {
		return false, errors.New("connection refused")
	}
	gate, err := capgate.NewGate(store, settings.NewFixed(settings.Default(nil, settings.ModeShadow)), nil, "task-1")
	if err != nil {
		t.Fatal(err)
	}
	gate.Local, gate.Observer = memory.New(nil), m
	ctx := t.Context()
	gate.Admit(ctx, call("pam", "preview")).Release(ctx)
	want := `
# HELP capgate_degraded_decisions_total Gated calls decided by this gateway's local lanes while the lane store was unavailable, by decision.
# TYPE capgate_degraded_decisions_total counter
capgate_degraded_decisions_total{decision="unavailable"} 1
`
	if err := testutil.GatherAndCompare(nonZero{reg}, strings.NewReader(want), "capgate_degraded_decisions_total"); err != nil {
		t.Error(err)
	}
}

// TestDeclarations checks that New registers each kind of metric it
// declares (counter, counter vec, gauge vec, histogram) under the namespace
// and its name: Unregister finds a collector by those. TestObserver checks
// the help and labels in the exposition.
func TestDeclarations(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := metrics.New(reg); err != nil {
		t.Fatal(err)
	}
	for _, c := range []prometheus.Collector{
		prometheus.NewCounter(prometheus.CounterOpts{Namespace: "capgate", Name: "leases_lost_total",
			Help: "Calls whose leases expired while they ran."}),
		prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "capgate", Name: "decisions_total",
			Help: "Gated calls by decision, endpoint and tier."}, []string{"decision", "endpoint", "tier"}),
		prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "capgate", Name: "lane_waiting",
			Help: "Calls of this gateway waiting for a slot, per lane they wait on."}, []string{"lane"}),
		prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "capgate", Name: "wait_seconds",
			Help:    "How long calls waited for a slot (those that waited), however the wait ended.",
			Buckets: metrics.WaitBuckets}),
	} {
		if !reg.Unregister(c) {
			d := make(chan *prometheus.Desc, 1)
			c.Describe(d)
			t.Errorf("New registered nothing described as %v", <-d)
		}
	}
}
