package capgate

import (
	"slices"
	"testing"

	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
)

// lanes returns the lanes of a semantic $match under the OCL policy, in
// plan order, with the given limits.
func lanes(limits ...int) []Lane {
	names := []string{"api_heavy", "api_heavy_task", "es2_knn", "tier", "user"}
	out := make([]Lane, len(limits))
	for i, l := range limits {
		out[i] = oclLane(names[i], l)
	}
	return out
}

// oclLane returns the OCL policy's lane name with limit.
func oclLane(name string, limit int) Lane {
	return Lane{Name: LaneName(name), Key: name, Limit: limit, Spec: policy.OCL().Lane(name)}
}

func TestFullScopeRetryAfter(t *testing.T) {
	ra := settings.RetryAfter{Base: 5, Max: 30, Paused: 120}
	cases := []struct {
		name      string
		limits    []int
		before    []int
		wantFull  []int
		wantScope int
		wantRetry int
	}{
		{"none full", []int{3, 2, 3, 3, 2}, []int{0, 0, 0, 0, 0}, nil, -1, 0},
		{"user full", []int{3, 2, 3, 2, 1}, []int{1, 1, 1, 1, 1}, []int{4}, 4, 5},
		{"paused wins over first full", []int{1, 5, 3, 0, 1}, []int{1, 0, 0, 0, 0}, []int{0, 3}, 3, 120},
		{"calls ahead grow", []int{9, 10, 10, 10, 10}, []int{11, 11, 11, 11, 11}, []int{0, 1, 2, 3, 4}, 0, 15},
		{"capped at max", []int{1, 10, 10, 10, 10}, []int{20, 0, 0, 0, 0}, []int{0}, 0, 30},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ls := lanes(c.limits...)
			full := fullLanes(ls, c.before)
			var got []int
			for i := range ls {
				if full.has(i) {
					got = append(got, i)
				}
			}
			if !slices.Equal(got, c.wantFull) {
				t.Fatalf("full = %v, want %v", got, c.wantFull)
			}
			if s := scopeOf(ls, full); s != c.wantScope {
				t.Fatalf("scope = %d, want %d", s, c.wantScope)
			}
			if !full.empty() {
				if r := retryAfterSeconds(ra, ls, c.before, full); r != c.wantRetry {
					t.Fatalf("retry after = %d, want %d", r, c.wantRetry)
				}
			}
		})
	}
}

func TestSuggestedConcurrency(t *testing.T) {
	cases := []struct {
		name   string
		limits []int
		counts []int
		want   int
		ok     bool
	}{
		{"no lanes", nil, nil, 0, false},
		{"a paused lane", []int{3, 2, 3, 0, 1}, []int{1, 1, 1, 1, 1}, 0, true},
		{"counts unknown: per-user limit", []int{3, 2, 3, 4, 3}, nil, 3, true},
		{"alone", []int{3, 2, 3, 4, 3}, []int{1, 1, 1, 1, 1}, 3, true},
		{"task lane ignored", []int{3, 1, 3, 4, 3}, []int{1, 5, 1, 1, 1}, 3, true},
		{"over the limit: never below 1", []int{3, 2, 3, 2, 1}, []int{4, 1, 1, 1, 1}, 1, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var ls []Lane
			if c.limits != nil {
				ls = lanes(c.limits...)
			}
			got, ok := suggestedConcurrency(ls, c.counts)
			if got != c.want || ok != c.ok {
				t.Fatalf("suggested = %d %v, want %d %v", got, ok, c.want, c.ok)
			}
		})
	}
}

// TestDecide: the mode in force reaches the decision as a value. A full
// lane refuses an enforced call and shadow-refuses (runs) any other; a
// store answer that contradicts the request it was given (a forced acquire
// not taken, an unforced one taken past a full lane) is an error, so the
// call is unavailable, never refused for the store's fault.
func TestDecide(t *testing.T) {
	tests := []struct {
		enforced bool
		full     laneSet
		taken    bool
		want     Decision
		wantErr  bool
	}{
		{true, 0, true, DecisionAdmitted, false},
		{false, 0, true, DecisionAdmitted, false},
		{true, 0, false, DecisionNone, true},
		{false, 0, false, DecisionNone, true},
		{false, 1 << 2, true, DecisionShadowRefused, false},
		{true, 1 << 2, false, DecisionRefused, false},
		{false, 1 << 2, false, DecisionNone, true},
		{true, 1 << 2, true, DecisionNone, true},
	}
	for _, tt := range tests {
		got, err := decide(tt.enforced, tt.full, tt.taken)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("decide(%v, %b, %v) = %q, %v; want %q, error %v", tt.enforced, tt.full, tt.taken, got, err, tt.want, tt.wantErr)
		}
	}
}
