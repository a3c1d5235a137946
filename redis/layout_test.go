package redis_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/lanetest"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/redis"
	"github.com/capgate/capgate/settings"
)

// openMiniCluster returns a store over a Redis Cluster client whose one
// node is a miniredis (which answers CLUSTER SLOTS with itself) and that
// miniredis. Miniredis does not refuse CROSSSLOT scripts, so the tests
// below see what the store sends.
func openMiniCluster(t *testing.T, o redis.Options) (*redis.Store, *miniredis.Miniredis) {
	t.Helper()
	m := miniredis.RunT(t)
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{m.Addr()}})
	t.Cleanup(func() { c.Close() })
	s, err := redis.New(c, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, m
}

// A library user who puts a gate on a Redis Cluster store, setting no
// prefix, gets lane keys in one hash slot: the store gives the gate its
// hash-tagged prefix (the store's default, policy.DefaultKeyPrefix, since
// the policy refactor; the gateway passes its policy's).
func TestClusterStoreGivesTheGateAHashTaggedPrefix(t *testing.T) {
	s, m := openMiniCluster(t, redis.Options{})
	tagged := "{" + policy.DefaultKeyPrefix + "}"
	if got := s.KeyPrefix(); got != tagged {
		t.Fatalf("KeyPrefix() = %q, want %s", got, tagged)
	}
	g, err := capgate.NewGate(s, settings.NewFixed(settings.Default(nil, settings.ModeEnforce)), nil, "task-a")
	if err != nil {
		t.Fatal(err)
	}
	a := g.Admit(t.Context(), lanetest.Match("alice", "core"))
	defer a.Release(context.Background())
	if a.Outcome().Decision != capgate.DecisionAdmitted || !a.Outcome().Holding {
		t.Fatalf("decision %q, holding %v, err %v; want admitted, holding", a.Outcome().Decision, a.Outcome().Holding, a.Err())
	}
	keys := m.Keys()
	if len(keys) == 0 {
		t.Fatal("no lane keys in Redis")
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, tagged+":") {
			t.Errorf("lane key %q is not under the hash tag %s", k, tagged)
		}
	}
}

// Whoever calls it, a cluster store refuses keys that don't share one
// hash tag, before sending anything, with an error that says why (not a
// CROSSSLOT from Redis).
func TestClusterStoreRefusesKeysOutsideOneSlot(t *testing.T) {
	s, m := openMiniCluster(t, redis.Options{})
	ctx := t.Context()
	tok := lanetest.NewToken()
	for _, keys := range [][]string{{"ocl:capacity:api_heavy", "ocl:capacity:user:a"}, {"{a}:api_heavy", "{b}:user:a"}} {
		taken, err := s.Acquire(ctx, capgate.AcquireRequest{Token: tok, Keys: keys, Limits: []int{5, 5}, Lease: time.Minute}, make([]int, 2))
		if err == nil || taken || !strings.Contains(err.Error(), "hash tag") {
			t.Errorf("Acquire(%q) = %v, %v; want an error about hash tags", keys, taken, err)
		}
		if err := s.Release(ctx, tok, keys); err == nil {
			t.Errorf("Release(%q) = nil; want an error about hash tags", keys)
		}
	}
	tk := capgate.Ticket{Prefix: "ocl", Token: tok, Keys: []string{"{a}:api_heavy"}, Limits: []int{1},
		Lease: time.Minute, TicketLease: time.Minute, Claim: time.Minute, MaxWaiting: 10, MaxPerUser: 10}
	if _, err := s.Join(ctx, tk, make([]int, 1)); err == nil || !strings.Contains(err.Error(), "hash tag") {
		t.Errorf("Join with a prefix outside the keys' slot: %v; want an error about hash tags", err)
	}
	// A class key (Borrow) outside the lanes' slot, for Acquire, Join and
	// Pump.
	borrow := []capgate.Borrow{{Key: "{b}:api_heavy:class", Reserve: 1, Lend: 1}}
	req := capgate.AcquireRequest{Token: tok, Keys: []string{"{a}:api_heavy"}, Limits: []int{5}, Lease: time.Minute, Borrow: borrow}
	if taken, err := s.Acquire(ctx, req, make([]int, 2)); err == nil || taken || !strings.Contains(err.Error(), "hash tag") {
		t.Errorf("Acquire with a class key outside the lanes' slot = %v, %v; want an error about hash tags", taken, err)
	}
	tk.Prefix, tk.Borrow = "{a}", borrow
	if _, err := s.Join(ctx, tk, make([]int, 2)); err == nil || !strings.Contains(err.Error(), "hash tag") {
		t.Errorf("Join with a class key outside the lanes' slot: %v; want an error about hash tags", err)
	}
	if _, err := s.Pump(ctx, tk); err == nil || !strings.Contains(err.Error(), "hash tag") {
		t.Errorf("Pump with a class key outside the lanes' slot: %v; want an error about hash tags", err)
	}
	if keys := m.Keys(); len(keys) != 0 {
		t.Fatalf("keys in Redis after refused calls: %v", keys)
	}
	keys := []string{"{a}:api_heavy", "{a}:user:a"}
	if taken, err := s.Acquire(ctx, capgate.AcquireRequest{Token: tok, Keys: keys, Limits: []int{5, 5}, Lease: time.Minute}, make([]int, 2)); err != nil || !taken {
		t.Fatalf("Acquire(%q) = %v, %v; want taken", keys, taken, err)
	}
}

// The layout is checked when the store is made: a prefix the cluster
// layout can't tag is refused by Open and New, and a prefix that has a tag
// is kept as it is.
func TestClusterStoreChecksItsPrefix(t *testing.T) {
	if _, err := redis.Open(redis.Options{Cluster: []string{"127.0.0.1:1"}, KeyPrefix: "}x"}); err == nil {
		t.Error("Open(cluster, prefix }x) = nil error; want the prefix refused")
	}
	if s, err := redis.Open(redis.Options{URL: "redis://127.0.0.1:1/0", KeyPrefix: "}x"}); err != nil || s.KeyPrefix() != "}x" {
		t.Errorf("Open(standalone, prefix }x) = %v; want it kept as is", err)
	} else {
		s.Close()
	}
	s, _ := openMiniCluster(t, redis.Options{KeyPrefix: "app:{lanes}"})
	if got := s.KeyPrefix(); got != "app:{lanes}" {
		t.Errorf("KeyPrefix() = %q, want app:{lanes} kept", got)
	}
}

// The store declares every part it has (Caps): the gate uses no other, so
// a part left out would silently go unused. Its bound is Options.Deadline
// (with its default), its kind says which Redis, and its key prefix is
// KeyPrefix's (hash-tagged on a cluster). Open does not connect.
func TestCaps(t *testing.T) {
	tests := []struct {
		name     string
		o        redis.Options
		deadline time.Duration
		kind     string
	}{
		{"url", redis.Options{URL: "redis://127.0.0.1:1/0"}, redis.DefaultDeadline, "redis"},
		{"url and prefix", redis.Options{URL: "redis://127.0.0.1:1/0", KeyPrefix: "app:", Deadline: 250 * time.Millisecond}, 250 * time.Millisecond, "redis"},
		{"sentinel", redis.Options{Sentinels: []string{"127.0.0.1:1"}, Deadline: 3 * time.Second}, 3 * time.Second, "redis-sentinel"},
		{"cluster", redis.Options{Cluster: []string{"127.0.0.1:1"}}, redis.DefaultDeadline, "redis-cluster"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := redis.Open(tt.o)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			want := capgate.StoreCaps{Waitlist: s, Idempotency: s, Adaptive: s,
				Deadline: tt.deadline, Bounded: true, Kind: tt.kind, KeyPrefix: s.KeyPrefix()}
			if got := s.Caps(); got != want {
				t.Errorf("Caps() = %+v, want %+v", got, want)
			}
			if (tt.o.KeyPrefix != "" || len(tt.o.Cluster) > 0) != (want.KeyPrefix != "") {
				t.Errorf("declared key prefix %q with options prefix %q, cluster %v", want.KeyPrefix, tt.o.KeyPrefix, tt.o.Cluster)
			}
		})
	}
}
