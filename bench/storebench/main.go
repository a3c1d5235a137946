// Command storebench drives the lane stores for bench/run.sh and prints one
// JSON object per measurement on stdout.
//
//	storebench pairs -redis URL -c 8 -d 2s      acquire+release pairs through the Redis store
//	storebench pairs -memory -c 2 -d 2s         the same through the in-process store
//	storebench pairs -raw redis/acquire.lua -redis URL -c 8
//	                                            the same commands sent with go-redis alone, no store
//	storebench scale -redis URL -users 100000   acquire and Gate.Status with N users holding leases
//
// Every pair is what a semantic $match costs the store: an acquire across
// five lanes (api_heavy, the task, es2_knn, the tier, the user; each worker
// its own user) and a release of the same token. The Redis database it is
// pointed at is flushed by scale: give it one nobody else uses.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
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
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/redis"
	"github.com/capgate/capgate/settings"
	"github.com/capgate/capgate/status"
)

func main() {
	subcmd.Main("storebench", map[string]func([]string) error{"pairs": pairs, "scale": scale})
}

const lease = time.Minute

// keysFor returns the five lanes of a semantic $match by user.
func keysFor(user string) []string {
	k := capgate.Keys{TaskID: "bench"}
	return []string{
		k.Lane(capgate.LaneName("api_heavy"), ""),
		k.Lane(capgate.LaneName("api_heavy_task"), k.TaskID),
		k.Lane(capgate.LaneName("es2_knn"), ""),
		k.Lane(capgate.LaneName("tier"), string("core")),
		k.Lane(capgate.LaneName("user"), user),
	}
}

func newToken() string {
	return randhex.String(16)
}

// pairResult is one run of pairs.
type pairResult struct {
	Store       string  `json:"store"`
	Concurrency int     `json:"concurrency"`
	GOMAXPROCS  int     `json:"gomaxprocs"`
	Pairs       int     `json:"pairs"`
	Errors      int64   `json:"errors"`
	FirstError  string  `json:"first_error,omitempty"`
	Seconds     float64 `json:"seconds"`
	PairsPerSec float64 `json:"pairs_per_s"`
	P50us       float64 `json:"p50_us"`
	P99us       float64 `json:"p99_us"`
	AcqP50us    float64 `json:"acquire_p50_us"`
	RelP50us    float64 `json:"release_p50_us"`
}

func openStore(url string, inMemory bool, maxInFlight int) (capgate.LaneStore, func(), error) {
	if inMemory {
		return memory.New(nil), func() {}, nil
	}
	if url == "" {
		return nil, nil, errors.New("give -redis URL or -memory")
	}
	s, err := redis.Open(redis.Options{URL: url, MaxInFlight: maxInFlight})
	if err != nil {
		return nil, nil, err
	}
	return s, func() { _ = s.Close() }, nil
}

func pairs(args []string) error {
	fs := flag.NewFlagSet("pairs", flag.ExitOnError)
	url := fs.String("redis", "", "Redis URL")
	inMemory := fs.Bool("memory", false, "use the in-process store")
	conc := fs.Int("c", 1, "concurrent workers, each one pair in flight")
	dur := fs.Duration("d", 2*time.Second, "how long to run")
	maxInFlight := fs.Int("max-in-flight", 0, "Redis store MaxInFlight (0: the store's default)")
	raw := fs.String("raw", "", "send the acquire script at this path and the release's ZREMs with go-redis alone, without the store")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var store capgate.LaneStore
	closeStore := func() {}
	var err error
	if *raw != "" {
		store, closeStore, err = openRaw(*url, *raw, *conc)
	} else {
		store, closeStore, err = openStore(*url, *inMemory, *maxInFlight)
	}
	if err != nil {
		return err
	}
	defer closeStore()
	ctx := context.Background()

	// Warm up: connections made, script loaded.
	if err := onePair(ctx, store, keysFor("warm"), nil); err != nil {
		return fmt.Errorf("warm up: %w", err)
	}

	var (
		stop     atomic.Bool
		errs     atomic.Int64
		firstErr atomic.Value
		wg       sync.WaitGroup
		mu       sync.Mutex
		pair     []time.Duration
		acq, rel []time.Duration
	)
	start := time.Now()
	for w := range *conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			keys := keysFor("u" + strconv.Itoa(w))
			var lp, la, lr []time.Duration
			var t [2]time.Duration
			for !stop.Load() {
				t0 := time.Now()
				if err := onePair(ctx, store, keys, &t); err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				lp = append(lp, time.Since(t0))
				la = append(la, t[0])
				lr = append(lr, t[1])
			}
			mu.Lock()
			pair, acq, rel = append(pair, lp...), append(acq, la...), append(rel, lr...)
			mu.Unlock()
		}()
	}
	time.Sleep(*dur)
	stop.Store(true)
	wg.Wait()
	secs := time.Since(start).Seconds()

	name := "redis"
	switch {
	case *inMemory:
		name = "memory"
	case *raw != "":
		name = "go-redis"
	}
	r := pairResult{Store: name, Concurrency: *conc, GOMAXPROCS: runtime.GOMAXPROCS(0), Pairs: len(pair),
		Errors: errs.Load(), Seconds: secs, PairsPerSec: float64(len(pair)) / secs,
		P50us: pct(pair, 50), P99us: pct(pair, 99), AcqP50us: pct(acq, 50), RelP50us: pct(rel, 50)}
	if e, ok := firstErr.Load().(string); ok {
		r.FirstError = e
	}
	return json.NewEncoder(os.Stdout).Encode(r)
}

// rawStore sends what redis.Store sends, with a plain go-redis client:
// the acquire script by EVALSHA and the release's ZREMs in one pipeline. It
// is the floor of the store's cost in Go, without its bounds, deadline and
// per-operation goroutine. Only Acquire and Release work.
type rawStore struct {
	capgate.LaneStore // nil: the other methods are not used
	c                 *goredis.Client
	script            *goredis.Script
}

// Caps declares nothing beyond the lanes (the embedded store is nil).
func (rawStore) Caps() capgate.StoreCaps { return capgate.StoreCaps{} }

func openRaw(url, scriptPath string, conc int) (capgate.LaneStore, func(), error) {
	src, err := os.ReadFile(scriptPath)
	if err != nil {
		return nil, nil, err
	}
	opts, err := goredis.ParseURL(url)
	if err != nil {
		return nil, nil, err
	}
	opts.PoolSize = max(conc, 1)
	opts.Protocol = 2
	opts.DisableIdentity = true
	c := goredis.NewClient(opts)
	return rawStore{c: c, script: goredis.NewScript(string(src))}, func() { _ = c.Close() }, nil
}

func (r rawStore) Acquire(ctx context.Context, req capgate.AcquireRequest, counts []int) (bool, error) {
	force := "0"
	if req.Force {
		force = "1"
	}
	args := make([]any, 0, 4+len(req.Keys))
	args = append(args, req.Token, req.Lease.Milliseconds(), force, req.NotAfter.UnixMilli())
	for _, l := range req.Limits[:len(req.Keys)] {
		args = append(args, l)
	}
	res, err := r.script.Run(ctx, r.c, req.Keys, args...).Int64Slice()
	if err != nil {
		return false, err
	}
	for i, n := range res[1:] {
		counts[i] = int(n)
	}
	return res[0] == 1, nil
}

func (r rawStore) Release(ctx context.Context, token string, keys []string) error {
	_, err := r.c.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for _, k := range keys {
			p.ZRem(ctx, k, token)
		}
		return nil
	})
	return err
}

// onePair takes a fresh lease on keys and gives it back, recording the
// acquire and release times in t when t is not nil.
func onePair(ctx context.Context, s capgate.LaneStore, keys []string, t *[2]time.Duration) error {
	req := capgate.AcquireRequest{
		Token:    newToken(),
		Keys:     keys,
		Limits:   []int{1 << 20, 1 << 20, 1 << 20, 1 << 20, 1 << 20},
		Lease:    lease,
		Force:    true,
		NotAfter: time.Now().Add(3 * time.Second),
	}
	var counts [5]int
	t0 := time.Now()
	if _, err := s.Acquire(ctx, req, counts[:]); err != nil {
		return err
	}
	t1 := time.Now()
	err := s.Release(ctx, req.Token, keys)
	if t != nil {
		t[0], t[1] = t1.Sub(t0), time.Since(t1)
	}
	return err
}

// pct returns the p-th percentile of d in microseconds (d is sorted).
func pct(d []time.Duration, p float64) float64 {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	i := int(float64(len(d)-1) * p / 100)
	return float64(d[i]) / float64(time.Microsecond)
}

// scaleResult is one run of scale.
type scaleResult struct {
	Users         int     `json:"users"`
	Keys          int64   `json:"db_keys"`
	FillSeconds   float64 `json:"fill_s"`
	AcqP50us      float64 `json:"acquire_p50_us"`
	AcqP99us      float64 `json:"acquire_p99_us"`
	PairP50us     float64 `json:"pair_p50_us"`
	StatusMS      float64 `json:"status_ms"`     // median
	StatusMaxMS   float64 `json:"status_max_ms"` // worst
	KeysMS        float64 `json:"keys_ms"`       // one Store.Keys of the user lanes, median
	CountMS       float64 `json:"count_ms"`      // one Store.Count of every lane, median
	StatusUsers   int     `json:"status_users"`  // users the status reported
	StatusError   string  `json:"status_error,omitempty"`
	StatusFailed  int     `json:"status_failed"`  // Status calls of rounds that failed
	ScanCalls     int64   `json:"scan_calls"`     // SCAN commands one Status sent
	CountMaxBlock float64 `json:"count_block_ms"` // how long one Status's count script held Redis (INFO commandstats)
}

func scale(args []string) error {
	fs := flag.NewFlagSet("scale", flag.ExitOnError)
	url := fs.String("redis", "", "Redis URL (its database is flushed)")
	users := fs.Int("users", 10, "users holding one lease each")
	rounds := fs.Int("rounds", 5, "Status calls to time")
	pairsN := fs.Int("pairs", 2000, "acquire+release pairs to time")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx := context.Background()
	opts, err := goredis.ParseURL(*url)
	if err != nil {
		return err
	}
	raw := goredis.NewClient(opts)
	defer raw.Close()
	if err := raw.FlushDB(ctx).Err(); err != nil {
		return err
	}
	r := scaleResult{Users: *users}

	// Fill: each user holds one lease in the five lanes of a semantic
	// $match, as Acquire would leave them, written in pipelined batches.
	t0 := time.Now()
	now, err := raw.Time(ctx).Result()
	if err != nil {
		return err
	}
	exp := float64(now.Add(10 * time.Minute).UnixMilli())
	const batch = 2000
	shared := keysFor("")[:4]
	for lo := 0; lo < *users; lo += batch {
		_, err := raw.Pipelined(ctx, func(p goredis.Pipeliner) error {
			members := make([]goredis.Z, 0, batch)
			for u := lo; u < min(lo+batch, *users); u++ {
				tok := newToken()
				members = append(members, goredis.Z{Score: exp, Member: tok})
				user := keysFor("fill" + strconv.Itoa(u))[4]
				p.ZAdd(ctx, user, goredis.Z{Score: exp, Member: tok})
				p.PExpire(ctx, user, 20*time.Minute)
			}
			for _, key := range shared {
				p.ZAdd(ctx, key, members...)
				p.PExpire(ctx, key, 20*time.Minute)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("fill: %w", err)
		}
	}
	r.FillSeconds = time.Since(t0).Seconds()
	r.Keys, _ = raw.DBSize(ctx).Result()

	store, err := redis.Open(redis.Options{URL: *url})
	if err != nil {
		return err
	}
	defer store.Close()
	cfg := settings.Default(nil, settings.ModeShadow)
	gate, err := capgate.NewGate(store, settings.NewFixed(cfg), nil, "bench")
	if err != nil {
		return err
	}

	// Acquire cost with N users in the lanes.
	if err := onePair(ctx, store, keysFor("probe"), nil); err != nil {
		return err
	}
	var acq, pair []time.Duration
	keys := keysFor("probe")
	for range *pairsN {
		var t [2]time.Duration
		t1 := time.Now()
		if err := onePair(ctx, store, keys, &t); err != nil {
			return err
		}
		pair = append(pair, time.Since(t1))
		acq = append(acq, t[0])
	}
	r.AcqP50us, r.AcqP99us, r.PairP50us = pct(acq, 50), pct(acq, 99), pct(pair, 50)

	// Gate.Status, the work behind GET /capacity/status/. Redis's command
	// statistics of the first one count its SCANs and the time its scripts
	// held Redis.
	var st, ks, cs []time.Duration
	for i := range *rounds {
		if i == 0 {
			_ = raw.ConfigResetStat(ctx).Err()
		}
		t1 := time.Now()
		s := gate.Status(ctx, cfg)
		st = append(st, time.Since(t1))
		if i == 0 {
			r.ScanCalls, r.CountMaxBlock = commandStats(ctx, raw)
		}
		if s.Store != status.OK {
			r.StatusError = s.Store
			r.StatusFailed++
		} else {
			if users, ok := s.KeyedLane("user"); ok {
				r.StatusUsers = len(users.Entries)
			}
		}
	}
	prefix := capgate.Keys{}.Lane(capgate.LaneName("user"), "") + ":"
	for range *rounds {
		t1 := time.Now()
		all, err := store.Keys(ctx, prefix)
		ks = append(ks, time.Since(t1))
		if err != nil {
			r.StatusError = "keys: " + err.Error()
			break
		}
		counts := make([]int, len(all))
		t1 = time.Now()
		if err := store.Count(ctx, all, counts); err != nil {
			r.StatusError = "count: " + err.Error()
		}
		cs = append(cs, time.Since(t1))
	}
	r.StatusMS = pct(st, 50) / 1000
	r.StatusMaxMS = float64(slices.Max(st)) / float64(time.Millisecond)
	r.KeysMS, r.CountMS = pct(ks, 50)/1000, pct(cs, 50)/1000
	_ = raw.FlushDB(ctx).Err()
	return json.NewEncoder(os.Stdout).Encode(r)
}

// commandStats returns, from INFO commandstats, the SCAN calls and the
// longest average script run (EVALSHA or EVAL) in ms: with one status
// call, how long its count script held Redis.
func commandStats(ctx context.Context, raw *goredis.Client) (scans int64, scriptMS float64) {
	info, err := raw.Info(ctx, "commandstats").Result()
	if err != nil {
		return -1, -1
	}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		fields := map[string]string{}
		for _, kv := range strings.Split(rest, ",") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				fields[k] = v
			}
		}
		switch name {
		case "cmdstat_scan":
			scans, _ = strconv.ParseInt(fields["calls"], 10, 64)
		case "cmdstat_evalsha", "cmdstat_eval":
			us, _ := strconv.ParseFloat(fields["usec_per_call"], 64)
			scriptMS = max(scriptMS, us/1000)
		}
	}
	return scans, scriptMS
}
