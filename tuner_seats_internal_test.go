package capgate

import (
	"testing"
	"time"

	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
	"github.com/capgate/capgate/tune"
)

// The adaptive limits work in seats: a call of a route without a units
// field is as many units of work as it takes seats in the lane (so the
// step's time per unit is per seat), beside the lane's count in seats; a
// route's units field, where it has one (OCL's rows), still gives them.
func TestTunerObservesSeats(t *testing.T) {
	p, err := policy.Parse("seats.yaml", []byte(`version: 1
name: seats
routes:
  - name: job
    method: POST
    path: {exact: /job}
    fields:
      items: {body_array_len: items}
    seats:
      pool: {field: items, per: 1, max: 8}
identity: {resolver: header, scheme: Bearer, default_tier: all}
lanes:
  - {name: pool, scope: cluster, routes: [job], limit: 8}
names:
  header_prefix: Capgate-
  refusal: {detail: "Busy: retry in {retry_after} seconds.", error_code: busy}
  log_event: capgate_call
`))
	if err != nil {
		t.Fatal(err)
	}
	cfg := settings.Default(p, settings.ModeShadow)
	cfg.Adaptive = cfg.Adaptive.With("pool", tune.LaneSettings{Mode: tune.Apply, Min: 1, Max: 10})
	r := p.Route("job")
	f := policy.NewFields(r)
	f.SetInt(r.Field("items"), 3)
	call := Call{Route: r, Fields: f, UserID: "ann", Tier: "all"}
	lanes := Keys{}.AppendPlan(nil, cfg, &call, 0)
	a := &Admission{cfg: cfg, out: Outcome{Call: call, Counts: []int{5}}, plan: plan{lanes: lanes}} // 2 seats before it, its 3
	tn := &tuner{}
	tn.observe(a, 600*time.Millisecond)
	w := tn.lane("pool").gather.Window()
	if w.Calls != 1 || w.SumMicros != 200_000 || w.MaxInFlight != 5 {
		t.Errorf("window %+v; want 1 call of 600 ms over 3 seats (200 ms a seat), 5 seats in flight", w)
	}

	// OCL: units are the rows, whatever the seats.
	ocl := settings.Default(nil, settings.ModeShadow)
	ocl.Adaptive = ocl.Adaptive.With("api_heavy", tune.LaneSettings{Mode: tune.Apply, Min: 1, Max: 10})
	m := policy.OCL().Route("match")
	mf := policy.NewFields(m)
	mf.SetBool(m.Field("reranker"), true)
	mf.SetInt(m.Field("rows"), 10)
	oc := Call{Route: m, Fields: mf, UserID: "ann", Tier: "core"}
	ol := Keys{TaskID: "t"}.AppendPlan(nil, ocl, &oc, policy.OCL().TierIndex("core"))
	b := &Admission{cfg: ocl, out: Outcome{Call: oc, Counts: make([]int, len(ol))}, plan: plan{lanes: ol}}
	tn.observe(b, time.Second)
	if w := tn.lane("api_heavy").gather.Window(); w.Calls != 1 || w.SumMicros != 100_000 {
		t.Errorf("OCL window %+v; want 1 call of 1 s over 10 rows", w)
	}
}
