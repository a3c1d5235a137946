package capgate_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/capgate/capgate"
)

// TestUsageOnTheLine checks that what SetUsage records is the line's
// "usage", that a negative one is ignored, and that a call which reported
// none has no "usage" at all (not 0).
func TestUsageOnTheLine(t *testing.T) {
	g := benchGate(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		set  []int64
		want any // nil: no usage key
	}{
		{"none", nil, nil},
		{"zero", []int64{0}, float64(0)},
		{"tokens", []int64{2000}, float64(2000)},
		{"negative ignored", []int64{-1}, nil},
		{"the last one", []int64{5, 7, -3}, float64(7)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := g.Admit(ctx, benchCall("alice"))
			defer a.Release(ctx)
			for _, n := range tc.set {
				a.SetUsage(n)
			}
			n, ok := a.Usage()
			if ok != (tc.want != nil) || (ok && float64(n) != tc.want) {
				t.Errorf("Usage() = %d, %v; want %v", n, ok, tc.want)
			}
			rec := a.Record()
			line := rec.AppendJSON(nil)
			var m map[string]any
			if err := json.Unmarshal(line, &m); err != nil {
				t.Fatalf("not JSON: %v: %s", err, line)
			}
			if got, has := m["usage"]; has != (tc.want != nil) || got != tc.want {
				t.Errorf("usage %v (present %v), want %v: %s", got, has, tc.want, line)
			}
		})
	}
	var nilAdm *capgate.Admission
	nilAdm.SetUsage(3) // no panic
	if _, ok := nilAdm.Usage(); ok {
		t.Error("a nil admission has usage")
	}
}
