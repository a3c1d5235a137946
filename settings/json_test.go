package settings_test

import (
	"encoding/json"
	"testing"

	"github.com/capgate/capgate/configtest"
	"github.com/capgate/capgate/settings"
	"github.com/capgate/capgate/tune"
)

// A Config's JSON (capgate capacity show's "config") is, for the OCL
// policy, byte for byte what the Config struct's was, and reads back.
func TestConfigJSONIsTheStructsOfOld(t *testing.T) {
	c := settings.Default(nil, settings.ModeEnforce)
	want := `{"mode":"enforce","enforce_for":"aware","api_heavy":{"cluster":4,"per_task":4},"es2_knn":3,"reserve_single_row":1,` +
		`"tiers":{"staff":4,"core":4,"early_access":3,"preview":2},"per_user":{"staff":4,"core":3,"early_access":2,"preview":1},` +
		`"lease_seconds":60,"renew_seconds":20,"max_hold_seconds":900,"retry_after":{"policy":"adaptive","base":5,"max":30,"paused":120},` +
		`"wait":{"max_seconds":20,"max_waiting":200,"max_waiting_per_user":20},"unidentified":1,` +
		`"idempotency":{"mode":"off","ttl_seconds":300,"max_answer_kib":1024,"max_total_mib":64},"fairness":{"by":"time"}}`
	if b, err := json.Marshal(c); err != nil || string(b) != want {
		t.Errorf("defaults as JSON = %s, %v\nwant %s", b, err, want)
	}
	c.Adaptive = c.Adaptive.With("es2_knn", tune.LaneSettings{Mode: tune.Apply, Min: 1, Max: 5})
	configtest.SetNumbers(t, &c, "tiers.preview", 0)
	want = `{"mode":"enforce","enforce_for":"aware","api_heavy":{"cluster":4,"per_task":4},"es2_knn":3,"reserve_single_row":1,` +
		`"tiers":{"staff":4,"core":4,"early_access":3,"preview":0},"per_user":{"staff":4,"core":3,"early_access":2,"preview":1},` +
		`"lease_seconds":60,"renew_seconds":20,"max_hold_seconds":900,"retry_after":{"policy":"adaptive","base":5,"max":30,"paused":120},` +
		`"wait":{"max_seconds":20,"max_waiting":200,"max_waiting_per_user":20},"unidentified":1,` +
		`"idempotency":{"mode":"off","ttl_seconds":300,"max_answer_kib":1024,"max_total_mib":64},"fairness":{"by":"time"},` +
		`"adaptive":{"es2_knn":{"max":5,"min":1,"mode":"apply"}}}`
	b, err := json.Marshal(c)
	if err != nil || string(b) != want {
		t.Errorf("changed config as JSON = %s, %v\nwant %s", b, err, want)
	}
	var back settings.Config
	if err := json.Unmarshal(b, &back); err != nil || !configtest.Same(back, c) {
		t.Errorf("read back = %+v, %v; want %+v", back, err, c)
	}
	// Keys it does not have are ignored, as a struct's JSON ignores them;
	// one it has but lacks keeps the value; an invalid config is refused.
	back = settings.Default(nil, settings.ModeShadow)
	if err := json.Unmarshal([]byte(`{"es2_knn":1,"retired":true}`), &back); err != nil || configtest.Number(t, back, "es2_knn") != 1 || back.Mode != settings.ModeShadow {
		t.Errorf("partial document: %+v, %v; want es2_knn 1, the rest kept", back, err)
	}
	if err := json.Unmarshal([]byte(`{"es2_knn":-1}`), &back); err == nil || configtest.Number(t, back, "es2_knn") != 1 {
		t.Errorf("invalid document: error %v, es2_knn %d; want an error and c unchanged", err, configtest.Number(t, back, "es2_knn"))
	}
}

// A config stored before fairness.by existed reads as fairness by time;
// a fairness.by that is none of calls, time or usage is refused.
func TestConfigWithoutFairnessIsByTime(t *testing.T) {
	c := settings.Default(nil, settings.ModeEnforce)
	c.Fairness.By = settings.FairCalls
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	delete(doc, "fairness")
	old, _ := json.Marshal(doc)
	var back settings.Config
	if err := json.Unmarshal(old, &back); err != nil || back.Fairness.By != settings.FairTime {
		t.Errorf("a config without fairness reads as %+v, %v; want fairness.by time", back.Fairness, err)
	}
	doc["fairness"] = map[string]any{"by": "work"}
	bad, _ := json.Marshal(doc)
	if err := json.Unmarshal(bad, &back); err == nil {
		t.Error(`fairness.by "work" was accepted`)
	}
}
