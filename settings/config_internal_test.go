package settings

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/capgate/capgate/internal/jsontree"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/tune"
)

// ocl returns the schema of the built-in OCL policy, whose keys these
// tests name.
func ocl() *schema { return schemaOf(policy.OCL()) }

// same reports whether two configs are equal (Config has slices and a map:
// no ==).
func same(a, b Config) bool { return reflect.DeepEqual(a, b) }

// setNumbers sets the lane numbers of kv (key, value, key, value...) on c,
// failing tb on a key the policy does not have.
func setNumbers(tb testing.TB, c *Config, kv ...any) {
	tb.Helper()
	for i := 0; i < len(kv); i += 2 {
		if err := c.SetNumber(kv[i].(string), kv[i+1].(int)); err != nil {
			tb.Fatal(err)
		}
	}
}

// doc parses a JSON literal for a test, failing it on bad JSON.
func doc(tb testing.TB, s string) map[string]any {
	tb.Helper()
	v, err := jsontree.Parse([]byte(s))
	if err != nil {
		tb.Fatalf("Parse(%s): %v", s, err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		tb.Fatalf("Parse(%s) = %T, want an object", s, v)
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

func TestValidateMissing(t *testing.T) {
	got := ocl().validate(map[string]any{})
	want := []string{
		`"mode" is required.`, `"enforce_for" is required.`, `"api_heavy" is required.`,
		`"es2_knn" is required.`, `"reserve_single_row" is required.`, `"tiers" is required.`,
		`"per_user" is required.`, `"lease_seconds" is required.`, `"renew_seconds" is required.`,
		`"max_hold_seconds" is required.`, `"retry_after" is required.`, `"wait" is required.`, `"unidentified" is required.`,
		`"idempotency" is required.`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("validate({})\n got %q\nwant %q", got, want)
	}
	d := Default(nil, ModeShadow).Doc()
	d["tiers"] = map[string]any{"staff": 1}
	got = ocl().validate(d)
	want = []string{`"tiers.core" is required.`, `"tiers.early_access" is required.`, `"tiers.preview" is required.`}
	if !slices.Equal(got, want) {
		t.Fatalf("validate(partial tiers)\n got %q\nwant %q", got, want)
	}
}

func TestValidateNotAnObject(t *testing.T) {
	for _, s := range []string{`[1]`, `"x"`, `3`, `null`, `true`} {
		v, err := jsontree.Parse([]byte(s))
		if err != nil {
			t.Fatalf("Parse(%s): %v", s, err)
		}
		if got := ocl().validate(v); !slices.Equal(got, []string{"config must be an object."}) {
			t.Errorf("validate(%s) = %q", s, got)
		}
	}
}

// TestChangesOfASave follows the original implementation: the
// changes a PATCH and a PUT report.
func TestChangesOfASave(t *testing.T) {
	defaults := Default(nil, ModeShadow).Doc()
	saved := jsontree.Merge(defaults, doc(t, `{"tiers":{"preview":1},"mode":"off"}`), false)
	if got, want := jsonText(t, jsontree.Diff(defaults, saved)), `{"mode":["shadow","off"],"tiers.preview":[2,1]}`; got != want {
		t.Errorf("PATCH changes = %s, want %s", got, want)
	}
	stored := jsontree.Merge(defaults, doc(t, `{"tiers":{"preview":1},"es2_knn":1}`), false)
	replaced := jsontree.Merge(defaults, doc(t, `{"mode":"off"}`), false)
	if got, want := jsonText(t, jsontree.Diff(stored, replaced)), `{"es2_knn":[1,3],"mode":["shadow","off"],"tiers.preview":[1,2]}`; got != want {
		t.Errorf("PUT changes = %s, want %s", got, want)
	}
}

func TestConfigDocRoundTrip(t *testing.T) {
	want := Default(nil, ModeEnforce)
	setNumbers(t, &want, "tiers.preview", 0)
	want.RetryAfter.Max = 12
	d := want.Doc()
	if n, ok := d["es2_knn"].(json.Number); !ok || n != "3" {
		t.Fatalf(`Doc()["es2_knn"] = %#v, want json.Number("3")`, d["es2_knn"])
	}
	parsed, err := jsontree.Parse([]byte(jsonText(t, d)))
	if err != nil {
		t.Fatal(err)
	}
	got, errs := ocl().fromDoc(parsed)
	if len(errs) != 0 || !same(got, want) {
		t.Fatalf("fromDoc(Doc()) = %+v, %q; want %+v", got, errs, want)
	}
	if got, errs := ocl().fromDoc(map[string]any{"mode": "off"}); len(errs) == 0 || !same(got, Config{}) {
		t.Fatalf("fromDoc(invalid) = %+v, %q; want the zero Config and errors", got, errs)
	}
}

func TestOverlay(t *testing.T) {
	defaults := Default(nil, ModeShadow)
	if got, err := defaults.Overlay(nil); err != nil || !same(got, defaults) {
		t.Errorf("Overlay(nil) = %+v, %v; want the defaults", got, err)
	}
	stored := doc(t, `{"retired_setting":1,"es2_knn":5,"tiers":{"preview":1,"gold":9}}`)
	storedText := jsonText(t, stored)
	want := defaults
	setNumbers(t, &want, "es2_knn", 5, "tiers.preview", 1)
	if got, err := defaults.Overlay(stored); err != nil || !same(got, want) {
		t.Errorf("Overlay(%s) = %+v, %v; want %+v", storedText, got, err, want)
	}
	if jsonText(t, stored) != storedText {
		t.Errorf("Overlay modified stored: %s", jsonText(t, stored))
	}

	// A row stored before retry_after had a policy gets the default one.
	old := doc(t, `{"retry_after":{"base":2,"max":20,"paused":60}}`)
	if got, err := defaults.Overlay(old); err != nil || got.RetryAfter != (RetryAfter{Policy: "adaptive", Base: 2, Max: 20, Paused: 60}) {
		t.Errorf("Overlay(a row without retry_after.policy) = %+v, %v; want the adaptive policy", got.RetryAfter, err)
	}

	got, err := defaults.Overlay(doc(t, `{"es2_knn":-1,"lease_seconds":10}`))
	if !same(got, defaults) || !errors.Is(err, ErrInvalid) {
		t.Fatalf("Overlay(invalid) = %+v, %v; want the defaults and ErrInvalid", got, err)
	}
	wantErr := `capacity config is invalid ("es2_knn" must be a whole number from 0 to 100000.); using the defaults`
	if err.Error() != wantErr {
		t.Errorf("Overlay(invalid) error\n got %s\nwant %s", err, wantErr)
	}
}

// configProblems checks a Config against the validation rules on its own, apart from
// validate, so FuzzValidate can catch validate letting a bad config by.
func configProblems(c Config) []string {
	var p []string
	numbers := map[string]int{
		"lease": c.LeaseSeconds, "renew": c.RenewSeconds,
		"max_hold": c.MaxHoldSeconds, "base": c.RetryAfter.Base, "max": c.RetryAfter.Max,
		"paused": c.RetryAfter.Paused, "wait.max_seconds": c.Wait.MaxSeconds,
		"wait.max_waiting": c.Wait.MaxWaiting, "wait.max_waiting_per_user": c.Wait.MaxWaitingPerUser,
	}
	// The OCL lane numbers, named apart from the schema that reads them.
	laneKeys := []string{"api_heavy.cluster", "api_heavy.per_task", "es2_knn", "reserve_single_row"}
	for _, tier := range []string{"staff", "core", "early_access", "preview"} {
		laneKeys = append(laneKeys, "tiers."+tier, "per_user."+tier)
	}
	for _, k := range laneKeys {
		n, ok := c.Number(k)
		if !ok {
			p = append(p, fmt.Sprintf("no lane number %s", k))
		}
		numbers[k] = n
	}
	for name, n := range numbers {
		if n < 0 || n > 100000 {
			p = append(p, fmt.Sprintf("%s = %d", name, n))
		}
	}
	if numbers["reserve_single_row"] > numbers["api_heavy.cluster"] {
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
	if i := c.Idempotency; i.TTLSeconds < 1 || i.TTLSeconds > 86400 || i.MaxAnswerKiB > 1024*i.MaxTotalMiB ||
		i.Mode != "off" && i.Mode != "key" && i.Mode != "auto" {
		p = append(p, "bad idempotency")
	}
	return p
}

// badNumbers returns the paths of a doc's leaves, other than mode and
// enforce_for, that are not JSON integers.
func badNumbers(v any, path string) []string {
	if m, ok := v.(map[string]any); ok {
		var bad []string
		for k, x := range m {
			if path == "" && (k == "mode" || k == "enforce_for") || path == ".retry_after" && k == "policy" ||
				path == ".idempotency" && k == "mode" || path == ".fairness" && k == "by" {
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
	f.Add([]byte(jsonText(f, Default(nil, ModeShadow).Doc())))
	f.Add([]byte(`{}`))
	f.Add([]byte(`[1]`))
	f.Add([]byte(`{"mode":"enforce","enforce_for":"all","api_heavy":{"cluster":1,"per_task":0},"es2_knn":0,` +
		`"reserve_single_row":1,"tiers":{"staff":0,"core":0,"early_access":0,"preview":0},` +
		`"per_user":{"staff":0,"core":0,"early_access":0,"preview":0},"lease_seconds":15,` +
		`"renew_seconds":5,"max_hold_seconds":15,"retry_after":{"base":1,"max":1,"paused":1}}`))
	f.Add([]byte(`{"es2_knn":3.0,"tiers":{"gold":1e2},"mode":true}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		doc, err := jsontree.Parse(b)
		if err != nil {
			return
		}
		errs := ocl().validate(doc)
		if again := ocl().validate(doc); !slices.Equal(errs, again) {
			t.Fatalf("validate is not deterministic: %q then %q", errs, again)
		}
		c, fromErrs := ocl().fromDoc(doc)
		if !slices.Equal(errs, fromErrs) {
			t.Fatalf("fromDoc errors %q, validate %q", fromErrs, errs)
		}
		if len(errs) > 0 {
			return
		}
		if p := configProblems(c); len(p) > 0 {
			t.Fatalf("validate accepted %s, but the config has problems: %q", b, p)
		}
		if bad := badNumbers(doc, ""); len(bad) > 0 {
			t.Fatalf("validate accepted %s with non-integer numbers at %q", b, bad)
		}
		if d := jsontree.Diff(doc, c.Doc()); len(d) > 0 {
			t.Fatalf("Doc() of the accepted config differs from its source: %v", d)
		}
	})
}

// The "adaptive" object's keys are the lanes tune.ParseSettings is given
// (the policy's shared lanes); the gate looks a setting up by lane name
// (tune.Settings.Lane). They must name the same lanes: for OCL, the three
// lanes the adaptive limits have always been for.
func TestAdaptiveLanesAreTunesKeys(t *testing.T) {
	lanes := ocl().adaptive
	if want := []string{"api_heavy", "api_heavy_task", "es2_knn"}; !slices.Equal(lanes, want) {
		t.Fatalf("adaptive lanes = %q, want %q", lanes, want)
	}
	for i, name := range lanes {
		a, errs := tune.ParseSettings(doc(t, fmt.Sprintf(`{%q: {"mode": "advise", "min": %d, "max": 10}}`, name, i+1)), lanes)
		if len(errs) > 0 {
			t.Fatalf("adaptive %s: %v", name, errs)
		}
		want := tune.LaneSettings{Mode: tune.Advise, Min: i + 1, Max: 10}
		if got := a.Lane(name); got != want {
			t.Errorf("Lane(%s) = %+v; want %+v", name, got, want)
		}
		if d := a.Doc(); len(d) != 1 || d[name] == nil {
			t.Errorf("Doc() = %v; want only %s", d, name)
		}
	}
}
