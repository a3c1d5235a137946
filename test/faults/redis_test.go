//go:build faults

package faults

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// lanePrefix is the key prefix of every lane.
const lanePrefix = "ocl:capacity:"

// waitPrefix starts the keys of the waitlist (redis/waitpass.lua).
const waitPrefix = lanePrefix + "wait:"

// redisServer is one redis-server (or Sentinel) the suite started.
type redisServer struct {
	*proc
	port int
	dir  string
	args []string
}

func (r *redisServer) addr() string { return fmt.Sprintf("127.0.0.1:%d", r.port) }
func (r *redisServer) url() string  { return fmt.Sprintf("redis://127.0.0.1:%d/0", r.port) }

// startRedis starts a redis-server on a spare loopback port with no
// persistence; extra are more config arguments (e.g. "--replicaof", ...).
func startRedis(t testing.TB, extra ...string) *redisServer {
	t.Helper()
	dir := t.TempDir()
	r := &redisServer{port: freePort(t), dir: dir}
	r.args = append([]string{"--bind", "127.0.0.1", "--port", itoa(r.port), "--dir", dir,
		"--save", "", "--appendonly", "no", "--protected-mode", "no", "--loglevel", "warning"}, extra...)
	r.start(t)
	return r
}

func (r *redisServer) start(t testing.TB) {
	t.Helper()
	r.proc = startProc(t, "redis-server:"+itoa(r.port), exec.Command("redis-server", r.args...))
	r.waitUp(t)
}

// restart starts the same server again (after kill), empty.
func (r *redisServer) restart(t testing.TB) {
	t.Helper()
	r.kill()
	r.start(t)
}

func (r *redisServer) waitUp(t testing.TB) {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: r.addr(), DialTimeout: time.Second, MaxRetries: -1})
	defer c.Close()
	if _, err := waitFor(context.Background(), 20*time.Second, 50*time.Millisecond, func() error {
		if r.exited() {
			return fmt.Errorf("redis-server on %d exited: %s", r.port, r.out.String())
		}
		return c.Ping(context.Background()).Err()
	}); err != nil {
		t.Fatalf("redis-server on %d: %v", r.port, err)
	}
}

// client returns a plain client of this server for inspection.
func (r *redisServer) client(t testing.TB) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: r.addr(), DialTimeout: 2 * time.Second,
		ReadTimeout: 2 * time.Second, MaxRetries: -1, Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// sentinelSet is a master, a replica and three Sentinels watching them.
type sentinelSet struct {
	master, replica *redisServer
	sentinels       []*redisServer
	name            string
}

// startSentinels starts a master, a replica of it, and three Sentinels with
// quorum 2 and short failover timings.
func startSentinels(t testing.TB) *sentinelSet {
	t.Helper()
	s := &sentinelSet{name: "capgate"}
	s.master = startRedis(t)
	s.replica = startRedis(t, "--replicaof", "127.0.0.1", itoa(s.master.port))
	for i := range 3 {
		dir := t.TempDir()
		port := freePort(t)
		conf := filepath.Join(dir, "sentinel.conf")
		body := strings.Join([]string{
			"bind 127.0.0.1",
			"port " + itoa(port),
			"dir " + dir,
			"protected-mode no",
			"loglevel warning",
			fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 2", s.name, s.master.port),
			fmt.Sprintf("sentinel down-after-milliseconds %s 1000", s.name),
			fmt.Sprintf("sentinel failover-timeout %s 5000", s.name),
			fmt.Sprintf("sentinel parallel-syncs %s 1", s.name),
		}, "\n") + "\n"
		if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		r := &redisServer{port: port, dir: dir, args: []string{conf, "--sentinel"}}
		r.proc = startProc(t, fmt.Sprintf("sentinel%d:%d", i+1, port), exec.Command("redis-server", r.args...))
		r.waitUp(t)
		s.sentinels = append(s.sentinels, r)
	}
	// Wait until the replica is in sync and every Sentinel sees it.
	mc := s.master.client(t)
	if _, err := waitFor(context.Background(), 30*time.Second, 100*time.Millisecond, func() error {
		info, err := mc.Info(context.Background(), "replication").Result()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "connected_slaves:1") || !strings.Contains(info, "state=online") {
			return fmt.Errorf("replica not online yet")
		}
		for _, sen := range s.sentinels {
			sc := goredis.NewSentinelClient(&goredis.Options{Addr: sen.addr(), DialTimeout: time.Second})
			reps, err := sc.Replicas(context.Background(), s.name).Result()
			_ = sc.Close()
			if err != nil || len(reps) == 0 {
				return fmt.Errorf("sentinel %s does not see the replica yet (%v)", sen.addr(), err)
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("sentinel set: %v", err)
	}
	return s
}

// addrs is the --redis-sentinels value.
func (s *sentinelSet) addrs() string {
	var a []string
	for _, r := range s.sentinels {
		a = append(a, r.addr())
	}
	return strings.Join(a, ";")
}

// currentMaster asks the first Sentinel that answers which port is master.
func (s *sentinelSet) currentMaster(ctx context.Context) (int, error) {
	var last error
	for _, sen := range s.sentinels {
		if sen.exited() {
			continue
		}
		sc := goredis.NewSentinelClient(&goredis.Options{Addr: sen.addr(), DialTimeout: time.Second, ReadTimeout: time.Second})
		addr, err := sc.GetMasterAddrByName(ctx, s.name).Result()
		_ = sc.Close()
		if err != nil {
			last = err
			continue
		}
		return strconv.Atoi(addr[1])
	}
	return 0, fmt.Errorf("no sentinel answered: %w", last)
}

// lanes returns the live (unexpired, by Redis's clock) lease count of every
// lane key that has one, and the members of each. It is not one atomic
// read: it lists the keys, then reads each, so of a call acquiring meanwhile
// it may see the leases in lanes that existed and miss those in lanes it
// created. Take it while no call acquires (once the calls reached the
// upstream), or wait until it shows every lease expected.
func lanes(ctx context.Context, c *goredis.Client) (map[string][]string, error) {
	tm, err := c.Time(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("redis time: %w", err)
	}
	now := strconv.FormatInt(tm.UnixMilli(), 10)
	keys, err := c.Keys(ctx, lanePrefix+"*").Result()
	if err != nil {
		return nil, fmt.Errorf("redis keys: %w", err)
	}
	tagged, err := c.Keys(ctx, "{"+strings.TrimSuffix(lanePrefix, ":")+"}:*").Result() // the cluster key layout
	if err != nil {
		return nil, fmt.Errorf("redis keys: %w", err)
	}
	keys = append(keys, tagged...)
	out := map[string][]string{}
	for _, k := range keys {
		if strings.HasPrefix(k, waitPrefix) || strings.HasPrefix(k, clusterLanePrefix+"wait:") {
			continue // the waitlist, not a lane (see waitlistKeys)
		}
		m, err := c.ZRangeByScore(ctx, k, &goredis.ZRangeBy{Min: "(" + now, Max: "+inf"}).Result()
		if err != nil {
			return nil, fmt.Errorf("zrange %s: %w", k, err)
		}
		if len(m) > 0 {
			out[k] = m
		}
	}
	return out, nil
}

// laneSummary is "key=n, …" for the non-empty lanes, sorted.
func laneSummary(l map[string][]string) string {
	var parts []string
	for k, m := range l {
		k = strings.TrimPrefix(strings.TrimPrefix(k, lanePrefix), clusterLanePrefix)
		parts = append(parts, fmt.Sprintf("%s=%d", k, len(m)))
	}
	sort.Strings(parts)
	if len(parts) == 0 {
		return "(empty)"
	}
	return strings.Join(parts, ", ")
}

// lanesEmpty waits up to timeout for every lane to be empty and returns how
// long that took.
func lanesEmpty(t testing.TB, c *goredis.Client, timeout time.Duration) (time.Duration, error) {
	t.Helper()
	var last map[string][]string
	d, err := waitFor(context.Background(), timeout, 25*time.Millisecond, func() error {
		l, err := lanes(context.Background(), c)
		if err != nil {
			return err
		}
		last = l
		if len(l) > 0 {
			return fmt.Errorf("lanes not empty: %s", laneSummary(l))
		}
		return nil
	})
	_ = last
	return d, err
}
