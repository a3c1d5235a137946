package capgate_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/policy"
)

// TestRecordFollowsTheAdmission checks the record of a shadow-refused call
// of five lanes field by field against the admission, and that records
// taken at different times share nothing: their values live in one
// allocation per record.
func TestRecordFollowsTheAdmission(t *testing.T) {
	g := benchGate(t)
	ctx := context.Background()
	call := benchCall("alice")
	var a *capgate.Admission
	for range 4 { // the core per-user limit is 3: the fourth finds the user lane full
		a = g.Admit(ctx, call)
		defer a.Release(ctx)
	}
	if a.Outcome().Decision != capgate.DecisionShadowRefused {
		t.Fatalf("decision %q, want shadow_refused", a.Outcome().Decision)
	}
	lanes, counts := a.Outcome().Lanes, a.Outcome().Counts
	if len(lanes) != 5 || len(counts) != 5 {
		t.Fatalf("%d lanes, %d counts; want 5", len(lanes), len(counts))
	}
	rec := a.Record()
	line := rec.AppendJSON(nil)
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		t.Fatalf("not JSON: %v: %s", err, line)
	}
	var full []string
	for i, l := range lanes {
		in, limit := capgate.LogKeys(policy.OCL(), l.Name)
		if m[in] != float64(counts[i]) || m[limit] != float64(l.Limit) {
			t.Errorf("lane %s: %s %v, %s %v; want %d and %d", l.Name, in, m[in], limit, m[limit], counts[i], l.Limit)
		}
		if counts[i]-1 >= l.Limit { // taken (shadow), so the count before is one less
			full = append(full, string(l.Name))
		}
	}
	if !slices.Equal(rec.Full, full) {
		t.Errorf("full %v, want %v", rec.Full, full)
	}
	n := a.Outcome().Suggested
	s := a.Outcome().RetryAfter
	if rec.Suggested == nil || *rec.Suggested != n || rec.RetryAfter == nil || *rec.RetryAfter != s || s <= 0 {
		t.Errorf("suggested %v, retry_after %v; want %d and %d", rec.Suggested, rec.RetryAfter, n, s)
	}
	if rec.HeldMS != nil {
		t.Errorf("held_ms %d before release", *rec.HeldMS)
	}

	a.Release(ctx)
	after := a.Record()
	if after.HeldMS == nil || rec.HeldMS != nil {
		t.Errorf("held_ms %v after release, %v in the earlier record; want set, nil", after.HeldMS, rec.HeldMS)
	}
	after.Lanes[0].Limit, *after.Suggested = 99, 99
	after.Full[0] = "x"
	if rec.Lanes[0].Limit != lanes[0].Limit || *rec.Suggested != n || rec.Full[0] != full[0] {
		t.Errorf("changing one record changed another: limit %d, suggested %d, full %v", rec.Lanes[0].Limit, *rec.Suggested, rec.Full)
	}
}

func TestRecordAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	g := benchGate(t)
	ctx := context.Background()
	a := g.Admit(ctx, benchCall("alice"))
	a.Release(ctx)
	if n := testing.AllocsPerRun(100, func() { _ = a.Record() }); n > 1 {
		t.Errorf("Record allocates %v times; want 1 (its values)", n)
	}
}
