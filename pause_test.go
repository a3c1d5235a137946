package capgate_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/configtest"
	"github.com/capgate/capgate/lanetest"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/mock"
	"github.com/capgate/capgate/settings"
	"github.com/capgate/capgate/status"
)

// Why: with core users paused (per_user.core 0) the status said nothing of
// it; the pause showed only as a 0 in the config. Status names each paused
// lane, the tier it pauses and whose calls it refuses.
func TestStatusNamesPausedLanes(t *testing.T) {
	ctx := t.Context()
	cfg := settings.Default(nil, settings.ModeEnforce)
	configtest.SetNumbers(t, &cfg, "per_user.core", 0, "es2_knn", 0, "api_heavy.cluster", 2, "reserve_single_row", 2)
	g, err := capgate.NewGate(memory.New(nil), settings.NewFixed(cfg), nil, "task-1")
	if err != nil {
		t.Fatal(err)
	}
	got := g.Status(ctx, cfg).Paused
	want := []status.Paused{
		{Lane: "api_heavy", Except: "single_row", Routes: []string{"$match", "$rerank"},
			Refuses: "$match and $rerank calls (but single_row ones) of every caller"},
		{Lane: "es2_knn", Routes: []string{"$match"}, OnlyIf: "semantic", Refuses: "$match calls with semantic of every caller"},
		{Lane: "user", Tier: "core", Routes: []string{"$match", "$rerank"}, Refuses: "$match and $rerank calls of tier core"},
	}
	if !slices.EqualFunc(got, want, func(a, b status.Paused) bool { return fmt.Sprint(a) == fmt.Sprint(b) }) {
		t.Errorf("Paused = %+v\nwant %+v", got, want)
	}
	if none := g.Status(ctx, settings.Default(nil, settings.ModeEnforce)).Paused; len(none) != 0 {
		t.Errorf("Paused under the defaults = %+v; want none", none)
	}
}

// The status counts at most 1000 keys of a lane: a lane keyed by user with
// more says how many it did not count, instead of a count per user.
func TestStatusReadsBoundedKeys(t *testing.T) {
	ctx := t.Context()
	base := memory.New(nil)
	cfg := settings.Default(nil, settings.ModeShadow)
	g, err := capgate.NewGate(base, settings.NewFixed(cfg), nil, "task-1")
	if err != nil {
		t.Fatal(err)
	}
	a := g.Admit(ctx, lanetest.OCLCall("match", 1, true, false, "pam", "core"))
	defer a.Release(ctx)
	var counted int
	store := &mock.LaneStore{Base: base}
	store.KeysFn = func(ctx context.Context, prefix string) ([]string, error) {
		keys, err := base.Keys(ctx, prefix)
		for i := range 1200 {
			keys = append(keys, fmt.Sprintf("%sidle-%04d", prefix, i))
		}
		return keys, err
	}
	store.CountFn = func(ctx context.Context, keys []string, counts []int) error {
		counted = len(keys)
		return base.Count(ctx, keys, counts)
	}
	g2, err := capgate.NewGate(store, settings.NewFixed(cfg), nil, "task-1")
	if err != nil {
		t.Fatal(err)
	}
	st := g2.Status(ctx, cfg)
	users, _ := st.KeyedLane("user")
	if users == nil || users.Uncounted != 201 || users.Entries["pam"].InFlight != 1 {
		t.Fatalf("user lane = %+v; want pam counted and 201 keys uncounted", users)
	}
	if counted > 3*1000+10 {
		t.Errorf("counted %d keys in one read; want at most 1000 per keyed lane", counted)
	}
}
