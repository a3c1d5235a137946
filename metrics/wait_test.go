package metrics_test

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/metrics"
	"github.com/capgate/capgate/settings"
)

// TestWaiting: a call that waits shows in capgate_lane_waiting while it
// waits, and its wait in capgate_wait_seconds.
func TestWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewPedanticRegistry()
		m, err := metrics.New(reg)
		if err != nil {
			t.Fatal(err)
		}
		cfg := settings.Default(nil, settings.ModeEnforce)
		cfg.EnforceFor = settings.EnforceAll
		gate, err := capgate.NewGate(memory.New(nil), settings.NewFixed(cfg), nil, "task-1")
		if err != nil {
			t.Fatal(err)
		}
		gate.Observer = m
		first := gate.Admit(t.Context(), call("pam", "preview"))
		done := make(chan *capgate.Admission)
		go func() { done <- gate.Admit(t.Context(), call("pam", "preview")) }()
		synctest.Wait()
		if got := testutil.ToFloat64(m.WaitingGauge("api_heavy")); got != 1 {
			t.Errorf("capgate_lane_waiting{lane=api_heavy} while waiting = %v, want 1", got)
		}
		time.Sleep(2 * time.Second) // the bubble's clock
		first.Release(t.Context())
		second := <-done
		second.Release(t.Context())
		if got := testutil.ToFloat64(m.WaitingGauge("api_heavy")); got != 0 {
			t.Errorf("capgate_lane_waiting{lane=api_heavy} after = %v, want 0", got)
		}
		want := `
# HELP capgate_wait_seconds How long calls waited for a slot (those that waited), however the wait ended.
# TYPE capgate_wait_seconds histogram
capgate_wait_seconds_bucket{le="0.01"} 0
capgate_wait_seconds_bucket{le="0.05"} 0
capgate_wait_seconds_bucket{le="0.1"} 0
capgate_wait_seconds_bucket{le="0.25"} 0
capgate_wait_seconds_bucket{le="0.5"} 0
capgate_wait_seconds_bucket{le="1"} 0
capgate_wait_seconds_bucket{le="2"} 1
capgate_wait_seconds_bucket{le="5"} 1
capgate_wait_seconds_bucket{le="10"} 1
capgate_wait_seconds_bucket{le="20"} 1
capgate_wait_seconds_bucket{le="30"} 1
capgate_wait_seconds_bucket{le="60"} 1
capgate_wait_seconds_bucket{le="120"} 1
capgate_wait_seconds_bucket{le="300"} 1
capgate_wait_seconds_bucket{le="+Inf"} 1
capgate_wait_seconds_sum 2
capgate_wait_seconds_count 1
`
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "capgate_wait_seconds"); err != nil {
			t.Error(err)
		}
	})
}
