package metrics_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/capgate/capgate/metrics"
)

func TestAdvisedLimits(t *testing.T) {
	reg := prometheus.NewRegistry()
	advised := map[string]int{}
	if _, err := metrics.New(reg, metrics.WithAdvisedLimits(func() map[string]int { return advised })); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, "capgate_lane_advised_limit"); n != 0 || err != nil {
		t.Errorf("no adaptive lane: %d series, %v; want none", n, err)
	}
	advised["es2_knn"] = 12
	want := `
# HELP capgate_lane_advised_limit Limit the adaptive control loop advises for the lane (applied in mode apply).
# TYPE capgate_lane_advised_limit gauge
capgate_lane_advised_limit{lane="es2_knn"} 12
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "capgate_lane_advised_limit"); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

func TestAdaptiveStepAges(t *testing.T) {
	reg := prometheus.NewRegistry()
	ages := map[string]float64{}
	if _, err := metrics.New(reg, metrics.WithAdaptiveStepAges(func() map[string]float64 { return ages })); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, "capgate_adaptive_last_step_age_seconds"); n != 0 || err != nil {
		t.Errorf("no adaptive lane: %d series, %v; want none", n, err)
	}
	ages["es2_knn"] = 1.5
	want := `
# HELP capgate_adaptive_last_step_age_seconds Seconds since the adaptive control loop last took a step of the lane, as this gateway last read its state.
# TYPE capgate_adaptive_last_step_age_seconds gauge
capgate_adaptive_last_step_age_seconds{lane="es2_knn"} 1.5
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "capgate_adaptive_last_step_age_seconds"); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}
