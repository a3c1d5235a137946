package policy_test

import (
	"math"
	"strings"
	"testing"

	"github.com/capgate/capgate/policy"
)

// seatsPolicy is base with the route's cost in the cluster lane a seat per
// 16 of n, at most 4.
var seatsPolicy = strings.Replace(base, "      flag: {query_truthy: flag}\n",
	"      flag: {query_truthy: flag}\n    seats: {cluster: {field: n, per: 16, max: 4}}\n", 1)

// fieldsWithN returns the fields of route r with its int field n set.
func fieldsWithN(t *testing.T, r *policy.Route, n int) *policy.Fields {
	t.Helper()
	f := policy.NewFields(r)
	if !f.SetInt(r.Field("n"), n) {
		t.Fatal("the route has no int field n")
	}
	return &f
}

// Why: ceil(n / per) was (n + per - 1) / per, which wraps negative for n
// near 2^63 and became 1 seat: a call of 2^63-1 inputs took 1 seat beside a
// call that should have been refused. The arithmetic saturates.
func TestSeatsSaturateAtInt64Edges(t *testing.T) {
	p, err := policy.Parse("seats.yaml", []byte(seatsPolicy))
	if err != nil {
		t.Fatal(err)
	}
	r := p.Route("a")
	for _, tc := range []struct {
		n, want int
	}{
		{0, 1}, {1, 1}, {16, 1}, {17, 2}, {48, 3}, {49, 4}, {1000, 4},
		{math.MaxInt - 14, 4}, {math.MaxInt - 1, 4}, {math.MaxInt, 4},
		{-1, 1}, {math.MinInt, 1},
	} {
		if got := r.SeatsIn("cluster", fieldsWithN(t, r, tc.n)); got != tc.want {
			t.Errorf("n %d: %d seats; want %d", tc.n, got, tc.want)
		}
	}
	// Without a cap of its own the count is the saturated quotient.
	s := policy.Seats{Field: "n", Per: 1}
	if got := s.Of(fieldsWithN(t, r, math.MaxInt)); got != math.MaxInt {
		t.Errorf("per 1, no max, n MaxInt: %d seats; want MaxInt", got)
	}
}

// Why (the traps of a hand-built Seats): its field index was set only by
// Parse, so one built by hand read the route's field 0 whatever Field
// named; Max 0 capped every call at 0 seats; Per 0 divided by zero. The
// zero values are now documented and useful: Field is found by name, Per
// below 1 is 1, Max below 1 is no cap of its own.
func TestHandBuiltSeats(t *testing.T) {
	p, err := policy.Parse("base.yaml", []byte(base))
	if err != nil {
		t.Fatal(err)
	}
	r := p.Route("a") // fields: model (0), n (1), flag (2)
	if r.Field("n") != 1 {
		t.Fatalf("n is field %d; the test wants it not the first", r.Field("n"))
	}
	f := fieldsWithN(t, r, 5)
	for _, tc := range []struct {
		name string
		s    policy.Seats
		want int
	}{
		{"field by name", policy.Seats{Field: "n", Per: 1, Max: 8}, 5},
		{"max 0: no cap of its own", policy.Seats{Field: "n", Per: 1}, 5},
		{"per 0: one per unit", policy.Seats{Field: "n", Max: 8}, 5},
		{"per 2", policy.Seats{Field: "n", Per: 2, Max: 8}, 3},
		{"max 2", policy.Seats{Field: "n", Per: 1, Max: 2}, 2},
		{"a field the route lacks", policy.Seats{Field: "nope", Per: 1, Max: 8}, 1},
		{"zero value", policy.Seats{}, 1},
		{"const", policy.Seats{Const: 3}, 3},
	} {
		got := func() (n int) {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("%s: panicked: %v", tc.name, p)
				}
			}()
			return tc.s.Of(f)
		}()
		if got != tc.want {
			t.Errorf("%s: %+v.Of(n=5) = %d; want %d", tc.name, tc.s, got, tc.want)
		}
	}
	// No fields at all (a call of no route): one seat.
	if got := (policy.Seats{Field: "n", Per: 1, Max: 8}).Of(nil); got != 1 {
		t.Errorf("Of(nil) = %d; want 1", got)
	}
}

// Why: NewEvaluator(nil, "") was accepted and panicked at the first call.
// An evaluator of no policy (and the zero Evaluator) is documented as one of
// no routes: nothing is a heavy call.
func TestEvaluatorOfNoPolicy(t *testing.T) {
	req := policy.Request{Method: "POST", Path: "/a", Body: []byte(`{}`)}
	for name, ev := range map[string]*policy.Evaluator{"NewEvaluator(nil)": policy.NewEvaluator(nil, ""), "zero": {}} {
		var f policy.Fields
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("%s: panicked: %v", name, p)
				}
			}()
			if r := ev.Evaluate(&req, &f); r != nil || f.Route() != nil {
				t.Errorf("%s: Evaluate = %v; want no route", name, r)
			}
			if ev.MayMatch(&req) || ev.ReadsBody(&req) {
				t.Errorf("%s: MayMatch or ReadsBody true; want false", name)
			}
			if ev.Policy() != nil {
				t.Errorf("%s: Policy() = %v; want nil", name, ev.Policy())
			}
		}()
	}
}
