package decide_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/decide"
	"github.com/capgate/capgate/mock"
	"github.com/capgate/capgate/redis"
	"github.com/capgate/capgate/settings"
)

// incarnation is one decision service of task host-a on a shared Redis.
type incarnation struct {
	url  string
	srv  *decide.Server
	gate *capgate.Gate
	sink *mock.Sink
}

func startIncarnation(t *testing.T, store *redis.Store, cfg capgate.ConfigSource) *incarnation {
	t.Helper()
	sink := &mock.Sink{}
	gate, err := capgate.NewGate(store, cfg, sink, "host-a")
	if err != nil {
		t.Fatal(err)
	}
	srv := decide.NewServer(gate)
	srv.Journal = store
	hs := httptest.NewUnstartedServer(srv)
	hs.Config = decide.NewHTTPServer(srv, gate.Logger)
	hs.Start()
	t.Cleanup(func() {
		srv.Shutdown()
		hs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		srv.Wait(ctx)
		_ = srv.Close(ctx)
		_ = gate.Close(ctx)
	})
	return &incarnation{url: hs.URL, srv: srv, gate: gate, sink: sink}
}

// TestRecoverReleasesAPredecessorsCalls: a new incarnation of the service
// releases, at start, the store leases its predecessor journalled and
// never released (it was killed), so they are not left for lease_seconds;
// calls released normally leave nothing in the journal.
func TestRecoverReleasesAPredecessorsCalls(t *testing.T) {
	m := miniredis.RunT(t)
	store, err := redis.Open(redis.Options{URL: "redis://" + m.Addr(), Deadline: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	c := settings.Default(nil, settings.ModeEnforce)
	c.EnforceFor, c.Wait.MaxSeconds, c.LeaseSeconds, c.RenewSeconds = settings.EnforceAll, 0, 600, 300
	setNumbers(t, &c, map[string]int{"per_user.core": 3, "api_heavy.per_task": 8, "tiers.core": 8})
	cfg := settings.NewFixed(c)

	old := startIncarnation(t, store, cfg)
	oldEnv := &env{url: old.url}
	held := []*stream{oldEnv.post(t, t.Context(), call("1"), ""), oldEnv.post(t, t.Context(), call("2"), ""),
		oldEnv.post(t, t.Context(), call("3"), "")}
	for _, s := range held {
		if !s.d.Held {
			t.Fatalf("%+v: want held", s.d)
		}
	}
	// One is released normally: its record goes with it.
	if err := held[2].resp.Body.Close(); err != nil {
		t.Fatal(err)
	}
	old.sink.Wait(t, 1, waitLimit) // its line: written at its release
	userLane := []string{"ocl:capacity:user:cora"}
	counts := make([]int, 1)
	if err := store.Count(t.Context(), userLane, counts); err != nil || counts[0] != 2 {
		t.Fatalf("user lane %d (%v), want 2 after one release", counts[0], err)
	}
	journal := store.JournalKey("decide:host-a")
	journalled := func() int { keys, _ := m.HKeys(journal); return len(keys) }
	// The record is forgotten just after the release's line: poll briefly.
	for deadline := time.Now().Add(waitLimit); journalled() != 2 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if n := journalled(); n != 2 {
		t.Fatalf("journal holds %d calls, want the 2 still held", n)
	}

	// Another live service of the task id, on another address, never
	// takes this one's journal.
	other := startIncarnation(t, store, cfg)
	other.srv.Instance = "unix:/run/other.sock"
	release, err := other.srv.Recover(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := release(); err != nil || n != 0 || journalled() != 2 {
		t.Fatalf("another service's Recover: %d, %v, journal %d; want nothing taken", n, err, journalled())
	}

	// The old incarnation is "killed": its two calls stay in Redis. The
	// new one releases them before it serves.
	next := startIncarnation(t, store, cfg)
	release, err = next.srv.Recover(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	n, err := release()
	if err != nil || n != 2 {
		t.Fatalf("Recover: %d, %v; want the 2 calls released", n, err)
	}
	if err := store.Count(t.Context(), userLane, counts); err != nil || counts[0] != 0 {
		t.Errorf("user lane after Recover: %d (%v), want 0", counts[0], err)
	}
	if m.Exists(journal) {
		t.Error("the journal is left after Recover")
	}
	release, err = next.srv.Recover(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := release(); err != nil || n != 0 {
		t.Errorf("a second Recover: %d, %v; want nothing to release", n, err)
	}
}
