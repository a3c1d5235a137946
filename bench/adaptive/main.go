// Command adaptive drives one run of bench/adaptive.sh: a fixed number of
// callers that always have a semantic $match in flight through a set of
// gateways, in front of `capgate simapi --backend-capacity K`. It halves
// the backend's capacity at -halve-at, samples the limit in force every
// second from the gateways' status, and prints one JSON line: throughput,
// the backend's p50/p99, time to converge and to follow, and the limit's
// swing after converging.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

type options struct {
	urls       []string
	sim        string
	tokens     string
	callers    int
	duration   time.Duration
	halveAt    time.Duration
	capacity   int
	baseMS     float64
	lane       string // es2_knn: the cluster lane; task: the sum of each gateway's own task lane
	tasks      []string
	settleFrom time.Duration // converged stats are read from here to halveAt
	spread     []int         // callers per gateway, in -urls order; nil: even
	moveAt     time.Duration // the load moves one gateway back (gateway i's callers to i-1) here; 0: never
	attacker   string        // a token whose user sends long bulk calls beside the callers; empty: none
	attackRows int           // rows of each of its calls
	attackN    int           // its calls at once (its own limit)
}

func main() {
	var o options
	var urls, tasks, spread string
	flag.StringVar(&urls, "urls", "", "gateways, comma-separated")
	flag.StringVar(&o.sim, "sim", "", "the simapi URL")
	flag.StringVar(&o.tokens, "tokens", "", "the users (simapi --tokens)")
	flag.IntVar(&o.callers, "callers", 40, "callers, each with one call in flight")
	flag.DurationVar(&o.duration, "duration", 70*time.Second, "length of the run")
	flag.DurationVar(&o.halveAt, "halve-at", 40*time.Second, "when the backend's capacity halves")
	flag.DurationVar(&o.settleFrom, "steady-from", 20*time.Second, "start of the converged window (to -halve-at)")
	flag.IntVar(&o.capacity, "capacity", 16, "the backend's capacity K at the start")
	flag.Float64Var(&o.baseMS, "base-ms", 100, "the backend's base time B, ms")
	flag.StringVar(&o.lane, "lane", "es2_knn", "the limit to sample: es2_knn, or task (the sum of the gateways' own task lanes)")
	flag.StringVar(&tasks, "tasks", "gw1,gw2,gw3", "the gateways' task ids, in -urls order")
	flag.StringVar(&spread, "spread", "", "callers per gateway, in -urls order (e.g. 30,8,2; their sum is the callers); empty: even")
	flag.DurationVar(&o.moveAt, "move-at", 0, "when each gateway's callers move to the gateway before it (gw1's to gw3); 0: never")
	flag.StringVar(&o.attacker, "attacker", "", "the token of a user who keeps -attack-calls bulk calls of -attack-rows rows in flight through the first gateway (not counted as a caller)")
	flag.IntVar(&o.attackRows, "attack-rows", 40, "rows of each attacking call")
	flag.IntVar(&o.attackN, "attack-calls", 2, "attacking calls at once")
	flag.Parse()
	o.urls, o.tasks = strings.Split(urls, ","), strings.Split(tasks, ",")
	if spread != "" {
		o.callers = 0
		for _, f := range strings.Split(spread, ",") {
			n, err := strconv.Atoi(f)
			if err != nil || n < 0 {
				fmt.Fprintln(os.Stderr, "adaptive: -spread: want counts, e.g. 30,8,2")
				os.Exit(2)
			}
			o.spread = append(o.spread, n)
			o.callers += n
		}
		if len(o.spread) != len(o.urls) {
			fmt.Fprintln(os.Stderr, "adaptive: -spread: one count per gateway")
			os.Exit(2)
		}
	}
	out, err := run(context.Background(), o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "adaptive:", err)
		os.Exit(1)
	}
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
}

type user struct {
	Token   string `json:"token"`
	IsStaff bool   `json:"is_staff"`
}

// result is the JSON line.
type result struct {
	Capacity      int       `json:"k"`
	BaseMS        float64   `json:"b_ms"`
	Ideal         float64   `json:"ideal_per_s"`                 // K / B
	Throughput    float64   `json:"throughput"`                  // calls/s in the converged window
	Ratio         float64   `json:"ratio"`                       // Throughput / Ideal
	P50MS         float64   `json:"p50_ms"`                      // backend, converged window
	P99MS         float64   `json:"p99_ms"`                      // backend, converged window
	ConvergeS     int       `json:"converge_s"`                  // -1: never
	SwingPct      float64   `json:"swing_pct"`                   // ±, in the converged window (-steady-from to -halve-at)
	Throughput2   float64   `json:"throughput2"`                 // after halving, last 15 s
	Ratio2        float64   `json:"ratio2"`                      // against K/2 / B
	P50MS2        float64   `json:"p50_ms2"`                     // backend, last 15 s
	P99MS2        float64   `json:"p99_ms2"`                     // backend, last 15 s
	FollowS       int       `json:"follow_s"`                    // seconds after halving; -1: never
	LimitStart    int       `json:"limit_start"`                 // limit in force at t = 1 s
	LimitEnd      int       `json:"limit_end"`                   // at the end
	LimitTimeline []int     `json:"limit_per_s"`                 // limit in force each second
	DonePerS      []int64   `json:"done_per_s"`                  // calls completed each second
	PerCaller     []float64 `json:"per_caller"`                  // calls/s per caller of each group (the callers that started on gateway i), converged window
	Fairness      float64   `json:"fairness"`                    // the least per_caller over the most; 1: every caller served alike
	LimitsEnd     []int     `json:"limits_end_per_gw,omitempty"` // lane task: each gateway's own limit at the end
	LimitMean     float64   `json:"limit_mean"`                  // the limit's mean in the converged window
	AttackDone    int64     `json:"attack_done"`                 // the attacker's calls completed
	Refused       int64     `json:"refused"`                     // 429s (callers retry)
	Errors        int64     `json:"errors"`                      // other failures
	StatusErrors  int       `json:"status_errors"`               // status reads that failed
}

func run(ctx context.Context, o options) (*result, error) {
	b, err := os.ReadFile(o.tokens)
	if err != nil {
		return nil, err
	}
	var users []user
	if err := json.Unmarshal(b, &users); err != nil {
		return nil, fmt.Errorf("tokens: %w", err)
	}
	var staff string
	for _, u := range users {
		if u.IsStaff {
			staff = u.Token
			break
		}
	}
	if staff == "" || len(users) == 0 {
		return nil, errors.New("tokens: want users and one staff member")
	}
	secs := int(o.duration / time.Second)
	done := make([]atomic.Int64, secs+1)
	ngw := len(o.urls)
	group := make([]int, o.callers) // the gateway each caller starts on
	for i := range group {
		group[i] = i % ngw
	}
	if o.spread != nil {
		i := 0
		for g, n := range o.spread {
			for range n {
				group[i] = g
				i++
			}
		}
	}
	groupSize := make([]int, ngw)
	for _, g := range group {
		groupSize[g]++
	}
	groupDone := make([][]atomic.Int64, ngw)
	for g := range groupDone {
		groupDone[g] = make([]atomic.Int64, secs+1)
	}
	var refused, failed atomic.Int64
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.callers, Proxy: nil}, Timeout: 60 * time.Second}
	ctx, cancel := context.WithTimeout(ctx, o.duration)
	defer cancel()
	start := time.Now()
	body := []byte(`{"rows":[{"id":"1","name":"malaria"},{"id":"2","name":"fever"}]}`)

	var wg sync.WaitGroup
	var attackDone atomic.Int64
	if o.attacker != "" {
		rows := make([]string, o.attackRows)
		for i := range rows {
			rows[i] = fmt.Sprintf(`{"id":"%d","name":"fever %d"}`, i, i)
		}
		abody := []byte(`{"rows":[` + strings.Join(rows, ",") + `]}`)
		for range o.attackN {
			wg.Go(func() {
				for ctx.Err() == nil {
					req, _ := http.NewRequestWithContext(ctx, http.MethodPost, o.urls[0]+"/concepts/$match/?semantic=true", bytes.NewReader(abody))
					req.Header.Set("Authorization", "Token "+o.attacker)
					req.Header.Set("Content-Type", "application/json")
					res, err := client.Do(req)
					if err != nil {
						time.Sleep(50 * time.Millisecond)
						continue
					}
					_, _ = io.Copy(io.Discard, res.Body)
					res.Body.Close()
					if res.StatusCode == http.StatusOK {
						attackDone.Add(1)
					} else {
						time.Sleep(20 * time.Millisecond)
					}
				}
			})
		}
	}
	var callerUsers []user
	for _, u := range users {
		if u.Token != o.attacker {
			callerUsers = append(callerUsers, u)
		}
	}
	for i := range o.callers {
		g := group[i]
		token := callerUsers[i%len(callerUsers)].Token
		wg.Go(func() {
			for ctx.Err() == nil {
				at := g
				if o.moveAt > 0 && time.Since(start) >= o.moveAt {
					at = (g + ngw - 1) % ngw
				}
				url := o.urls[at] + "/concepts/$match/?semantic=true"
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
				req.Header.Set("Authorization", "Token "+token)
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-OCL-Event-Metadata", `{"capacity_aware":"true"}`)
				res, err := client.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						failed.Add(1)
						time.Sleep(50 * time.Millisecond)
					}
					continue
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				switch res.StatusCode {
				case http.StatusOK:
					if s := int(time.Since(start) / time.Second); s < len(done) {
						done[s].Add(1)
						groupDone[g][s].Add(1)
					}
				case http.StatusTooManyRequests:
					refused.Add(1)
					time.Sleep(20 * time.Millisecond) // keep the demand up; the wait is the gateway's
				default:
					failed.Add(1)
					time.Sleep(50 * time.Millisecond)
				}
			}
		})
	}

	out := &result{Capacity: o.capacity, BaseMS: o.baseMS, Ideal: float64(o.capacity) * 1000 / o.baseMS}
	var steady, after simBackend
	halved := false
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	resetAt2 := o.duration - 15*time.Second
	for s := 1; s <= secs; s++ {
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
		el := time.Since(start)
		l, each, err := limitInForce(client, o, staff)
		if each != nil {
			out.LimitsEnd = each
		}
		if err != nil {
			out.StatusErrors++
			if n := len(out.LimitTimeline); n > 0 {
				l = out.LimitTimeline[n-1]
			}
		}
		out.LimitTimeline = append(out.LimitTimeline, l)
		switch {
		case el >= o.settleFrom && steady.reset == 0:
			_, _ = readBackend(client, o.sim, true)
			steady.reset = s
		case el >= o.halveAt && !halved:
			steady.read, _ = readBackend(client, o.sim, true)
			steady.at = s
			if err := setCapacity(client, o.sim, o.capacity/2); err != nil {
				return nil, err
			}
			halved = true
		case el >= resetAt2 && after.reset == 0 && halved:
			_, _ = readBackend(client, o.sim, true)
			after.reset = s
		}
	}
	cancel()
	wg.Wait()
	after.read, _ = readBackend(client, o.sim, false)
	after.at = secs

	for i := range done {
		out.DonePerS = append(out.DonePerS, done[i].Load())
	}
	sum := func(from, to int) float64 {
		var n int64
		for i := from; i < to && i < len(out.DonePerS); i++ {
			n += out.DonePerS[i]
		}
		return float64(n) / float64(max(to-from, 1))
	}
	out.Throughput = sum(steady.reset, steady.at)
	out.Fairness = 1
	if steady.at > steady.reset {
		lo, hi := -1.0, 0.0
		for g := range ngw {
			if groupSize[g] == 0 {
				out.PerCaller = append(out.PerCaller, 0)
				continue
			}
			var n int64
			for s := steady.reset; s < steady.at; s++ {
				n += groupDone[g][s].Load()
			}
			pc := float64(n) / float64(steady.at-steady.reset) / float64(groupSize[g])
			out.PerCaller = append(out.PerCaller, math.Round(pc*100)/100)
			if lo < 0 || pc < lo {
				lo = pc
			}
			hi = max(hi, pc)
		}
		if hi > 0 {
			out.Fairness = math.Round(lo/hi*100) / 100
		}
	}
	out.Ratio = out.Throughput / out.Ideal
	out.P50MS, out.P99MS = steady.read.P50MS, steady.read.P99MS
	out.Throughput2 = sum(after.reset, secs)
	out.Ratio2 = out.Throughput2 / (out.Ideal / 2)
	out.P50MS2, out.P99MS2 = after.read.P50MS, after.read.P99MS
	halveS := int(o.halveAt / time.Second)
	out.ConvergeS = settled(out.LimitTimeline, 0, min(halveS, len(out.LimitTimeline)), o.capacity)
	out.FollowS = settled(out.LimitTimeline, halveS, len(out.LimitTimeline), o.capacity/2)
	if out.FollowS >= 0 {
		out.FollowS -= halveS
	}
	if from, to := int(o.settleFrom/time.Second), min(halveS, len(out.LimitTimeline)); from < to {
		seg := out.LimitTimeline[from:to]
		lo, hi := slices.Min(seg), slices.Max(seg)
		mid := float64(hi+lo) / 2
		out.SwingPct = 100 * float64(hi-lo) / 2 / mid
		sum := 0
		for _, l := range seg {
			sum += l
		}
		out.LimitMean = math.Round(float64(sum)/float64(len(seg))*10) / 10
	}
	if len(out.LimitTimeline) > 0 {
		out.LimitStart, out.LimitEnd = out.LimitTimeline[0], out.LimitTimeline[len(out.LimitTimeline)-1]
	}
	out.Refused, out.Errors, out.AttackDone = refused.Load(), failed.Load(), attackDone.Load()
	return out, nil
}

type simBackend struct {
	reset, at int
	read      backendJSON
}

// settled returns the first second in [from, to) from which the limit
// stays within [0.7 k, 1.5 k] until to; -1 when it never does.
func settled(limits []int, from, to, k int) int {
	first := -1
	for s := from; s < to; s++ {
		in := 10*limits[s] >= 7*k && 10*limits[s] <= 15*k
		switch {
		case in && first < 0:
			first = s
		case !in:
			first = -1
		}
	}
	return first
}

type backendJSON struct {
	Capacity int     `json:"capacity"`
	Calls    int     `json:"calls"`
	P50MS    float64 `json:"p50_ms"`
	P99MS    float64 `json:"p99_ms"`
}

func readBackend(c *http.Client, sim string, reset bool) (backendJSON, error) {
	url := sim + "/_sim/backend"
	if reset {
		url += "?reset=1"
	}
	var out backendJSON
	res, err := c.Get(url)
	if err != nil {
		return out, err
	}
	defer res.Body.Close()
	return out, json.NewDecoder(res.Body).Decode(&out)
}

func setCapacity(c *http.Client, sim string, k int) error {
	res, err := c.Post(sim+"/_sim/backend", "application/json", strings.NewReader(fmt.Sprintf(`{"capacity":%d}`, k)))
	if err != nil {
		return fmt.Errorf("halve the capacity: %w", err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("halve the capacity: %s", res.Status)
	}
	return nil
}

type laneStatus struct {
	Limit int `json:"limit"`
}

type status struct {
	ES2KNN *laneStatus            `json:"es2_knn"`
	Tasks  map[string]*laneStatus `json:"tasks"`
}

// limitInForce reads the es2_knn limit from the first gateway, or the sum
// of each gateway's own task limit (and those limits).
func limitInForce(c *http.Client, o options, staff string) (int, []int, error) {
	get := func(url string) (status, error) {
		var st status
		req, _ := http.NewRequest(http.MethodGet, url+"/capacity/status/", nil)
		req.Header.Set("Authorization", "Token "+staff)
		res, err := c.Do(req)
		if err != nil {
			return st, err
		}
		defer res.Body.Close()
		if res.StatusCode != http.StatusOK {
			return st, fmt.Errorf("status: %s", res.Status)
		}
		return st, json.NewDecoder(res.Body).Decode(&st)
	}
	if o.lane == "es2_knn" {
		st, err := get(o.urls[0])
		if err != nil || st.ES2KNN == nil {
			return 0, nil, fmt.Errorf("status: %v", err)
		}
		return st.ES2KNN.Limit, nil, nil
	}
	total, each := 0, []int{}
	for i, u := range o.urls {
		st, err := get(u)
		if err != nil {
			return 0, nil, err
		}
		t := st.Tasks[o.tasks[i]]
		if t == nil {
			return 0, nil, fmt.Errorf("status of %s: no task %s", u, o.tasks[i])
		}
		total += t.Limit
		each = append(each, t.Limit)
	}
	return total, each, nil
}
