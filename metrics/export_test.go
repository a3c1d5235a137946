package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// WaitingGauge returns capgate_lane_waiting for lane.
func (m *Metrics) WaitingGauge(lane string) prometheus.Gauge {
	return m.waiting.WithLabelValues(lane)
}

// SetLanesClock sets the clock the lane read's cache is aged by.
func (m *Metrics) SetLanesClock(now func() time.Time) { m.lanes.now = now }
