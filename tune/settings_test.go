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
	s := tune.Settings{APIHeavyTask: tune.LaneSettings{Mode: tune.Off, Min: 1, Max: 1}, ES2KNN: tune.LaneSettings{Mode: tune.Apply, Min: 2, Max: 9}}
	b, err := json.Marshal(s)
	if want := `{"api_heavy_task":{"max":1,"min":1,"mode":"off"},"es2_knn":{"max":9,"min":2,"mode":"apply"}}`; err != nil || string(b) != want {
		t.Fatalf("settings as JSON = %s, %v; want %s", b, err, want)
	}
	var back tune.Settings
	if err := json.Unmarshal(b, &back); err != nil || back != s {
		t.Errorf("read back = %+v, %v; want %+v", back, err, s)
	}
	if back.APIHeavyTask.On() || !back.ES2KNN.On() {
		t.Errorf("On: off lane %v, apply lane %v; want false, true", back.APIHeavyTask.On(), back.ES2KNN.On())
	}
	err = json.Unmarshal([]byte(`{"es2_knn":{"mode":"apply","min":5,"max":3}}`), &back)
	if want := `"adaptive.es2_knn.min" can't be more than "adaptive.es2_knn.max".`; err == nil || err.Error() != want {
		t.Errorf("invalid settings: error %v; want %s", err, want)
	}
	if back != s {
		t.Errorf("after a failed read: %+v; want unchanged %+v", back, s)
	}
}
