package capgate

import (
	"math"
	"testing"
	"time"

	"github.com/capgate/capgate/settings"
)

func TestAdaptiveRetryAfter(t *testing.T) {
	ra := settings.RetryAfter{Policy: settings.PolicyAdaptive, Base: 5, Max: 30, Paused: 120}
	const ms = time.Millisecond
	cases := []struct {
		name      string
		limits    []int
		before    []int
		holds     []time.Duration
		wantRetry int
		wantSpace time.Duration // the scope lane's spacing
	}{
		// No history: one slot frees every base seconds, so the answer is
		// the fixed formula's.
		{"no history is the fixed formula", []int{3, 2, 3, 4, 3}, []int{2, 2, 2, 2, 1}, nil, 5, 5 * time.Second},
		{"no history, calls ahead", []int{9, 2, 9, 9, 9}, []int{3, 4, 3, 3, 1}, nil, 15, 5 * time.Second},
		// A slot of a 2-slot lane frees every 650 ms: one call ahead waits
		// under a second, which rounds up to 1.
		{"steady history", []int{3, 2, 3, 4, 3}, []int{2, 2, 2, 2, 1}, []time.Duration{1300 * ms, 1300 * ms, 1300 * ms, 1300 * ms, 1300 * ms}, 1, 650 * ms},
		{"steady history, calls ahead", []int{9, 2, 9, 9, 9}, []int{2, 6, 2, 2, 1}, []time.Duration{0, 1300 * ms, 0, 0, 0}, 4, 650 * ms},
		{"rounds up", []int{9, 2, 9, 9, 9}, []int{2, 3, 2, 2, 1}, []time.Duration{0, 2001 * ms, 0, 0, 0}, 3, 1000500 * time.Microsecond},
		{"exact seconds stay", []int{9, 2, 9, 9, 9}, []int{2, 3, 2, 2, 1}, []time.Duration{0, 2000 * ms, 0, 0, 0}, 2, 1000 * ms},
		{"at least 1", []int{9, 4, 9, 9, 9}, []int{1, 4, 1, 1, 1}, []time.Duration{0, 40 * ms, 0, 0, 0}, 1, 10 * ms},
		{"capped at max", []int{9, 1, 9, 9, 9}, []int{1, 50, 1, 1, 1}, []time.Duration{0, 2 * time.Second, 0, 0, 0}, 30, 2 * time.Second},
		{"huge numbers saturate at max", []int{9, 1, 9, 9, 9}, []int{1, 100000, 1, 1, 1}, []time.Duration{0, time.Duration(math.MaxInt64 / 2), 0, 0, 0}, 30, time.Duration(math.MaxInt64 / 2)},
		{"paused keeps paused", []int{3, 2, 3, 0, 3}, []int{2, 2, 0, 0, 0}, []time.Duration{time.Second, time.Second, time.Second, time.Second, time.Second}, 120, 0},
		// The longest wait over the full lanes wins; the scope is still the
		// first full lane.
		{"slowest full lane", []int{2, 2, 9, 9, 1}, []int{2, 2, 0, 0, 1}, []time.Duration{1 * time.Second, 1 * time.Second, 0, 0, 4 * time.Second}, 4, 500 * ms},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ls := lanes(c.limits...)
			full := fullLanes(ls, c.before)
			scope := scopeOf(ls, full)
			holds := c.holds
			if holds == nil {
				holds = make([]time.Duration, len(ls))
			}
			if got := adaptiveRetryAfter(ra, ls, c.before, full, holds); got != c.wantRetry {
				t.Errorf("retry after = %d, want %d", got, c.wantRetry)
			}
			if got := spacing(ra, ls[scope], holds[scope]); got != c.wantSpace {
				t.Errorf("spacing = %v, want %v", got, c.wantSpace)
			}
		})
	}
}

func TestRefusalHintsFixedIsTheSeedFormula(t *testing.T) {
	ra := settings.RetryAfter{Policy: settings.PolicyFixed, Base: 5, Max: 30, Paused: 120}
	var h holdTimes
	h.observe(lanes(9, 9, 9, 9, 9), 100*time.Millisecond) // history the fixed policy ignores
	for _, c := range []struct {
		limits, before []int
		want           int
	}{
		{[]int{3, 2, 3, 2, 1}, []int{1, 1, 1, 1, 1}, 5},
		{[]int{9, 10, 10, 10, 10}, []int{11, 11, 11, 11, 11}, 15},
		{[]int{1, 10, 10, 10, 10}, []int{20, 0, 0, 0, 0}, 30},
		{[]int{1, 5, 3, 0, 1}, []int{1, 0, 0, 0, 0}, 120},
	} {
		ls := lanes(c.limits...)
		full := fullLanes(ls, c.before)
		retry, every := refusalHints(ra, ls, c.before, full, scopeOf(ls, full), &h)
		if want := retryAfterSeconds(ra, ls, c.before, full); retry != want || retry != c.want {
			t.Errorf("fixed retry after for %v/%v = %d, want %d (the seed formula)", c.limits, c.before, retry, c.want)
		}
		if every != 0 {
			t.Errorf("fixed policy gave a spacing of %v, want none", every)
		}
	}
}

func TestHoldTimes(t *testing.T) {
	var h holdTimes
	task := lanes(3, 2)
	got := make([]time.Duration, 2)
	h.of(task, got)
	if got[0] != 0 || got[1] != 0 {
		t.Fatalf("no history: %v, want zeros", got)
	}
	h.observe(task, 2*time.Second) // the first hold sets the estimate
	h.observe(task, 1*time.Second) // then each moves it a quarter of the way
	h.of(task, got)
	if want := 1750 * time.Millisecond; got[0] != want || got[1] != want {
		t.Fatalf("after 2 s and 1 s: %v, want %v", got, want)
	}
	h.observe(task, 0) // not a hold
	h.of(task, got)
	if got[1] != 1750*time.Millisecond {
		t.Fatalf("a zero hold moved the estimate to %v", got[1])
	}
	var none *holdTimes
	none.observe(task, time.Second)
	none.of(task, got)
	if got[0] != 0 {
		t.Fatalf("nil holdTimes gave %v", got)
	}
}
