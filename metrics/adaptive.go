package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// WithAdvisedLimits exports advised() as capgate_lane_advised_limit{lane}:
// the limit the adaptive control loop advises for each adaptive lane that
// has one (adaptive.Runner.Advised), whether it is applied or not. A
// lane without an adaptive setting has no series.
func WithAdvisedLimits(advised func() map[string]int) Option {
	return func(m *Metrics) {
		m.funcs = append(m.funcs, &advisedCollector{
			desc: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "lane", "advised_limit"),
				"Limit the adaptive control loop advises for the lane (applied in mode apply).", []string{"lane"}, nil),
			advised: advised,
		})
	}
}

type advisedCollector struct {
	desc    *prometheus.Desc
	advised func() map[string]int
}

func (c *advisedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *advisedCollector) Collect(ch chan<- prometheus.Metric) {
	for lane, l := range c.advised() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(l), lane)
	}
}

// WithAdaptiveStepAges exports ages() as
// capgate_adaptive_last_step_age_seconds{lane}: for each adaptive lane,
// how long ago the cluster's control loop last took a step, as this
// gateway last read it (adaptive.Runner.StepAges). About a second
// while the loop runs; a value that keeps growing is a loop that does not
// step (no gateway runs it, the store fails) or a gateway that no longer
// reads its state.
func WithAdaptiveStepAges(ages func() map[string]float64) Option {
	return func(m *Metrics) {
		m.funcs = append(m.funcs, &ageCollector{
			desc: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "adaptive", "last_step_age_seconds"),
				"Seconds since the adaptive control loop last took a step of the lane, as this gateway last read its state.", []string{"lane"}, nil),
			ages: ages,
		})
	}
}

type ageCollector struct {
	desc *prometheus.Desc
	ages func() map[string]float64
}

func (c *ageCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *ageCollector) Collect(ch chan<- prometheus.Metric) {
	for lane, s := range c.ages() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, s, lane)
	}
}
