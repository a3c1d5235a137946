package capgate_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/capgate/capgate"
)

// doc parses a JSON literal for a test, failing it on bad JSON.
func doc(tb testing.TB, s string) map[string]any {
	tb.Helper()
	v, err := capgate.ParseDoc([]byte(s))
	if err != nil {
		tb.Fatalf("ParseDoc(%s): %v", s, err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		tb.Fatalf("ParseDoc(%s) = %T, want an object", s, v)
	}
	return m
}

// jsonText is v as compact JSON with sorted keys, for comparing trees.
func jsonText(tb testing.TB, v any) string {
	tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatalf("marshal %#v: %v", v, err)
	}
	return string(b)
}

func TestDefaultConfig(t *testing.T) {
	got := capgate.DefaultConfig(capgate.ModeShadow)
	want := capgate.Config{
		Mode: "shadow", EnforceFor: "aware",
		APIHeavy: capgate.APIHeavy{Cluster: 4, PerTask: 2}, ES2KNN: 3, ReserveSingleRow: 1,
		Tiers:        capgate.TierLimits{Staff: 4, Core: 4, EarlyAccess: 3, Preview: 2},
		PerUser:      capgate.TierLimits{Staff: 4, Core: 3, EarlyAccess: 2, Preview: 1},
		LeaseSeconds: 60, RenewSeconds: 20, MaxHoldSeconds: 900,
		RetryAfter: capgate.RetryAfter{Policy: "adaptive", Base: 5, Max: 30, Paused: 120},
		Wait:       capgate.Wait{MaxSeconds: 20, MaxWaiting: 200, MaxWaitingPerUser: 20},
	}
	if got != want {
		t.Fatalf("DefaultConfig = %+v, want %+v", got, want)
	}
	if errs := capgate.Validate(got.Doc()); len(errs) != 0 {
		t.Fatalf("Validate(defaults) = %q, want none", errs)
	}
	if got.BulkLimit() != 3 {
		t.Fatalf("BulkLimit = %d, want 3", got.BulkLimit())
	}
}

func TestDefaultConfigMode(t *testing.T) {
	for boot, want := range map[capgate.Mode]capgate.Mode{
		"off": "off", "enforce": "enforce", "shadow": "shadow", "loud": "shadow", "": "shadow",
	} {
		if got := capgate.DefaultConfig(boot).Mode; got != want {
			t.Errorf("DefaultConfig(%q).Mode = %q, want %q", boot, got, want)
		}
	}
}

// TestValidateRejects merges one bad change onto the defaults, as a PATCH
// does, and checks the exact messages.
func TestValidateRejects(t *testing.T) {
	const (
		whole = `"es2_knn" must be a whole number from 0 to 100000.`
		renew = `"renew_seconds" must be at least 1 and at most a third of "lease_seconds".`
		retry = `"retry_after" needs "base" and "paused" of at least 1, and "max" of at least "base".`
	)
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
		{`{"reserve_single_row":5}`, []string{`"reserve_single_row" can't be more than "api_heavy.cluster".`}},
		{`{"lease_seconds":14,"renew_seconds":1}`, []string{`"lease_seconds" must be at least 15.`}},
		{`{"renew_seconds":21}`, []string{renew}},
		{`{"renew_seconds":0}`, []string{renew}},
		{`{"lease_seconds":59}`, []string{renew}}, // floor(59/3) = 19 < 20
		{`{"max_hold_seconds":30}`, []string{`"max_hold_seconds" can't be less than "lease_seconds".`}},
		{`{"retry_after":{"base":0}}`, []string{retry}},
		{`{"retry_after":{"base":10,"max":5}}`, []string{retry}},
		{`{"retry_after":{"paused":0}}`, []string{retry}},
		{`{"wait":{"max_seconds":301}}`, []string{`"wait.max_seconds" must be at most 300.`}},
		{`{"wait":{"max_waiting":10}}`, []string{`"wait.max_waiting_per_user" can't be more than "wait.max_waiting".`}},
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
			`"reserve_single_row" can't be more than "api_heavy.cluster".`,
			`"lease_seconds" must be at least 15.`, renew,
		}},
	}
	defaults := capgate.DefaultConfig(capgate.ModeShadow).Doc()
	for _, tt := range tests {
		got := capgate.Validate(capgate.Merge(defaults, doc(t, tt.change), false))
		if !slices.Equal(got, tt.want) {
			t.Errorf("Validate(defaults + %s)\n got %q\nwant %q", tt.change, got, tt.want)
		}
	}
}

func TestValidateAccepts(t *testing.T) {
	defaults := capgate.DefaultConfig(capgate.ModeShadow).Doc()
	for _, change := range []map[string]any{
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
		if errs := capgate.Validate(capgate.Merge(defaults, change, false)); len(errs) != 0 {
			t.Errorf("Validate(defaults + %v) = %q, want none", change, errs)
		}
	}
	// Values a Go caller may build that JSON text can't hold.
	for _, v := range []any{7.0, json.Number("03"), json.Number("-"), json.Number(""), json.Number("3.0"),
		json.Number("+3"), uint64(1 << 63), int64(-1), "7"} {
		errs := capgate.Validate(capgate.Merge(defaults, map[string]any{"es2_knn": v}, false))
		if !slices.Equal(errs, []string{`"es2_knn" must be a whole number from 0 to 100000.`}) {
			t.Errorf("Validate with es2_knn %#v = %q, want the whole-number error", v, errs)
		}
	}
}

func TestValidateMissing(t *testing.T) {
	got := capgate.Validate(map[string]any{})
	want := []string{
		`"mode" is required.`, `"enforce_for" is required.`, `"api_heavy" is required.`,
		`"es2_knn" is required.`, `"reserve_single_row" is required.`, `"tiers" is required.`,
		`"per_user" is required.`, `"lease_seconds" is required.`, `"renew_seconds" is required.`,
		`"max_hold_seconds" is required.`, `"retry_after" is required.`, `"wait" is required.`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Validate({})\n got %q\nwant %q", got, want)
	}
	d := capgate.DefaultConfig(capgate.ModeShadow).Doc()
	d["tiers"] = map[string]any{"staff": 1}
	got = capgate.Validate(d)
	want = []string{`"tiers.core" is required.`, `"tiers.early_access" is required.`, `"tiers.preview" is required.`}
	if !slices.Equal(got, want) {
		t.Fatalf("Validate(partial tiers)\n got %q\nwant %q", got, want)
	}
}

func TestValidateNotAnObject(t *testing.T) {
	for _, s := range []string{`[1]`, `"x"`, `3`, `null`, `true`} {
		v, err := capgate.ParseDoc([]byte(s))
		if err != nil {
			t.Fatalf("ParseDoc(%s): %v", s, err)
		}
		if got := capgate.Validate(v); !slices.Equal(got, []string{"config must be an object."}) {
			t.Errorf("Validate(%s) = %q", s, got)
		}
	}
}

func TestParseDoc(t *testing.T) {
	v, err := capgate.ParseDoc([]byte(` {"a": 3, "b": [1.5]} `))
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := v.(map[string]any)["a"].(json.Number); !ok || n != "3" {
		t.Errorf(`ParseDoc: "a" = %#v, want json.Number("3")`, v.(map[string]any)["a"])
	}
	for _, bad := range []string{``, `{`, `{} {}`, `{}]`, `1 2`, `{"a":1}x`} {
		if v, err := capgate.ParseDoc([]byte(bad)); err == nil {
			t.Errorf("ParseDoc(%q) = %v, want an error", bad, v)
		}
	}
}

func TestConfigDocRoundTrip(t *testing.T) {
	want := capgate.DefaultConfig(capgate.ModeEnforce)
	want.Tiers.Preview = 0
	want.RetryAfter.Max = 12
	d := want.Doc()
	if n, ok := d["es2_knn"].(json.Number); !ok || n != "3" {
		t.Fatalf(`Doc()["es2_knn"] = %#v, want json.Number("3")`, d["es2_knn"])
	}
	parsed, err := capgate.ParseDoc([]byte(jsonText(t, d)))
	if err != nil {
		t.Fatal(err)
	}
	got, errs := capgate.ConfigFromDoc(parsed)
	if len(errs) != 0 || got != want {
		t.Fatalf("ConfigFromDoc(Doc()) = %+v, %q; want %+v", got, errs, want)
	}
	if got, errs := capgate.ConfigFromDoc(map[string]any{"mode": "off"}); len(errs) == 0 || got != (capgate.Config{}) {
		t.Fatalf("ConfigFromDoc(invalid) = %+v, %q; want the zero Config and errors", got, errs)
	}
}

func TestResolve(t *testing.T) {
	defaults := capgate.DefaultConfig(capgate.ModeShadow)
	if got, err := capgate.Resolve(nil, defaults); err != nil || got != defaults {
		t.Errorf("Resolve(nil) = %+v, %v; want the defaults", got, err)
	}
	stored := doc(t, `{"retired_setting":1,"es2_knn":5,"tiers":{"preview":1,"gold":9}}`)
	storedText := jsonText(t, stored)
	want := defaults
	want.ES2KNN, want.Tiers.Preview = 5, 1
	if got, err := capgate.Resolve(stored, defaults); err != nil || got != want {
		t.Errorf("Resolve(%s) = %+v, %v; want %+v", storedText, got, err, want)
	}
	if jsonText(t, stored) != storedText {
		t.Errorf("Resolve modified stored: %s", jsonText(t, stored))
	}

	// A row stored before retry_after had a policy gets the default one.
	old := doc(t, `{"retry_after":{"base":2,"max":20,"paused":60}}`)
	if got, err := capgate.Resolve(old, defaults); err != nil || got.RetryAfter != (capgate.RetryAfter{Policy: "adaptive", Base: 2, Max: 20, Paused: 60}) {
		t.Errorf("Resolve(a row without retry_after.policy) = %+v, %v; want the adaptive policy", got.RetryAfter, err)
	}

	got, err := capgate.Resolve(doc(t, `{"es2_knn":-1,"lease_seconds":10}`), defaults)
	if got != defaults || !errors.Is(err, capgate.ErrInvalidConfig) {
		t.Fatalf("Resolve(invalid) = %+v, %v; want the defaults and ErrInvalidConfig", got, err)
	}
	wantErr := `capacity config is invalid ("es2_knn" must be a whole number from 0 to 100000.); using the defaults`
	if err.Error() != wantErr {
		t.Errorf("Resolve(invalid) error\n got %s\nwant %s", err, wantErr)
	}
}

// configProblems checks a Config against the validation rules on its own, apart from
// Validate, so FuzzValidate can catch Validate letting a bad config by.
func configProblems(c capgate.Config) []string {
	var p []string
	numbers := map[string]int{
		"cluster": c.APIHeavy.Cluster, "per_task": c.APIHeavy.PerTask, "es2_knn": c.ES2KNN,
		"reserve": c.ReserveSingleRow, "lease": c.LeaseSeconds, "renew": c.RenewSeconds,
		"max_hold": c.MaxHoldSeconds, "base": c.RetryAfter.Base, "max": c.RetryAfter.Max,
		"paused": c.RetryAfter.Paused, "wait.max_seconds": c.Wait.MaxSeconds,
		"wait.max_waiting": c.Wait.MaxWaiting, "wait.max_waiting_per_user": c.Wait.MaxWaitingPerUser,
	}
	for _, tier := range capgate.AllTiers() {
		numbers["tiers."+string(tier)] = c.Tiers.Of(tier)
		numbers["per_user."+string(tier)] = c.PerUser.Of(tier)
	}
	for name, n := range numbers {
		if n < 0 || n > 100000 {
			p = append(p, fmt.Sprintf("%s = %d", name, n))
		}
	}
	if c.ReserveSingleRow > c.APIHeavy.Cluster {
		p = append(p, "reserve > cluster")
	}
	if c.LeaseSeconds < 15 {
		p = append(p, "lease < 15")
	}
	if c.RenewSeconds < 1 || 3*c.RenewSeconds > c.LeaseSeconds {
		p = append(p, "renew outside 1..lease/3")
	}
	if c.MaxHoldSeconds < c.LeaseSeconds {
		p = append(p, "max_hold < lease")
	}
	if c.RetryAfter.Base < 1 || c.RetryAfter.Paused < 1 || c.RetryAfter.Max < c.RetryAfter.Base {
		p = append(p, "bad retry_after")
	}
	if c.Wait.MaxSeconds > 300 || c.Wait.MaxWaitingPerUser > c.Wait.MaxWaiting {
		p = append(p, "bad wait")
	}
	if c.Mode != "off" && c.Mode != "shadow" && c.Mode != "enforce" {
		p = append(p, "bad mode")
	}
	if c.EnforceFor != "aware" && c.EnforceFor != "all" {
		p = append(p, "bad enforce_for")
	}
	return p
}

// badNumbers returns the paths of a doc's leaves, other than mode and
// enforce_for, that are not JSON integers.
func badNumbers(v any, path string) []string {
	if m, ok := v.(map[string]any); ok {
		var bad []string
		for k, x := range m {
			if path == "" && (k == "mode" || k == "enforce_for") || path == ".retry_after" && k == "policy" {
				continue
			}
			bad = append(bad, badNumbers(x, path+"."+k)...)
		}
		return bad
	}
	if n, ok := v.(json.Number); !ok || strings.ContainsAny(string(n), ".eE") {
		return []string{path}
	}
	return nil
}

func FuzzValidate(f *testing.F) {
	f.Add([]byte(jsonText(f, capgate.DefaultConfig(capgate.ModeShadow).Doc())))
	f.Add([]byte(`{}`))
	f.Add([]byte(`[1]`))
	f.Add([]byte(`{"mode":"enforce","enforce_for":"all","api_heavy":{"cluster":1,"per_task":0},"es2_knn":0,` +
		`"reserve_single_row":1,"tiers":{"staff":0,"core":0,"early_access":0,"preview":0},` +
		`"per_user":{"staff":0,"core":0,"early_access":0,"preview":0},"lease_seconds":15,` +
		`"renew_seconds":5,"max_hold_seconds":15,"retry_after":{"base":1,"max":1,"paused":1}}`))
	f.Add([]byte(`{"es2_knn":3.0,"tiers":{"gold":1e2},"mode":true}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		doc, err := capgate.ParseDoc(b)
		if err != nil {
			return
		}
		errs := capgate.Validate(doc)
		if again := capgate.Validate(doc); !slices.Equal(errs, again) {
			t.Fatalf("Validate is not deterministic: %q then %q", errs, again)
		}
		c, fromErrs := capgate.ConfigFromDoc(doc)
		if !slices.Equal(errs, fromErrs) {
			t.Fatalf("ConfigFromDoc errors %q, Validate %q", fromErrs, errs)
		}
		if len(errs) > 0 {
			return
		}
		if p := configProblems(c); len(p) > 0 {
			t.Fatalf("Validate accepted %s, but the config has problems: %q", b, p)
		}
		if bad := badNumbers(doc, ""); len(bad) > 0 {
			t.Fatalf("Validate accepted %s with non-integer numbers at %q", b, bad)
		}
		if d := capgate.Diff(doc, c.Doc()); len(d) > 0 {
			t.Fatalf("Doc() of the accepted config differs from its source: %v", d)
		}
	})
}
