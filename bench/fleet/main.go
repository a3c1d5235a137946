// Command fleet drives a fleet of gateways sharing one Redis for
// bench/fleet.sh and prints one JSON object per measurement on stdout.
//
//	fleet run  -urls U1,U2,… -users FILE -rate 150 (-redis URL | -cluster SEEDS)
//	    a steady mix of heavy calls spread over the gateways; Redis's
//	    commands and CPU per gated call over a window; then the p50/p99 of
//	    acquire (a 5-lane call through redis.Store) under the same load;
//	    then the lane keys left once the calls have ended
//	fleet seed -users 100000 -tasks 20 (-redis URL | -cluster SEEDS)
//	    one live lease in each of that many user and task lanes, and the
//	    Redis memory that took
//
// Everything it talks to is on loopback; the Redis it is pointed at must be
// one nobody else uses (seed -flush empties it).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/bench/internal/subcmd"
	"github.com/capgate/capgate/internal/randhex"
	"github.com/capgate/capgate/redis"
)

func main() {
	subcmd.Main("fleet", map[string]func([]string) error{"run": runCmd, "seed": seedCmd, "waiters": waitersCmd})
}

// target is the Redis under test: its raw client, the store's options and
// the lane key prefix of its layout.
type target struct {
	raw    goredis.UniversalClient
	opts   redis.Options
	prefix string
}

func openTarget(url, cluster string) (*target, error) {
	switch {
	case cluster != "":
		seeds := strings.Split(cluster, ",")
		p, _ := redis.KeyLayoutCluster.Prefix("ocl:capacity")
		return &target{raw: goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: seeds, Protocol: 2, DisableIdentity: true}),
			opts: redis.Options{Cluster: seeds}, prefix: p}, nil
	case url != "":
		o, err := goredis.ParseURL(url)
		if err != nil {
			return nil, err
		}
		o.Protocol, o.DisableIdentity = 2, true
		return &target{raw: goredis.NewClient(o), opts: redis.Options{URL: url}, prefix: "ocl:capacity"}, nil
	}
	return nil, errors.New("set -redis or -cluster")
}

// masters calls fn on every master (the one server when standalone).
func (t *target) masters(ctx context.Context, fn func(ctx context.Context, c *goredis.Client) error) error {
	if cc, ok := t.raw.(*goredis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, fn)
	}
	return fn(ctx, t.raw.(*goredis.Client))
}

// stats are Redis's counters summed over the masters.
type stats struct {
	Commands int64   // INFO commandstats calls, the commands scripts run included
	Sent     int64   // of those, the lane commands clients send: EVALSHA, EVAL, ZREM
	CPU      float64 // used_cpu_user + used_cpu_sys, seconds
	Memory   int64   // used_memory, bytes
	Keys     int64   // DBSIZE
}

func (t *target) stats(ctx context.Context) (stats, error) {
	var mu sync.Mutex
	var s stats
	err := t.masters(ctx, func(ctx context.Context, c *goredis.Client) error {
		info, err := c.Info(ctx, "commandstats", "cpu", "memory").Result()
		if err != nil {
			return err
		}
		n, err := c.DBSize(ctx).Result()
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		s.Keys += n
		for _, line := range strings.Split(info, "\r\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			switch {
			case strings.HasPrefix(k, "cmdstat_"):
				calls, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
				c, _ := strconv.ParseInt(calls, 10, 64)
				s.Commands += c
				switch k {
				case "cmdstat_evalsha", "cmdstat_eval", "cmdstat_zrem":
					s.Sent += c
				}
			case k == "used_cpu_user" || k == "used_cpu_sys":
				f, _ := strconv.ParseFloat(v, 64)
				s.CPU += f
			case k == "used_memory":
				m, _ := strconv.ParseInt(v, 10, 64)
				s.Memory += m
			}
		}
		return nil
	})
	return s, err
}

// laneKeys counts the lane keys under the target's prefix on every master.
func (t *target) laneKeys(ctx context.Context) (int, error) {
	var n atomic.Int64
	err := t.masters(ctx, func(ctx context.Context, c *goredis.Client) error {
		iter := c.Scan(ctx, 0, t.prefix+":*", 1000).Iterator()
		for iter.Next(ctx) {
			n.Add(1)
		}
		return iter.Err()
	})
	return int(n.Load()), err
}

type user struct {
	Token    string `json:"token"`
	Username string `json:"username"`
}

func readUsers(path string) ([]user, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var us []user
	if err := json.Unmarshal(b, &us); err != nil || len(us) == 0 {
		return nil, fmt.Errorf("%s: want a tokens file with users: %v", path, err)
	}
	return us, nil
}

// kinds is the mix: bulk semantic $match, single-row semantic $match,
// reranker $match, $rerank.
var kinds = []struct{ path, body string }{
	{"/concepts/$match/?semantic=true", `{"rows":[{"name":"a"},{"name":"b"},{"name":"c"},{"name":"d"},{"name":"e"}]}`},
	{"/concepts/$match/?semantic=true", `{"rows":[{"name":"malaria"}]}`},
	{"/concepts/$match/?reranker=true", `{"rows":[{"name":"a"},{"name":"b"},{"name":"c"}]}`},
	{"/concepts/$rerank/", `{"q":"malaria","rows":[{"name":"a"},{"name":"b"}]}`},
}

// runResult is what run prints.
type runResult struct {
	Gateways         int     `json:"gateways"`
	Rate             float64 `json:"rate"`
	Calls            int64   `json:"calls"`
	Gated            int64   `json:"gated_in_window"`
	Unavailable      int64   `json:"unavailable"`
	Errors           int64   `json:"errors"`
	CommandsPerCall  float64 `json:"redis_commands_per_call"`
	SentPerCall      float64 `json:"sent_commands_per_call"`
	IdleCPUPerSecMS  float64 `json:"redis_idle_cpu_ms_per_s"`
	CPUPerCallUS     float64 `json:"redis_cpu_us_per_call"`
	CallsPerCoreSec  float64 `json:"gated_calls_per_redis_core_second"`
	AcquireP50MS     float64 `json:"acquire_p50_ms"`
	AcquireP99MS     float64 `json:"acquire_p99_ms"`
	AcquireN         int     `json:"acquires_probed"`
	KeysAfter        int     `json:"lane_keys_after"`
	KeysGoneAfterSec float64 `json:"lane_keys_gone_after_s"`
}

func runCmd(args []string) error {
	fs := flag.NewFlagSet("fleet run", flag.ContinueOnError)
	urls := fs.String("urls", "", "the gateways, comma-separated")
	usersFile := fs.String("users", "", "tokens file")
	rate := fs.Float64("rate", 150, "heavy calls per second, over the whole fleet")
	warmup := fs.Duration("warmup", 2*time.Second, "load before the window")
	window := fs.Duration("window", 10*time.Second, "the window Redis's counters are read over")
	probe := fs.Duration("probe", 5*time.Second, "how long acquires are timed after the window, under the same load")
	url := fs.String("redis", "", "standalone Redis URL")
	cluster := fs.String("cluster", "", "Redis Cluster seeds")
	if err := fs.Parse(args); err != nil {
		return err
	}
	gws := strings.Split(*urls, ",")
	users, err := readUsers(*usersFile)
	if err != nil {
		return err
	}
	tg, err := openTarget(*url, *cluster)
	if err != nil {
		return err
	}
	ctx := context.Background()
	// Redis's own CPU with no calls (cron, cluster bus, replication
	// pings), over 2 s; it is taken off the window's.
	idle0, err := tg.stats(ctx)
	if err != nil {
		return err
	}
	time.Sleep(2 * time.Second)
	idle1, err := tg.stats(ctx)
	if err != nil {
		return err
	}
	idlePerSec := (idle1.CPU - idle0.CPU) / 2
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil,
		MaxIdleConnsPerHost: 256, IdleConnTimeout: time.Minute}}

	var (
		res     = runResult{Gateways: len(gws), Rate: *rate}
		counted atomic.Bool // calls ending now count in the window
		calls   atomic.Int64
		gated   atomic.Int64
		unavail atomic.Int64
		errs    atomic.Int64
		wg      sync.WaitGroup
	)
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	go func() {
		tick := time.NewTicker(time.Duration(float64(time.Second) / *rate))
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-loadCtx.Done():
				return
			case <-tick.C:
			}
			gw, u, k := gws[i%len(gws)], users[mrand.IntN(len(users))], kinds[mrand.IntN(len(kinds))]
			wg.Go(func() {
				req, _ := http.NewRequest(http.MethodPost, gw+k.path, strings.NewReader(k.body))
				req.Header.Set("Authorization", "Token "+u.Token)
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				calls.Add(1)
				if err != nil {
					errs.Add(1)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				d := resp.Header.Get("X-OCL-Capacity-Decision")
				if d == "unavailable" {
					unavail.Add(1)
				}
				if d != "" && counted.Load() {
					gated.Add(1)
				}
			})
		}
	}()

	time.Sleep(*warmup)
	before, err := tg.stats(ctx)
	if err != nil {
		return err
	}
	counted.Store(true)
	windowStart := time.Now()
	time.Sleep(*window)
	counted.Store(false)
	elapsed := time.Since(windowStart).Seconds()
	after, err := tg.stats(ctx)
	if err != nil {
		return err
	}
	res.Gated = gated.Load()
	if res.Gated > 0 {
		res.CommandsPerCall = float64(after.Commands-before.Commands) / float64(res.Gated)
		res.SentPerCall = float64(after.Sent-before.Sent) / float64(res.Gated)
		res.IdleCPUPerSecMS = idlePerSec * 1e3
		res.CPUPerCallUS = (after.CPU - before.CPU - idlePerSec*elapsed) * 1e6 / float64(res.Gated)
		if res.CPUPerCallUS > 0 {
			res.CallsPerCoreSec = 1e6 / res.CPUPerCallUS
		}
	}

	lat, err := probeAcquire(ctx, tg, *probe)
	if err != nil {
		return err
	}
	slices.Sort(lat)
	res.AcquireN = len(lat)
	if len(lat) > 0 {
		res.AcquireP50MS = ms(lat[len(lat)/2])
		res.AcquireP99MS = ms(lat[len(lat)*99/100])
	}

	stopLoad() // and again by the defer on error paths
	wg.Wait()
	stopped := time.Now()
	res.Calls, res.Unavailable, res.Errors = calls.Load(), unavail.Load(), errs.Load()
	for {
		n, err := tg.laneKeys(ctx)
		if err != nil {
			return err
		}
		res.KeysAfter = n
		if n == 0 || time.Since(stopped) > 10*time.Second {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	res.KeysGoneAfterSec = time.Since(stopped).Seconds()
	return json.NewEncoder(os.Stdout).Encode(res)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// probeAcquire times acquires of a 5-lane call (and releases them) through
// a redis.Store with the gateways' settings, one every 20 ms, for d.
func probeAcquire(ctx context.Context, tg *target, d time.Duration) ([]time.Duration, error) {
	s, err := redis.Open(tg.opts)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	k := capgate.Keys{Prefix: tg.prefix, TaskID: "probe"}
	var lat []time.Duration
	end := time.Now().Add(d)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for i := 0; time.Now().Before(end); i++ {
		<-tick.C
		keys := []string{k.Lane(capgate.LaneName("api_heavy"), ""), k.Lane(capgate.LaneName("api_heavy_task"), "probe"), k.Lane(capgate.LaneName("es2_knn"), ""),
			k.Lane(capgate.LaneName("tier"), "core"), k.Lane(capgate.LaneName("user"), "probe-"+strconv.Itoa(i%50))}
		req := capgate.AcquireRequest{Token: token(), Keys: keys, Limits: []int{1e5, 1e5, 1e5, 1e5, 1e5}, Lease: time.Minute}
		start := time.Now()
		_, err := s.Acquire(ctx, req, make([]int, len(keys)))
		if err != nil {
			return nil, fmt.Errorf("probe acquire: %w", err)
		}
		lat = append(lat, time.Since(start))
		if err := s.Release(ctx, req.Token, keys); err != nil {
			return nil, fmt.Errorf("probe release: %w", err)
		}
	}
	return lat, nil
}

func token() string {
	return randhex.String(16)
}

// seedResult is what seed prints.
type seedResult struct {
	Users, Tasks  int
	MemoryBefore  int64 `json:"memory_before"`
	MemoryAfter   int64 `json:"memory_after"`
	BytesPerLease int64 `json:"bytes_per_lease"`
	Keys          int64 `json:"keys"`
}

func seedCmd(args []string) error {
	fs := flag.NewFlagSet("fleet seed", flag.ContinueOnError)
	nUsers := fs.Int("users", 100000, "user lanes, each with one live lease")
	nTasks := fs.Int("tasks", 20, "task lanes, each with one live lease")
	url := fs.String("redis", "", "standalone Redis URL")
	cluster := fs.String("cluster", "", "Redis Cluster seeds")
	flush := fs.Bool("flush", false, "empty every master instead")
	if err := fs.Parse(args); err != nil {
		return err
	}
	tg, err := openTarget(*url, *cluster)
	if err != nil {
		return err
	}
	ctx := context.Background()
	if *flush {
		return tg.masters(ctx, func(ctx context.Context, c *goredis.Client) error { return c.FlushAll(ctx).Err() })
	}
	before, err := tg.stats(ctx)
	if err != nil {
		return err
	}
	now, err := tg.raw.Time(ctx).Result()
	if err != nil {
		return err
	}
	expiry := float64(now.Add(10 * time.Minute).UnixMilli())
	k := capgate.Keys{Prefix: tg.prefix}
	var keys []string
	for i := range *nTasks {
		keys = append(keys, k.Lane(capgate.LaneName("api_heavy_task"), "gw"+strconv.Itoa(i+1)))
	}
	for i := range *nUsers {
		keys = append(keys, k.Lane(capgate.LaneName("user"), "user-"+strconv.Itoa(i)))
	}
	for lo := 0; lo < len(keys); lo += 1000 {
		_, err := tg.raw.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for _, key := range keys[lo:min(lo+1000, len(keys))] {
				p.ZAdd(ctx, key, goredis.Z{Score: expiry, Member: token()})
				p.PExpire(ctx, key, 20*time.Minute)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("seed: %w", err)
		}
	}
	after, err := tg.stats(ctx)
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(seedResult{Users: *nUsers, Tasks: *nTasks, MemoryBefore: before.Memory,
		MemoryAfter: after.Memory, BytesPerLease: (after.Memory - before.Memory) / int64(len(keys)), Keys: after.Keys})
}
