package tune_test

import (
	"encoding/json"
	"testing"

	"github.com/capgate/capgate/tune"
)

func TestSettingsJSON(t *testing.T) {
	if b, err := json.Marshal(tune.Settings{}); err != nil || string(b) != `{}` {
		t.Errorf("zero settings as JSON = %s, %v; want {}", b, err)
	}
	s := tune.Settings{}.With("api_heavy_task", tune.LaneSettings{Mode: tune.Off, Min: 1, Max: 1}).
		With("es2_knn", tune.LaneSettings{Mode: tune.Apply, Min: 2, Max: 9})
	b, err := json.Marshal(s)
	if want := `{"api_heavy_task":{"max":1,"min":1,"mode":"off"},"es2_knn":{"max":9,"min":2,"mode":"apply"}}`; err != nil || string(b) != want {
		t.Fatalf("settings as JSON = %s, %v; want %s", b, err, want)
	}
	var back tune.Settings
	if err := json.Unmarshal(b, &back); err != nil || !back.Equal(s) {
		t.Errorf("read back = %+v, %v; want %+v", back, err, s)
	}
	if back.Lane("api_heavy_task").On() || !back.Lane("es2_knn").On() {
		t.Errorf("On: off lane %v, apply lane %v; want false, true", back.Lane("api_heavy_task").On(), back.Lane("es2_knn").On())
	}
	err = json.Unmarshal([]byte(`{"es2_knn":{"mode":"apply","min":5,"max":3}}`), &back)
	if want := `"adaptive.es2_knn.min" can't be more than "adaptive.es2_knn.max".`; err == nil || err.Error() != want {
		t.Errorf("invalid settings: error %v; want %s", err, want)
	}
	if !back.Equal(s) {
		t.Errorf("after a failed read: %+v; want unchanged %+v", back, s)
	}
}

// ParseSettings takes only the lanes it is given, and names them when it
// refuses another.
func TestParseSettingsLanes(t *testing.T) {
	doc := map[string]any{"model": map[string]any{"mode": "apply", "min": json.Number("1"), "max": json.Number("4")}}
	if _, errs := tune.ParseSettings(doc, []string{"cluster", "gpu"}); len(errs) != 1 ||
		errs[0] != `Unknown setting "adaptive.model": adaptive limits are for cluster and gpu.` {
		t.Errorf("errors = %q", errs)
	}
	s, errs := tune.ParseSettings(doc, []string{"cluster", "model"})
	if len(errs) != 0 || s.Lane("model") != (tune.LaneSettings{Mode: tune.Apply, Min: 1, Max: 4}) || s.Lane("cluster").On() {
		t.Errorf("settings = %+v, %q", s, errs)
	}
	if _, errs := tune.ParseSettings(doc, []string{}); len(errs) != 1 || errs[0] != `Unknown setting "adaptive.model": adaptive limits are for no lane of this policy.` {
		t.Errorf("no shared lane: errors = %q", errs)
	}
}
