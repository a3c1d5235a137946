package redis_test

import (
	"context"
	"errors"

	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/lanetest"
	"github.com/capgate/capgate/redis"
)

// flushCluster empties every master of the test cluster.
func flushCluster(seeds []string) error {
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: seeds})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.ForEachMaster(ctx, func(ctx context.Context, n *goredis.Client) error {
		return n.FlushDB(ctx).Err()
	})
}

// openClusterHarness opens a store on the cluster with opts (the seeds
// filled in; zero bounds made generous for a loaded machine), and a raw
// cluster client for the test hooks.
func openClusterHarness(t testing.TB, seeds []string, opts redis.Options) harness {
	t.Helper()
	opts.Cluster = seeds
	if opts.Deadline == 0 {
		opts.Deadline, opts.Timeout, opts.MaxInFlight, opts.MaxQueued = 20*time.Second, 10*time.Second, 16, 64
	}
	s, err := redis.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	raw := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: seeds, DialTimeout: 5 * time.Second,
		ReadTimeout: 5 * time.Second, Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { _ = raw.Close() })
	return harness{s, raw}
}

func TestStoreCluster(t *testing.T) {
	seeds := redis.RealRedisCluster(t)
	lanetest.RunStore(t, func(t testing.TB) lanetest.Store {
		return openClusterHarness(t, seeds, redis.Options{})
	})
}

func TestGateCluster(t *testing.T) {
	seeds := redis.RealRedisCluster(t)
	lanetest.RunGate(t, func(t testing.TB) lanetest.Store {
		return openClusterHarness(t, seeds, redis.Options{})
	})
}

// master is one master of the test cluster and the slots it serves.
type master struct {
	id, addr string
	slots    [][2]int64
}

func masters(t testing.TB, raw goredis.UniversalClient) []master {
	t.Helper()
	slots, err := raw.ClusterSlots(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]*master{}
	var order []string
	for _, s := range slots {
		n := s.Nodes[0]
		if byID[n.ID] == nil {
			byID[n.ID] = &master{id: n.ID, addr: n.Addr}
			order = append(order, n.ID)
		}
		byID[n.ID].slots = append(byID[n.ID].slots, [2]int64{int64(s.Start), int64(s.End)})
	}
	var out []master
	for _, id := range order {
		out = append(out, *byID[id])
	}
	return out
}

func (m master) owns(slot int64) bool {
	for _, r := range m.slots {
		if slot >= r[0] && slot <= r[1] {
			return true
		}
	}
	return false
}

func nodeClient(t testing.TB, addr string) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr, DialTimeout: 5 * time.Second, ReadTimeout: 5 * time.Second,
		MaxRetries: -1, Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// prefixOn returns a fresh hash-tagged prefix whose slot m owns.
func prefixOn(t testing.TB, raw goredis.UniversalClient, m master) (string, int64) {
	t.Helper()
	for range 10000 {
		p := lanetest.NewPrefix()
		slot, err := raw.ClusterKeySlot(t.Context(), p).Result()
		if err != nil {
			t.Fatal(err)
		}
		if m.owns(slot) {
			return p, slot
		}
	}
	t.Fatalf("no prefix found on %s", m.addr)
	return "", 0
}

func clusterAcquire(t testing.TB, s *redis.Store, token string, keys []string, limit int) (bool, []int) {
	t.Helper()
	counts := make([]int, len(keys))
	req := capgate.AcquireRequest{Token: token, Keys: keys, Limits: slices.Repeat([]int{limit}, len(keys)), Lease: time.Minute}
	taken, err := s.Acquire(t.Context(), req, counts)
	if err != nil {
		t.Fatalf("acquire %v: %v", keys, err)
	}
	return taken, counts
}

// Each master loads the scripts for itself: after SCRIPT FLUSH on every
// node, calls on lanes of every master still work (EVALSHA, NOSCRIPT,
// EVAL on that node), and each master then holds the script.
func TestClusterScriptsLoadPerNode(t *testing.T) {
	h := openClusterHarness(t, redis.RealRedisCluster(t), redis.Options{})
	ms := masters(t, h.raw)
	if len(ms) < 3 {
		t.Fatalf("%d masters, want 3", len(ms))
	}
	for _, m := range ms {
		if err := nodeClient(t, m.addr).ScriptFlush(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range ms {
		p, _ := prefixOn(t, h.raw, m)
		keys := []string{p + "api_heavy", p + "user:alice"}
		tok := lanetest.NewToken()
		if taken, _ := clusterAcquire(t, h.Store, tok, keys, 1); !taken {
			t.Errorf("%s: acquire not taken", m.addr)
		}
		if held, err := h.Renew(t.Context(), tok, keys, time.Minute); err != nil || held != 2 {
			t.Errorf("%s: renew = %d, %v", m.addr, held, err)
		}
		if err := h.Release(t.Context(), tok, keys); err != nil {
			t.Errorf("%s: release: %v", m.addr, err)
		}
		ok, err := nodeClient(t, m.addr).ScriptExists(t.Context(), redis.Scripts["acquire.lua"].Script.Hash()).Result()
		if err != nil || !ok[0] {
			t.Errorf("%s: acquire.lua loaded = %v, %v; want true", m.addr, ok, err)
		}
	}
}

// Keys under a hash-tagged prefix are listed from the slot's master; keys
// under a prefix without one are gathered from every master.
func TestClusterKeys(t *testing.T) {
	h := openClusterHarness(t, redis.RealRedisCluster(t), redis.Options{})
	p := lanetest.NewPrefix()
	want := []string{p + "user:a", p + "user:b", p + "user:c"}
	for _, k := range want {
		h.SetLease(t, k, lanetest.NewToken(), time.Minute)
	}
	h.SetLease(t, p+"tier:core", lanetest.NewToken(), time.Minute)
	got, err := h.Keys(t.Context(), p+"user:")
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("Keys(tagged) = %q, %v; want %q", got, err, want)
	}

	// No hash tag: the keys spread over the masters.
	untagged := strings.NewReplacer("{", "", "}", "").Replace(lanetest.NewPrefix())
	var spread []string
	nodes := map[string]bool{}
	ms := masters(t, h.raw)
	for i := range 30 {
		k := untagged + strconv.Itoa(i)
		spread = append(spread, k)
		h.SetLease(t, k, lanetest.NewToken(), time.Minute)
		slot, _ := h.raw.ClusterKeySlot(t.Context(), k).Result()
		for _, m := range ms {
			if m.owns(slot) {
				nodes[m.addr] = true
			}
		}
	}
	if len(nodes) < 2 {
		t.Fatalf("30 untagged keys on %d masters; the test needs them spread", len(nodes))
	}
	slices.Sort(spread)
	got, err = h.Keys(t.Context(), untagged)
	if err != nil || !slices.Equal(got, spread) {
		t.Errorf("Keys(untagged) = %d keys, %v; want the %d keys from %d masters", len(got), err, len(spread), len(nodes))
	}
}

// A resharding that moves the lanes' slot while the store holds the old
// layout: during the migration new lanes are created on the new owner
// (ASK), and after it the old owner answers MOVED; the client follows both
// and the counts stay exact.
func TestClusterFollowsAMovingSlot(t *testing.T) {
	h := openClusterHarness(t, redis.RealRedisCluster(t), redis.Options{})
	ms := masters(t, h.raw)
	from, to := ms[0], ms[1]
	p, slot := prefixOn(t, h.raw, from)
	src, dst := nodeClient(t, from.addr), nodeClient(t, to.addr)
	finished := false
	t.Cleanup(func() {
		if !finished { // leave no slot half-migrated for later runs
			_ = dst.Do(context.Background(), "CLUSTER", "SETSLOT", slot, "STABLE").Err()
			_ = src.Do(context.Background(), "CLUSTER", "SETSLOT", slot, "STABLE").Err()
		}
	})

	old := []string{p + "api_heavy", p + "user:alice"}
	if taken, _ := clusterAcquire(t, h.Store, lanetest.NewToken(), old, 5); !taken {
		t.Fatal("first acquire not taken")
	}

	do := func(c *goredis.Client, args ...any) {
		t.Helper()
		if err := c.Do(t.Context(), args...).Err(); err != nil {
			t.Fatalf("%v on %s: %v", args, c.Options().Addr, err)
		}
	}
	do(dst, "CLUSTER", "SETSLOT", slot, "IMPORTING", from.id)
	do(src, "CLUSTER", "SETSLOT", slot, "MIGRATING", to.id)

	// During the migration: a one-key operation on a lane the old owner
	// lacks is redirected with ASK; an acquire over several lanes is
	// answered TRYAGAIN (Redis won't run it across a moving slot) and
	// fails open within the deadline, taking nothing.
	fresh := []string{p + "es2_knn", p + "user:bob"}
	counts := make([]int, 1)
	if err := h.Count(t.Context(), fresh[:1], counts); err != nil || counts[0] != 0 {
		t.Fatalf("count during the migration = %v, %v; want [0] (ASK followed)", counts, err)
	}
	req := capgate.AcquireRequest{Token: lanetest.NewToken(), Keys: fresh, Limits: []int{5, 5}, Lease: time.Minute}
	start := time.Now()
	taken, err := h.Acquire(t.Context(), req, make([]int, 2))
	within(t, "acquire during the migration", start, 20*time.Second)
	if err != nil && !strings.Contains(err.Error(), "TRYAGAIN") {
		t.Fatalf("acquire during the migration: %v; want it taken, or TRYAGAIN", err)
	}
	wantFresh := int64(0)
	if err == nil && taken {
		wantFresh = 2
	}

	host, port, _ := strings.Cut(to.addr, ":")
	args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
	for _, k := range old {
		args = append(args, k)
	}
	do(src, args...)
	for _, m := range ms {
		do(nodeClient(t, m.addr), "CLUSTER", "SETSLOT", slot, "NODE", to.id)
	}
	finished = true

	// The store still routes the slot to the old owner: MOVED.
	taken, got := clusterAcquire(t, h.Store, lanetest.NewToken(), old, 5)
	if !taken || !slices.Equal(got, []int{1, 1}) {
		t.Fatalf("acquire after the move = %v, %v; want true, [1 1] (the lease from before the move)", taken, got)
	}
	if n, err := dst.Exists(t.Context(), append(old, fresh...)...).Result(); err != nil || n != 2+wantFresh {
		t.Errorf("the new owner holds %d lanes (%v), want %d", n, err, 2+wantFresh)
	}
}

// commandCalls returns the calls of each command on a node so far.
func commandCalls(t testing.TB, c *goredis.Client) map[string]int {
	t.Helper()
	info, err := c.Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		n, _, _ := strings.Cut(rest, ",")
		out[strings.TrimPrefix(name, "cmdstat_")], _ = strconv.Atoi(n)
	}
	return out
}

// A command whose answer is lost is never sent again: an acquire that
// timed out may still run, and a second run would count the call's own
// lease against it. A script keeps the lanes' master busy past the socket
// timeout, but not past a resend; once it is done the master has run the
// acquire exactly once (go-redis's cluster client, left alone, resends on
// a timeout, and the master runs it twice).
func TestClusterNeverResendsACommand(t *testing.T) {
	h := openClusterHarness(t, redis.RealRedisCluster(t), redis.Options{Timeout: 200 * time.Millisecond, Deadline: 3 * time.Second})
	m := masters(t, h.raw)[0]
	p, _ := prefixOn(t, h.raw, m)
	keys := []string{p + "api_heavy"}
	clusterAcquire(t, h.Store, lanetest.NewToken(), keys, 5) // the layout known, the script loaded

	node := nodeClient(t, m.addr)
	before := commandCalls(t, node)
	// Redis reads no socket while a script runs (for under lua-time-limit).
	const busy = `local t = redis.call('TIME'); local stop = t[1] * 1000000 + t[2] + ARGV[1]
while true do t = redis.call('TIME'); if t[1] * 1000000 + t[2] >= stop then return 1 end end`
	done := make(chan error, 1)
	go func() { done <- nodeClient(t, m.addr).Eval(context.Background(), busy, nil, 350000).Err() }()
	// Wait for the busy script to start: a PING from another connection
	// stops answering.
	probe := goredis.NewClient(&goredis.Options{Addr: m.addr, ReadTimeout: 50 * time.Millisecond, MaxRetries: -1, Protocol: 2, DisableIdentity: true})
	defer probe.Close()
	for wait := time.Now().Add(5 * time.Second); probe.Ping(t.Context()).Err() == nil; {
		if len(done) > 0 || time.Now().After(wait) {
			t.Fatal("the busy script did not start")
		}
	}

	req := capgate.AcquireRequest{Token: lanetest.NewToken(), Keys: keys, Limits: []int{5}, Lease: time.Minute}
	// Whether the acquire fails at the socket timeout or (on a slow
	// machine) is sent after the script, Redis must run it once.
	_, _ = h.Acquire(t.Context(), req, make([]int, 1))
	if err := <-done; err != nil {
		t.Fatalf("busy script: %v", err)
	}
	ran := func() int {
		after := commandCalls(t, node)
		return after["evalsha"] + after["eval"] - before["evalsha"] - before["eval"] - 1 // less the busy script
	}
	deadline := time.Now().Add(5 * time.Second)
	for ran() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // Redis reads the acquire's socket in its next loop
	}
	if got := ran(); got != 1 {
		t.Errorf("the busy master ran the acquire %d times, want once", got)
	}
}

// A cluster whose seed never answers fails at the operation deadline.
func TestClusterHungSeedFailsAtTheDeadline(t *testing.T) {
	srv := newHungServer(t)
	s, err := redis.Open(redis.Options{Cluster: []string{srv.Addr}, Timeout: socketTimeout, Deadline: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	start := time.Now()
	_, err = s.Acquire(t.Context(), acquireReq(), make([]int, 1))
	within(t, "acquire", start, 2*time.Second)
	var de *redis.DeadlineError
	if !errors.As(err, &de) {
		t.Errorf("acquire on a hung cluster: %v, want a *DeadlineError", err)
	}
}

func TestClusterOptions(t *testing.T) {
	opts := redis.Options{Cluster: []string{"n1:7000", "n2:7001"}, Password: "s3cret", Timeout: 300 * time.Millisecond}
	co, err := redis.ClusterOptions(opts)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(co.Addrs, opts.Cluster) || co.Password != "s3cret" {
		t.Errorf("addrs %v password %q", co.Addrs, co.Password)
	}
	if co.MaxRetries != -1 || co.DialerRetries != 1 || !co.ContextTimeoutEnabled || co.MaxRedirects < 1 ||
		co.DialTimeout != opts.Timeout || co.ReadTimeout != opts.Timeout || co.WriteTimeout != opts.Timeout ||
		co.PoolSize != redis.DefaultMaxInFlight || co.NewClient == nil {
		t.Errorf("retries %d/%d, redirects %d, context timeouts %v, timeouts %v/%v/%v, pool %d; want -1/1, ≥ 1, true, %v, %d, and node clients of its own",
			co.MaxRetries, co.DialerRetries, co.MaxRedirects, co.ContextTimeoutEnabled, co.DialTimeout, co.ReadTimeout, co.WriteTimeout,
			co.PoolSize, opts.Timeout, redis.DefaultMaxInFlight)
	}
	s, err := redis.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got, want := s.String(), "redis-cluster://:xxxxx@n1:7000,n2:7001"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	for _, bad := range []redis.Options{
		{URL: "redis://host", Cluster: []string{"n:1"}},
		{Sentinels: []string{"s:1"}, Cluster: []string{"n:1"}},
		{Cluster: []string{"n:1"}, DB: 2},
	} {
		if _, err := redis.Open(bad); err == nil {
			t.Errorf("Open(%+v): no error", bad)
		}
	}
}
