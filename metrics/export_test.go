package metrics

import "github.com/prometheus/client_golang/prometheus"

// WaitingGauge returns capgate_lane_waiting for lane.
func (m *Metrics) WaitingGauge(lane string) prometheus.Gauge {
	return m.waiting.WithLabelValues(lane)
}
