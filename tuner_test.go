package capgate_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/configtest"
	"github.com/capgate/capgate/lanetest"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/settings"
	"github.com/capgate/capgate/tune"
)

func TestConfigJSONWithAndWithoutAdaptive(t *testing.T) {
	cfg := settings.Default(nil, settings.ModeShadow)
	b, err := json.Marshal(cfg)
	if err != nil || strings.Contains(string(b), `"adaptive":`) {
		t.Fatalf("defaults as JSON = %s, %v; want no adaptive key", b, err)
	}
	cfg.Adaptive = cfg.Adaptive.With("es2_knn", tune.LaneSettings{Mode: tune.Apply, Min: 2, Max: 9})
	b, err = json.Marshal(cfg)
	if err != nil || !strings.Contains(string(b), `"adaptive":{"es2_knn":{"max":9,"min":2,"mode":"apply"}}`) {
		t.Fatalf("with adaptive as JSON = %s, %v", b, err)
	}
	var back settings.Config
	if err := json.Unmarshal(b, &back); err != nil || !configtest.Same(back, cfg) {
		t.Errorf("read back = %+v, %v; want %+v", back, err, cfg)
	}
}

// Gate.Tune with take moves the samples of the calls released since the
// last take into Pending, once; a gate without adaptive state says so.
func TestTuneTakesTheGatheredSamples(t *testing.T) {
	cfg := settings.Default(nil, settings.ModeShadow)
	cfg.Adaptive = cfg.Adaptive.With("es2_knn", tune.LaneSettings{Mode: tune.Advise, Min: 1, Max: 10})
	store := memory.New(nil)
	g, err := capgate.NewGate(store, settings.NewFixed(cfg), nil, "t1")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t.Cleanup(func() { _ = g.Close(ctx) })
	g.Admit(ctx, lanetest.OCLCall("match", 2, true, false, "u", "core")).Release(ctx)
	knn := capgate.LaneName("es2_knn")
	pending := func(take bool) tune.Window {
		t.Helper()
		var w tune.Window
		if err := g.Tune(knn, take, func(l *tune.LaneState) { w, l.Pending = l.Pending, tune.Window{} }); err != nil {
			t.Fatal(err)
		}
		return w
	}
	if w := pending(false); w.Calls != 0 {
		t.Errorf("without take: pending %+v; want none (the call is still gathered)", w)
	}
	if w := pending(true); w.Calls != 1 {
		t.Errorf("take: pending %+v; want the released call", w)
	}
	if w := pending(true); w.Calls != 0 {
		t.Errorf("second take: pending %+v; want none", w)
	}
	hand := &capgate.Gate{Store: store, Source: settings.NewFixed(cfg), TaskID: "t1"}
	if err := hand.Tune(knn, false, nil); err == nil {
		t.Error("a hand-built gate's Tune: no error; want no adaptive state")
	}
}
