package decide_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/decide"
	"github.com/capgate/capgate/journal"
	"github.com/capgate/capgate/mock"
	"github.com/capgate/capgate/redis"
	"github.com/capgate/capgate/settings"
)

// incarnation is one decision service of task host-a, its own Redis
// client on a shared Redis.
type incarnation struct {
	url   string
	srv   *decide.Server
	store *redis.Store
	j     *journal.Journal
}

// startIncarnation starts a service journalling in group with liveness
// (0: the default) and no hold. The test closes it (its calls end, then
// its journal) or kills it (its client closes: nothing reaches Redis).
func startIncarnation(t *testing.T, url, group string, liveness time.Duration, cfg settings.Source) *incarnation {
	t.Helper()
	store, err := redis.Open(redis.Options{URL: url, Deadline: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	gate, err := capgate.NewGate(store, cfg, &mock.Sink{}, "host-a")
	if err != nil {
		t.Fatal(err)
	}
	j, err := journal.Open(t.Context(), journal.Options{Store: store, Group: group, Release: gate.ReleaseLeft,
		Liveness: liveness, Logger: gate.Logger})
	if err != nil {
		t.Fatal(err)
	}
	srv := decide.NewServer(gate)
	srv.Journal = j
	hs := httptest.NewUnstartedServer(srv)
	hs.Config = decide.NewHTTPServer(srv, gate.Logger)
	hs.Start()
	t.Cleanup(func() {
		srv.Shutdown()
		hs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		srv.Wait(ctx)
		_ = j.Close(ctx)
		_ = srv.Close(ctx)
		_ = gate.Close(ctx)
		_ = store.Close()
	})
	return &incarnation{url: hs.URL, srv: srv, store: store, j: j}
}

func journalConfig(t *testing.T) settings.Source {
	c := settings.Default(nil, settings.ModeEnforce)
	c.EnforceFor, c.Wait.MaxSeconds, c.LeaseSeconds, c.RenewSeconds = settings.EnforceAll, 0, 600, 300
	setNumbers(t, &c, map[string]int{"per_user.core": 3, "api_heavy.per_task": 8, "tiers.core": 8})
	return settings.NewFixed(c)
}

// userLane counts cora's calls in Redis.
func userLane(t *testing.T, m *miniredis.Miniredis) int {
	t.Helper()
	n, _ := m.ZMembers("ocl:capacity:user:cora")
	return len(n)
}

func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(waitLimit); !ok(); {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(5 * time.Millisecond) // Redis and the server's goroutines move it
	}
}

// TestJournalReleasesADeadServicesCalls: a service's held calls are
// journalled (a call released normally leaves nothing); once the service
// is killed, a new one of its group releases them, rather than leaving
// the places taken for lease_seconds.
func TestJournalReleasesADeadServicesCalls(t *testing.T) {
	m := miniredis.RunT(t)
	url, cfg := "redis://"+m.Addr(), journalConfig(t)
	const group = "decide:host-a:unix:/run/capgate.sock"
	old := startIncarnation(t, url, group, 0, cfg)
	oldEnv := &env{url: old.url}
	held := []*stream{oldEnv.post(t, t.Context(), call("1"), ""), oldEnv.post(t, t.Context(), call("2"), ""),
		oldEnv.post(t, t.Context(), call("3"), "")}
	for _, s := range held {
		if !s.d.Held {
			t.Fatalf("%+v: want held", s.d)
		}
	}
	held[2].close() // released normally: its record goes with it
	eventually(t, "one call released", func() bool { return userLane(t, m) == 2 })
	journal := old.store.JournalKey(group, old.j.ID())
	eventually(t, "the 2 calls still held journalled", func() bool { keys, _ := m.HKeys(journal); return len(keys) == 2 })

	_ = old.store.Close() // killed: its renewals stop, its calls stay in Redis
	startIncarnation(t, url, group, 0, cfg)
	eventually(t, "the killed service's calls released", func() bool { return userLane(t, m) == 0 })
	eventually(t, "the killed service's journal forgotten after its release", func() bool { return !m.Exists(journal) })
}

// TestTwinServicesNeverReleaseEachOther: two live services of one group
// (before: decide.Server{Instance: ""}, or one task id and listen address
// on two hosts, shared one journal, and the second released the first's
// calls) each keep their own journal and never release each other's.
func TestTwinServicesNeverReleaseEachOther(t *testing.T) {
	m := miniredis.RunT(t)
	url, cfg := "redis://"+m.Addr(), journalConfig(t)
	const group = "decide:host-a:" // no instance: the group is the task id's
	a := startIncarnation(t, url, group, time.Minute, cfg)
	aCall := (&env{url: a.url}).post(t, t.Context(), call("1"), "")
	eventually(t, "a's call journalled", func() bool {
		keys, _ := m.HKeys(a.store.JournalKey(group, a.j.ID()))
		return len(keys) == 1
	})
	b := startIncarnation(t, url, group, time.Minute, cfg)
	bCall := (&env{url: b.url}).post(t, t.Context(), call("2"), "")
	if !aCall.d.Held || !bCall.d.Held {
		t.Fatalf("a %+v, b %+v: want both held", aCall.d, bCall.d)
	}
	if a.j.ID() == b.j.ID() {
		t.Fatal("two services share a journal")
	}
	// b's last look at the group, as it closes, releases the dead only.
	if err := b.j.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := userLane(t, m); n != 2 {
		t.Errorf("%d of cora's calls counted, want a's and b's: both run", n)
	}
	aCall.close()
	bCall.close()
	eventually(t, "both calls released", func() bool { return userLane(t, m) == 0 })
}
