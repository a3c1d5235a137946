package metrics_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/metrics"
)

// A repeat is counted by its decision, joined or replayed.
func TestRepeatsCounted(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := capgate.DefaultConfig(capgate.ModeShadow)
	cfg.Idempotency.Mode = capgate.IdempotencyKey
	gate, err := capgate.NewGate(memory.New(nil), capgate.NewFixedConfig(cfg), nil, "task-1")
	if err != nil {
		t.Fatal(err)
	}
	gate.Observer = m
	ctx := t.Context()
	req := capgate.RepeatRequest{ID: "id", Fingerprint: "fp", CID: "c1", Replay: true}
	first, err := gate.Repeat(ctx, req)
	if err != nil || first.Outcome != capgate.RepeatFirst {
		t.Fatalf("first = %+v, %v", first, err)
	}
	first.Finish(ctx, []byte("answer"))
	rp, err := gate.Repeat(ctx, req)
	if err != nil || rp.Outcome != capgate.RepeatReplayed {
		t.Fatalf("repeat = %+v, %v", rp, err)
	}
	gate.Repeated(ctx, call("pam", capgate.TierPreview), rp, nil).Release(ctx)
	want := `
# HELP capgate_decisions_total Gated calls by decision, endpoint and tier.
# TYPE capgate_decisions_total counter
capgate_decisions_total{decision="replayed",endpoint="$match",tier="preview"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "capgate_decisions_total"); err != nil {
		t.Error(err)
	}
}
