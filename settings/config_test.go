package settings_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/capgate/capgate/configtest"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
)

func TestDefaultConfig(t *testing.T) {
	got := settings.Default(nil, settings.ModeShadow)
	want := settings.Config{
		Mode: "shadow", EnforceFor: "aware",
		LeaseSeconds: 60, RenewSeconds: 20, MaxHoldSeconds: 900,
		RetryAfter:   settings.RetryAfter{Policy: "adaptive", Base: 5, Max: 30, Paused: 120},
		Wait:         settings.Wait{MaxSeconds: 20, MaxWaiting: 200, MaxWaitingPerUser: 20},
		Unidentified: 1,
		Idempotency:  settings.Idempotency{Mode: "off", TTLSeconds: 300, MaxAnswerKiB: 1024, MaxTotalMiB: 64},
		Fairness:     settings.Fairness{By: "time"},
	}
	if g := configtest.Exported(got); !reflect.DeepEqual(g, want) {
		t.Fatalf("Default = %+v, want %+v", g, want)
	}
	wantNumbers := map[string]int{
		"api_heavy.cluster": 4, "api_heavy.per_task": 4, "es2_knn": 3, "reserve_single_row": 1,
		"tiers.staff": 4, "tiers.core": 4, "tiers.early_access": 3, "tiers.preview": 2,
		"per_user.staff": 4, "per_user.core": 3, "per_user.early_access": 2, "per_user.preview": 1,
	}
	if got, want := configtest.Numbers(got), wantNumbers; !reflect.DeepEqual(got, want) {
		t.Fatalf("Default's lane numbers = %v, want %v", got, want)
	}
	if got.Policy() != policy.OCL() {
		t.Fatalf("Default's policy = %s, want OCL's", got.Policy().Name)
	}
	if _, _, err := got.Apply(nil); err != nil {
		t.Fatalf("the defaults are invalid: %v", err)
	}
}

func TestDefaultConfigMode(t *testing.T) {
	for boot, want := range map[settings.Mode]settings.Mode{
		"off": "off", "enforce": "enforce", "shadow": "shadow", "Enforce": "enforce", "loud": "shadow", "": "shadow",
	} {
		if got := settings.Default(nil, boot).Mode; got != want {
			t.Errorf("Default(nil, %q).Mode = %q, want %q", boot, got, want)
		}
	}
}

// applyProblems applies change to c and returns the messages of the
// *ValidationError it fails with; none when it succeeds.
func applyProblems(c settings.Config, change settings.Patch) []string {
	_, _, err := c.Apply(change)
	if err == nil {
		return nil
	}
	verr, ok := errors.AsType[*settings.ValidationError](err)
	if !ok {
		return []string{fmt.Sprintf("not a *ValidationError: %v", err)}
	}
	return verr.Messages
}

func TestApply(t *testing.T) {
	base := settings.Default(nil, settings.ModeShadow)
	change := configtest.Doc(t, `{"tiers":{"preview":1},"mode":"off","es2_knn":3}`)
	changeText := configtest.JSON(t, change)
	got, changes, err := base.Apply(change)
	if err != nil {
		t.Fatal(err)
	}
	want := base
	want.Mode = settings.ModeOff
	configtest.SetNumbers(t, &want, "tiers.preview", 1)
	if !configtest.Same(got, want) {
		t.Errorf("Apply = %+v; want %+v", got, want)
	}
	if g, w := configtest.JSON(t, changes), `{"mode":["shadow","off"],"tiers.preview":[2,1]}`; g != w {
		t.Errorf("Apply changes = %s; want %s", g, w)
	}
	if configtest.JSON(t, change) != changeText || !configtest.Same(base, settings.Default(nil, settings.ModeShadow)) {
		t.Errorf("Apply modified its inputs: change %s", configtest.JSON(t, change))
	}
	if same, changes, err := got.Apply(change); err != nil || !configtest.Same(same, got) || changes == nil || len(changes) != 0 {
		t.Errorf("Apply again = %+v, %v, %v; want the same config and empty, non-nil changes", same, changes, err)
	}

	bad, changes, err := base.Apply(settings.Patch{"es2_knn": -1, "bogus": 1})
	verr, ok := errors.AsType[*settings.ValidationError](err)
	if !ok || !errors.Is(err, settings.ErrInvalid) || !configtest.Same(bad, settings.Config{}) || changes != nil {
		t.Fatalf("Apply(invalid) = %+v, %v, %v; want the zero Config, nil changes and a *ValidationError", bad, changes, err)
	}
	wantMsgs := []string{`"es2_knn" must be a whole number from 0 to 100000.`, `Unknown setting "bogus".`}
	if !slices.Equal(verr.Messages, wantMsgs) || err.Error() != strings.Join(wantMsgs, " ") {
		t.Errorf("Apply(invalid) error = %q; want %q", verr.Messages, wantMsgs)
	}
}

// TestApplyRejects applies one bad change to the defaults, as a PATCH
// does, and checks the exact messages.
func TestApplyRejects(t *testing.T) {
	const (
		whole = `"es2_knn" must be a whole number from 0 to 100000.`
	)
	renew := func(renew, lease int) string {
		return fmt.Sprintf(`"renew_seconds" (%d) must be at least 1 and at most a third of "lease_seconds" (%d).`, renew, lease)
	}
	retry := func(base, paused, max int) string {
		return fmt.Sprintf(`"retry_after" needs "base" (%d) and "paused" (%d) of at least 1, and "max" (%d) of at least "base".`, base, paused, max)
	}
	tests := []struct {
		change string
		want   []string
	}{
		{`{"bogus":1}`, []string{`Unknown setting "bogus".`}},
		{`{"tiers":{"gold":1}}`, []string{`Unknown setting "tiers.gold".`}},
		{`{"tiers":5}`, []string{`tiers must be an object.`}},
		{`{"api_heavy":[4]}`, []string{`api_heavy must be an object.`}},
		{`{"retry_after":null}`, []string{`retry_after must be an object.`}},
		{`{"mode":"loud"}`, []string{`"mode" must be one of off, shadow, enforce.`}},
		{`{"mode":1}`, []string{`"mode" must be one of off, shadow, enforce.`}},
		{`{"mode":"Enforce"}`, []string{`"mode" must be one of off, shadow, enforce.`}},
		{`{"enforce_for":"some"}`, []string{`"enforce_for" must be one of aware, all.`}},
		{`{"retry_after":{"policy":"smart"}}`, []string{`"retry_after.policy" must be one of adaptive, fixed.`}},
		{`{"retry_after":{"policy":null}}`, []string{`"retry_after.policy" must be one of adaptive, fixed.`}},
		{`{"es2_knn":-1}`, []string{whole}},
		{`{"es2_knn":true}`, []string{whole}},
		{`{"es2_knn":"3"}`, []string{whole}},
		{`{"es2_knn":3.0}`, []string{whole}},
		{`{"es2_knn":1e2}`, []string{whole}},
		{`{"es2_knn":2.5}`, []string{whole}},
		{`{"es2_knn":null}`, []string{whole}},
		{`{"es2_knn":100001}`, []string{whole}},
		{`{"es2_knn":99999999999999999999999}`, []string{whole}},
		{`{"per_user":{"preview":100001}}`, []string{`"per_user.preview" must be a whole number from 0 to 100000.`}},
		{`{"reserve_single_row":5}`, []string{`"reserve_single_row" (5) can't be more than "api_heavy.cluster" (4).`}},
		{`{"lease_seconds":14,"renew_seconds":1}`, []string{`"lease_seconds" (14) must be at least 15.`}},
		{`{"renew_seconds":21}`, []string{renew(21, 60)}},
		{`{"renew_seconds":0}`, []string{renew(0, 60)}},
		{`{"lease_seconds":59}`, []string{renew(20, 59)}}, // floor(59/3) = 19 < 20
		{`{"max_hold_seconds":30}`, []string{`"max_hold_seconds" (30) can't be less than "lease_seconds" (60).`}},
		{`{"retry_after":{"base":0}}`, []string{retry(0, 120, 30)}},
		{`{"retry_after":{"base":10,"max":5}}`, []string{retry(10, 120, 5)}},
		{`{"retry_after":{"paused":0}}`, []string{retry(5, 0, 30)}},
		{`{"wait":{"max_seconds":301}}`, []string{`"wait.max_seconds" (301) must be at most 300.`}},
		{`{"wait":{"max_waiting":10}}`, []string{`"wait.max_waiting_per_user" (20) can't be more than "wait.max_waiting" (10).`}},
		{`{"wait":{"max_seconds":-1}}`, []string{`"wait.max_seconds" must be a whole number from 0 to 100000.`}},
		{`{"wait":{"max_seconds":5,"fifo":true}}`, []string{`Unknown setting "wait.fifo".`}},
		{`{"wait":3}`, []string{`wait must be an object.`}},
		// Several problems: known settings in schema order, then unknown
		// ones sorted; cross-field checks wait for a clean shape.
		{`{"zeta":1,"tiers":{"gold":1},"alpha":1,"es2_knn":-1,"mode":"x","lease_seconds":14}`, []string{
			`"mode" must be one of off, shadow, enforce.`, whole,
			`Unknown setting "alpha".`, `Unknown setting "tiers.gold".`, `Unknown setting "zeta".`,
		}},
		{`{"lease_seconds":14,"max_hold_seconds":14,"renew_seconds":5,"reserve_single_row":9}`, []string{
			`"reserve_single_row" (9) can't be more than "api_heavy.cluster" (4).`,
			`"lease_seconds" (14) must be at least 15.`, renew(5, 14),
		}},
	}
	defaults := settings.Default(nil, settings.ModeShadow)
	for _, tt := range tests {
		got := applyProblems(defaults, configtest.Doc(t, tt.change))
		if !slices.Equal(got, tt.want) {
			t.Errorf("Apply(%s)\n got %q\nwant %q", tt.change, got, tt.want)
		}
	}
}

func TestApplyAccepts(t *testing.T) {
	defaults := settings.Default(nil, settings.ModeShadow)
	for _, change := range []settings.Patch{
		{"es2_knn": json.Number("0")},
		{"es2_knn": json.Number("-0")},
		{"es2_knn": json.Number("100000")},
		{"es2_knn": 7},
		{"es2_knn": int64(7)},
		{"lease_seconds": 15, "renew_seconds": 5, "max_hold_seconds": 15},
		{"lease_seconds": 62, "renew_seconds": 20},
		{"reserve_single_row": 4, "tiers": map[string]any{"preview": 0}},
		{"retry_after": map[string]any{"base": 1, "max": 1, "paused": 1}},
		{"retry_after": map[string]any{"policy": "fixed"}},
		{"mode": "enforce", "enforce_for": "all"},
	} {
		if _, _, err := defaults.Apply(change); err != nil {
			t.Errorf("Apply(%v) = %v, want no error", change, err)
		}
	}
	// Values a Go caller may build that JSON text can't hold.
	for _, v := range []any{7.0, json.Number("03"), json.Number("-"), json.Number(""), json.Number("3.0"),
		json.Number("+3"), uint64(1 << 63), int64(-1), "7"} {
		errs := applyProblems(defaults, settings.Patch{"es2_knn": v})
		if !slices.Equal(errs, []string{`"es2_knn" must be a whole number from 0 to 100000.`}) {
			t.Errorf("Apply with es2_knn %#v = %q, want the whole-number error", v, errs)
		}
	}
}

// jsonText is v as compact JSON with sorted keys, for comparing trees.
func jsonText(tb testing.TB, v any) string {
	tb.Helper()
	return configtest.JSON(tb, v)
}
