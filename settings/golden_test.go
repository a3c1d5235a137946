package settings_test

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/capgate/capgate/internal/jsonenc"
	"github.com/capgate/capgate/settings"
	"github.com/capgate/capgate/tune"
)

var goldenPatches = []string{
	`{}`,
	`{"es2_knn": -1, "reserve_single_row": "x", "tiers": {"core": 1.5, "x": 1}, "bogus": 1}`,
	`{"reserve_single_row": 9}`,
	`{"api_heavy": null}`,
	`{"api_heavy": 5}`,
	`{"api_heavy": {"cluster": 2}, "reserve_single_row": 3, "lease_seconds": 3}`,
	`{"adaptive": {"es2_knn": {"mode": "apply", "min": 1, "max": 5}, "x": {}}}`,
	`{"adaptive": {"es2_knn": {"mode": "apply", "min": 1, "max": 5}}, "tiers": {"preview": 1}}`,
	`{"adaptive": {"es2_knn": {"mode": "apply", "min": 1, "max": 5}}, "tiers": {"preview": -1}}`,
	`{"adaptive": 3, "tiers": {"preview": -1}}`,
	`{"mode": "enforce", "per_user": {"preview": 0}}`,
	`{"tiers": 3, "per_user": {}, "wait": {"max_seconds": 500}}`,
	`{"mode": "x", "enforce_for": 1, "api_heavy": {"cluster": 0}, "idempotency": {"ttl_seconds": 0}, "retry_after": {"base": 0}}`,
	`{"api_heavy": {"cluster": 1, "per_task": 100001}, "es2_knn": 0, "tiers": {"staff": 0, "core": 0, "early_access": 0, "preview": 0}}`,
}

func TestOCLGolden(t *testing.T) {
	old := settings.Default(nil, settings.ModeShadow)
	type res struct {
		Doc  map[string]any
		Diff map[string][2]any
		Err  string
	}
	out := []res{{Doc: old.Doc()}}
	for _, p := range goldenPatches {
		var patch map[string]any
		if err := json.Unmarshal([]byte(p), &patch); err != nil {
			t.Fatal(err)
		}
		c, d, err := old.Apply(settings.Patch(patch))
		r := res{Diff: d}
		if err != nil {
			r.Err = err.Error()
		} else {
			r.Doc = c.Doc()
		}
		out = append(out, r)
		o, oerr := old.Overlay(patch)
		r2 := res{Doc: o.Doc()}
		if oerr != nil {
			r2.Err = oerr.Error()
		}
		out = append(out, r2)
	}
	b, _ := json.MarshalIndent(out, "", " ")
	want, _ := os.ReadFile("testdata/ocl_golden.json")
	if string(b) != string(want) {
		os.WriteFile("testdata/ocl_golden.got.json", b, 0o644)
		t.Fatal("differs")
	}
}

// The config's JSON (the staff API's "config" and "defaults", the CLI) is
// the pre-policy implementation's, byte for byte, under the OCL policy:
// testdata/ocl_config_json.golden was written by it (the defaults in
// enforce, then with tiers.preview 0 and an adaptive es2_knn).
func TestOCLConfigJSONGolden(t *testing.T) {
	want, err := os.ReadFile("testdata/ocl_config_json.golden")
	if err != nil {
		t.Fatal(err)
	}
	c := settings.Default(nil, settings.ModeEnforce)
	a, err := jsonenc.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetNumber("tiers.preview", 0); err != nil {
		t.Fatal(err)
	}
	c.Adaptive = c.Adaptive.With("es2_knn", tune.LaneSettings{Mode: tune.Apply, Min: 1, Max: 5})
	b, err := jsonenc.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(a) + "\n" + string(b); got != string(want) {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	var back settings.Config
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if again, _ := jsonenc.Marshal(back); string(again) != string(b) {
		t.Errorf("read back and written again:\n%s\nwant\n%s", again, b)
	}
}
