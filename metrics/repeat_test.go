package metrics_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/idempotency"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/metrics"
	"github.com/capgate/capgate/settings"
)

// A repeat is counted by its decision, joined or replayed.
func TestRepeatsCounted(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := settings.Default(nil, settings.ModeShadow)
	cfg.Idempotency.Mode = settings.IdempotencyKey
	gate, err := capgate.NewGate(memory.New(nil), settings.NewFixed(cfg), nil, "task-1")
	if err != nil {
		t.Fatal(err)
	}
	gate.Observer = m
	ctx := t.Context()
	rep := idempotency.New(gate)
	req := idempotency.RepeatRequest{ID: "id", Fingerprint: "fp", CID: "c1", Replay: true}
	first, err := rep.Repeat(ctx, req)
	if err != nil || first.Outcome != idempotency.RepeatFirst {
		t.Fatalf("first = %+v, %v", first, err)
	}
	first.Finish(ctx, []byte("answer"))
	rp, err := rep.Repeat(ctx, req)
	if err != nil || rp.Outcome != idempotency.RepeatReplayed {
		t.Fatalf("repeat = %+v, %v", rp, err)
	}
	idempotency.Repeated(ctx, gate, call("pam", "preview"), rp, nil).Release(ctx)
	// Every series starts at 0 (zeros): the replayed one alone is 1.
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range fams {
		if f.GetName() != "capgate_decisions_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			if s.GetCounter().GetValue() == 0 {
				continue
			}
			var labels []string
			for _, l := range s.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			got = append(got, fmt.Sprintf("%s %g", strings.Join(labels, ","), s.GetCounter().GetValue()))
		}
	}
	if want := []string{"decision=replayed,endpoint=$match,tier=preview 1"}; !slices.Equal(got, want) {
		t.Errorf("decisions_total other than 0: %q, want %q", got, want)
	}
}
