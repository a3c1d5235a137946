package idempotency_test

import (
	"slices"
	"testing"

	"github.com/capgate/capgate/settings"
)

// The idempotency key: validated whole, merged by a patch, overlaid on
// the defaults for a stored version that predates it.
func TestIdempotencyConfig(t *testing.T) {
	base := settings.Default(nil, settings.ModeShadow)
	c, diff, err := base.Apply(settings.Patch{"idempotency": map[string]any{"mode": "key", "ttl_seconds": 60}})
	if err != nil {
		t.Fatal(err)
	}
	if want := (settings.Idempotency{Mode: settings.IdempotencyKey, TTLSeconds: 60, MaxAnswerKiB: 1024, MaxTotalMiB: 64}); c.Idempotency != want {
		t.Fatalf("idempotency = %+v, want %+v", c.Idempotency, want)
	}
	if len(diff) != 2 || diff["idempotency.mode"] != [2]any{"off", "key"} {
		t.Fatalf("diff = %v; want mode and ttl_seconds", diff)
	}
	for _, tc := range []struct {
		patch settings.Patch
		want  []string
	}{
		{settings.Patch{"idempotency": map[string]any{"mode": "always"}},
			[]string{`"idempotency.mode" must be one of off, key, auto.`}},
		{settings.Patch{"idempotency": map[string]any{"ttl_seconds": 0}},
			[]string{`"idempotency.ttl_seconds" must be from 1 to 86400.`}},
		{settings.Patch{"idempotency": map[string]any{"ttl_seconds": 86401}},
			[]string{`"idempotency.ttl_seconds" must be from 1 to 86400.`}},
		{settings.Patch{"idempotency": map[string]any{"max_answer_kib": 2049, "max_total_mib": 2}},
			[]string{`"idempotency.max_answer_kib" can't be more than "idempotency.max_total_mib" (1 MiB is 1024 KiB).`}},
		{settings.Patch{"idempotency": map[string]any{"max_total_mib": "64"}},
			[]string{`"idempotency.max_total_mib" must be a whole number from 0 to 100000.`}},
		{settings.Patch{"idempotency": map[string]any{"keep": 1}},
			[]string{`Unknown setting "idempotency.keep".`}},
		{settings.Patch{"idempotency": "key"}, []string{"idempotency must be an object."}},
	} {
		_, _, err := base.Apply(tc.patch)
		ve, ok := err.(*settings.ValidationError)
		if !ok || !slices.Equal(ve.Messages, tc.want) {
			t.Errorf("Apply(%v) = %v; want %q", tc.patch, err, tc.want)
		}
	}
	// A version stored before the key existed gets its defaults.
	old := base.Doc()
	delete(old, "idempotency")
	got, err := base.Overlay(old)
	if err != nil || got.Idempotency != base.Idempotency {
		t.Fatalf("Overlay of a version without idempotency = %+v, %v", got.Idempotency, err)
	}
}
