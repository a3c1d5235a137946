package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// WithAdvisedLimits exports advised() as capgate_lane_advised_limit{lane}:
// the limit the adaptive control loop advises for each adaptive lane that
// has one (capgate.Gate.AdvisedLimits), whether it is applied or not. A
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
