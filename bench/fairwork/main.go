// Command fairwork measures the wait's fairness by work for
// bench/fairwork.sh: two users (or six) backlogged on one lane of the
// built-in OCL policy (api_heavy, limit 2 for bulk $match calls), through
// real capgate Gates (in process) on one lane store — a memory store (one
// gateway), or one Redis or Redis Cluster shared by two gateways. It prints
// one JSON object: per user the held time and the usage of the calls in
// the measured window, the lane's utilization, the most calls held at
// once, the refusals and errors.
//
//	fairwork -store memory|redis|cluster [-redis URL] [-cluster SEEDS]
//	    -by calls|time|usage -users A:400ms:2000,B:40ms:200 [-clients 3]
//	    [-duration 30s] [-warm 5s]
//
// Each user is NAME:HOLD:USAGE: its calls hold the lane HOLD each and
// report USAGE (Admission.SetUsage). Everything it talks to is on loopback.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/redis"
	"github.com/capgate/capgate/settings"
)

type user struct {
	name  string
	hold  time.Duration
	usage int64
}

// span is one call's time in the lane, as its client saw it.
type span struct {
	user       int
	start, end time.Time
	usage      int64
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "fairwork:", err)
		os.Exit(1)
	}
}

func run() error {
	store := flag.String("store", "memory", "memory, redis or cluster")
	url := flag.String("redis", "", "Redis URL (-store redis)")
	cluster := flag.String("cluster", "", "Redis Cluster seeds, comma-separated (-store cluster)")
	by := flag.String("by", "time", "fairness.by: calls, time or usage")
	usersFlag := flag.String("users", "A:400ms:2000,B:40ms:200", "NAME:HOLD:USAGE,...")
	clients := flag.Int("clients", 3, "calls at once per user")
	duration := flag.Duration("duration", 30*time.Second, "measured window")
	warm := flag.Duration("warm", 5*time.Second, "warm-up before the window")
	flag.Parse()

	users, err := parseUsers(*usersFlag)
	if err != nil {
		return err
	}
	cfg := settings.Default(nil, settings.ModeEnforce)
	cfg.EnforceFor = settings.EnforceAll
	cfg.Fairness.By = settings.FairBy(*by)
	cfg.Wait.MaxSeconds = 120
	for k, v := range map[string]int{"api_heavy.cluster": 3, "reserve_single_row": 1, "api_heavy.per_task": 50,
		"tiers.core": 50, "per_user.core": 50} {
		if err := cfg.SetNumber(k, v); err != nil {
			return fmt.Errorf("set %s: %w", k, err)
		}
	}
	const limit = 2
	src := settings.NewFixed(cfg)

	var gates []*capgate.Gate
	switch *store {
	case "memory":
		g, err := capgate.NewGate(memory.New(nil), src, nil, "gw1")
		if err != nil {
			return err
		}
		gates = append(gates, g)
	case "redis", "cluster":
		for i := range 2 {
			o := redis.Options{URL: *url}
			if *store == "cluster" {
				o = redis.Options{Cluster: strings.Split(*cluster, ",")}
			}
			s, err := redis.Open(o)
			if err != nil {
				return fmt.Errorf("open redis: %w", err)
			}
			defer s.Close()
			g, err := capgate.NewGate(s, src, nil, "gw"+strconv.Itoa(i+1))
			if err != nil {
				return err
			}
			gates = append(gates, g)
		}
	default:
		return errors.New("-store: memory, redis or cluster")
	}
	defer func() {
		for _, g := range gates {
			g.Close(context.Background())
		}
	}()

	route := policy.OCL().Route("match")
	fields := policy.NewFields(route)
	fields.SetInt(route.Field("rows"), 10) // bulk: the lane's limit is cluster − reserve_single_row = 2

	ctx, cancel := context.WithCancel(context.Background())
	var (
		mu      sync.Mutex
		spans   []span
		refused int
		errs    int
		wg      sync.WaitGroup
	)
	begin := time.Now()
	from, to := begin.Add(*warm), begin.Add(*warm+*duration)
	for ui, u := range users {
		for c := range *clients {
			g := gates[(ui+c)%len(gates)]
			wg.Add(1)
			go func() {
				defer wg.Done()
				call := capgate.Call{Route: route, Fields: fields, UserID: u.name, Tier: "core"}
				for ctx.Err() == nil {
					adm := g.Admit(ctx, call)
					if ctx.Err() != nil { // the run ended while it waited
						adm.Release(context.Background())
						return
					}
					if o := adm.Outcome(); o.Decision == capgate.DecisionRefused {
						adm.Release(context.Background())
						mu.Lock()
						refused++
						mu.Unlock()
						time.Sleep(50 * time.Millisecond)
						continue
					}
					if err := adm.Err(); err != nil {
						mu.Lock()
						if errs == 0 {
							fmt.Fprintln(os.Stderr, "fairwork: the limiter's error (the call goes ahead):", err)
						}
						errs++
						mu.Unlock()
					}
					start := time.Now()
					time.Sleep(u.hold)
					adm.SetUsage(u.usage)
					end := time.Now()
					adm.Release(context.Background())
					mu.Lock()
					spans = append(spans, span{user: ui, start: start, end: end, usage: u.usage})
					mu.Unlock()
				}
			}()
		}
	}
	time.Sleep(time.Until(to))
	cancel()
	wg.Wait()

	// Held time in the window per user (clipped), usage of the calls that
	// ended in it, the most calls held at once.
	held := make([]time.Duration, len(users))
	used := make([]int64, len(users))
	calls := make([]int, len(users))
	type edge struct {
		at time.Time
		d  int
	}
	var edges []edge
	for _, s := range spans {
		a, b := max64(s.start, from), min64(s.end, to)
		if b.After(a) {
			held[s.user] += b.Sub(a)
		}
		if !s.end.Before(from) && s.end.Before(to) {
			used[s.user] += s.usage
			calls[s.user]++
		}
		edges = append(edges, edge{s.start, 1}, edge{s.end, -1})
	}
	slices.SortFunc(edges, func(x, y edge) int {
		if c := x.at.Compare(y.at); c != 0 {
			return c
		}
		return x.d - y.d // an end before a start at the same instant
	})
	most, n := 0, 0
	for _, e := range edges {
		n += e.d
		most = max(most, n)
	}
	var total time.Duration
	var totalUse int64
	for i := range users {
		total += held[i]
		totalUse += used[i]
	}
	out := map[string]any{
		"store": *store, "by": *by, "gateways": len(gates), "limit": limit, "clients": *clients,
		"window_s":    duration.Seconds(),
		"utilization": round3(total.Seconds() / (limit * duration.Seconds())),
		"most_held":   most, "refused": refused, "errors": errs,
	}
	per := map[string]any{}
	for i, u := range users {
		per[u.name] = map[string]any{
			"hold_ms": u.hold.Milliseconds(), "calls": calls[i], "held_s": round3(held[i].Seconds()),
			"time_share":  round3(held[i].Seconds() / total.Seconds()),
			"usage_share": round3(float64(used[i]) / float64(max(totalUse, 1))),
		}
	}
	out["users"] = per
	if len(users) > 2 {
		xs := make([]float64, len(users))
		for i := range users {
			xs[i] = held[i].Seconds()
		}
		out["jain_time"] = round3(jain(xs))
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}

func parseUsers(s string) ([]user, error) {
	var us []user
	for _, f := range strings.Split(s, ",") {
		p := strings.Split(f, ":")
		if len(p) != 3 {
			return nil, fmt.Errorf("user %q: want NAME:HOLD:USAGE", f)
		}
		d, err := time.ParseDuration(p[1])
		if err != nil {
			return nil, fmt.Errorf("user %q: %w", f, err)
		}
		n, err := strconv.ParseInt(p[2], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("user %q: %w", f, err)
		}
		us = append(us, user{name: p[0], hold: d, usage: n})
	}
	return us, nil
}

func jain(xs []float64) float64 {
	var s, s2 float64
	for _, x := range xs {
		s += x
		s2 += x * x
	}
	if s2 == 0 {
		return 0
	}
	return s * s / (float64(len(xs)) * s2)
}

func max64(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func min64(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func round3(x float64) float64 { return float64(int64(x*1000+0.5)) / 1000 }
