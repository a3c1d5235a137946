package configtest

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/capgate/capgate/config"
	"github.com/capgate/capgate/settings"
	"github.com/capgate/capgate/tune"
)

// testAdaptive: the optional "adaptive" key is validated, saved as a new
// version with its changes in the history, read back from the store, and
// removed again; a config without it has no such key.
func testAdaptive(t *testing.T, open Opener) {
	store := open(t)
	s, _, _, _ := Service(store)
	ctx := context.Background()

	if _, has := settings.Default(nil, settings.ModeShadow).Doc()["adaptive"]; has {
		t.Fatal(`the defaults have an "adaptive" key; want none when no lane has a setting`)
	}
	res := mustSave(t, s, `{"adaptive":{"es2_knn":{"mode":"advise","min":2,"max":32}}}`, false, "alice", config.SourceAPI, "")
	wantJSON(t, "changes", res.Diff, `{"adaptive":[null,{"es2_knn":{"max":32,"min":2,"mode":"advise"}}]}`)
	want := tune.LaneSettings{Mode: tune.Advise, Min: 2, Max: 32}
	if got := res.Config.Adaptive.Lane("es2_knn"); got != want {
		t.Errorf("saved adaptive es2_knn = %+v; want %+v", got, want)
	}

	// A fresh service reads it back from the stored row.
	fresh, _, _, _ := Service(store)
	if got := fresh.Config(ctx).Adaptive.Lane("es2_knn"); got != want {
		t.Errorf("read back adaptive es2_knn = %+v; want %+v", got, want)
	}

	// Staff switch back at once: a PATCH of the mode alone.
	res = mustSave(t, s, `{"adaptive":{"es2_knn":{"mode":"apply"}}}`, false, "alice", config.SourceAPI, "")
	wantJSON(t, "apply changes", res.Diff, `{"adaptive.es2_knn.mode":["advise","apply"]}`)
	res = mustSave(t, s, `{"adaptive":{"es2_knn":null}}`, false, "alice", config.SourceAPI, "off again")
	if !res.Config.Adaptive.Empty() {
		t.Errorf("after removing it, adaptive = %+v; want none", res.Config.Adaptive)
	}
	if _, has := res.Config.Doc()["adaptive"]; has {
		t.Error(`after removing the last lane the config still has an "adaptive" key`)
	}
	hist, err := store.History(ctx, 10)
	if err != nil || len(hist) != 3 {
		t.Fatalf("History = %d versions, %v; want 3", len(hist), err)
	}
	if got := hist[0].Diff(); len(got) != 1 || got["adaptive"][0] == nil || got["adaptive"][1] != nil {
		t.Errorf("newest history changes = %v; want the adaptive key removed", got)
	}

	for _, tc := range []struct{ change, msg string }{
		{`{"adaptive":3}`, `"adaptive" must be an object.`},
		{`{"adaptive":{"tier":{"mode":"apply","min":1,"max":2}}}`, `Unknown setting "adaptive.tier": adaptive limits are for api_heavy, api_heavy_task and es2_knn.`},
		{`{"adaptive":{"es2_knn":{"mode":"on","min":1,"max":2}}}`, `"adaptive.es2_knn.mode" must be one of off, advise, apply.`},
		{`{"adaptive":{"es2_knn":{"mode":"apply","min":0,"max":2}}}`, `"adaptive.es2_knn.min" must be a whole number from 1 to 100000.`},
		{`{"adaptive":{"api_heavy":{"mode":"apply","min":1}}}`, `"adaptive.api_heavy.max" is required.`},
		{`{"adaptive":{"api_heavy":{"mode":"apply","min":9,"max":3}}}`, `"adaptive.api_heavy.min" can't be more than "adaptive.api_heavy.max".`},
		{`{"adaptive":{"api_heavy_task":{"mode":"apply","min":1,"max":3,"step":2}}}`, `Unknown setting "adaptive.api_heavy_task.step".`},
		{`{"adaptive":{"es2_knn":{"mode":"apply","min":1.5,"max":3}}}`, `"adaptive.es2_knn.min" must be a whole number from 1 to 100000.`},
	} {
		_, err := s.Save(ctx, config.Edit{Set: Doc(t, tc.change), Source: config.SourceAPI})
		verr, ok := errors.AsType[*settings.ValidationError](err)
		if !ok || !slices.Contains(verr.Messages, tc.msg) {
			t.Errorf("Save(%s) = %v; want a *ValidationError with %q", tc.change, err, tc.msg)
		}
	}
	if n := Rows(t, store); n != 3 {
		t.Errorf("%d rows after the invalid changes; want 3", n)
	}
}
