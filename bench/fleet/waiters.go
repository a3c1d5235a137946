package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/redis"
	"github.com/capgate/capgate/settings"
)

// waitersResult is what waiters prints.
type waitersResult struct {
	Tickets       int     `json:"tickets"`
	Users         int     `json:"users"`
	Joins         int     `json:"joins"`
	JoinUS        float64 `json:"join_redis_us"`       // Redis time of one join onto the full list (commandstats)
	JoinDropUS    float64 `json:"join_drop_redis_us"`  // the same, when it drops a ticket to make room
	PumpsPerSec   float64 `json:"pumps_per_s"`         // the waiters' background traffic
	PumpUS        float64 `json:"pump_redis_us"`       // Redis time of one pump (commandstats)
	ScriptCorePct float64 `json:"script_core_pct"`     // the pumps' script time, % of one core
	CPUCorePct    float64 `json:"redis_cpu_core_pct"`  // used_cpu_user+sys over the window, % of one core
	IdleCorePct   float64 `json:"redis_idle_core_pct"` // the same with no load, for reference
	WindowSec     float64 `json:"window_s"`
	EverySec      float64 `json:"pump_every_s"`
	PumpsLate     int64   `json:"pumps_behind_schedule"` // pumps the driver could not send on time
}

// waitersCmd measures what waiting tickets cost Redis: it fills the
// api_heavy lane, queues -tickets tickets over -users users through
// redis.Store (as gateways do), times joins onto the full list by INFO
// commandstats, then pumps every ticket every -every (the gate's
// waitPumpEvery) for -window and reads Redis's CPU and script time.
func waitersCmd(args []string) error {
	fs := flag.NewFlagSet("fleet waiters", flag.ContinueOnError)
	url := fs.String("redis", "", "standalone Redis URL (flushed)")
	nTickets := fs.Int("tickets", 10000, "tickets waiting")
	nUsers := fs.Int("users", 1000, "users they belong to")
	joins := fs.Int("joins", 200, "joins timed onto the full list")
	every := fs.Duration("every", 0, "how often each ticket is pumped; 0: as the gate does for this many tickets")
	window := fs.Duration("window", 50*time.Second, "the window Redis's counters are read over")
	conc := fs.Int("concurrency", 32, "pumps in flight at once")
	fair := fs.String("fair", "time", "the tickets' fairness (fairness.by): calls, time or usage")
	if err := fs.Parse(args); err != nil {
		return err
	}
	by := map[string]settings.FairBy{"calls": settings.FairCalls, "time": settings.FairTime, "usage": settings.FairUsage}
	fb, ok := by[*fair]
	if !ok {
		return fmt.Errorf("-fair %q: want calls, time or usage", *fair)
	}
	if *every == 0 {
		// The gate's pump interval (wait.go, pumpEvery): 400 pumps a
		// second over the whole list, at least every 2 s, at most 25 s.
		*every = min(max(time.Duration(*nTickets)*time.Second/400, 2*time.Second), 25*time.Second)
	}
	o, err := goredis.ParseURL(*url)
	if err != nil {
		return err
	}
	o.Protocol, o.DisableIdentity = 2, true
	raw := goredis.NewClient(o)
	defer func() { _ = raw.Close() }()
	ctx := context.Background()
	if err := raw.FlushDB(ctx).Err(); err != nil {
		return err
	}
	s, err := redis.Open(redis.Options{URL: *url, MaxInFlight: *conc, Deadline: 10 * time.Second, Timeout: 10 * time.Second})
	if err != nil {
		return err
	}
	defer func() { _ = s.Close() }()

	prefix := "ocl:capacity"
	shared := prefix + ":api_heavy"
	ticket := func(user string, maxWaiting int) capgate.Ticket {
		return capgate.Ticket{Prefix: prefix, Token: token(), Keys: []string{shared, prefix + ":user:" + user},
			Limits: []int{1, 1}, UserID: user, Lease: time.Minute, TicketLease: 2**every + 2*time.Second,
			Claim: 3 * time.Second, MaxWaiting: maxWaiting, MaxPerUser: 1 << 20, Fair: fb}
	}
	// The one slot is taken for the whole run: every ticket waits.
	if ok, err := s.Acquire(ctx, capgate.AcquireRequest{Token: token(), Keys: []string{shared}, Limits: []int{1}, Lease: time.Hour}, make([]int, 1)); err != nil || !ok {
		return fmt.Errorf("fill api_heavy: %v %v", ok, err)
	}
	tickets := make([]capgate.Ticket, *nTickets)
	for i := range tickets {
		tickets[i] = ticket("u"+strconv.Itoa(i%*nUsers), *nTickets+*joins)
	}
	if err := parallel(*conc, len(tickets), func(i int) error {
		res, err := s.Join(ctx, tickets[i], make([]int, 2))
		if err == nil && !res.Queued {
			err = fmt.Errorf("ticket %d not queued: %+v", i, res)
		}
		return err
	}); err != nil {
		return err
	}
	var r waitersResult
	r.Tickets, r.Users, r.Joins = *nTickets, *nUsers, *joins

	idle, err := cpu(ctx, raw)
	if err != nil {
		return err
	}
	time.Sleep(2 * time.Second)
	idle2, err := cpu(ctx, raw)
	if err != nil {
		return err
	}
	r.IdleCorePct = 100 * (idle2 - idle) / 2

	// Joins onto the full list, one at a time, by new users (no drop),
	// then as many by users with nothing waiting on a list that is full
	// (each drops the newest ticket of the user holding the most).
	evalUS := func(fn func() error) (float64, error) {
		if err := raw.ConfigResetStat(ctx).Err(); err != nil {
			return 0, err
		}
		if err := fn(); err != nil {
			return 0, err
		}
		calls, usec, err := evalStats(ctx, raw)
		if err != nil || calls == 0 {
			return 0, err
		}
		return usec / float64(calls), nil
	}
	if r.JoinUS, err = evalUS(func() error {
		for i := range *joins {
			if _, err := s.Join(ctx, ticket("new"+strconv.Itoa(i), *nTickets+*joins), make([]int, 2)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return err
	}
	if r.JoinDropUS, err = evalUS(func() error {
		// Each drops one of the users' extra tickets: there are that many.
		for i := range min(*joins, *nTickets-min(*nUsers, *nTickets)) {
			res, err := s.Join(ctx, ticket("drop"+strconv.Itoa(i), *nTickets+*joins), make([]int, 2))
			if err != nil {
				return err
			}
			if !res.Queued {
				return fmt.Errorf("a join on the full list was not queued: %+v", res)
			}
		}
		return nil
	}); err != nil {
		return err
	}

	// The waiters' background traffic: each ticket pumped every -every.
	if err := raw.ConfigResetStat(ctx).Err(); err != nil {
		return err
	}
	c0, err := cpu(ctx, raw)
	if err != nil {
		return err
	}
	start := time.Now()
	var late int64
	var mu sync.Mutex
	rounds := int(*window / *every)
	for round := range rounds {
		due := start.Add(time.Duration(round) * *every)
		time.Sleep(time.Until(due))
		err := parallel(*conc, len(tickets), func(i int) error {
			// Spread the round's pumps over the interval, as waiters do.
			at := due.Add(time.Duration(int64(*every) * int64(i) / int64(len(tickets))))
			if d := time.Until(at); d > 0 {
				time.Sleep(d)
			} else if d < -*every/2 {
				mu.Lock()
				late++
				mu.Unlock()
			}
			_, err := s.Pump(ctx, tickets[i])
			return err
		})
		if err != nil {
			return err
		}
	}
	elapsed := time.Since(start).Seconds()
	c1, err := cpu(ctx, raw)
	if err != nil {
		return err
	}
	calls, usec, err := evalStats(ctx, raw)
	if err != nil {
		return err
	}
	r.WindowSec, r.EverySec = elapsed, every.Seconds()
	r.PumpsPerSec = float64(calls) / elapsed
	if calls > 0 {
		r.PumpUS = usec / float64(calls)
	}
	r.ScriptCorePct = 100 * usec / 1e6 / elapsed
	r.CPUCorePct = 100 * (c1 - c0) / elapsed
	r.PumpsLate = late
	return json.NewEncoder(os.Stdout).Encode(r)
}

// parallel runs fn(0..n-1) on conc goroutines and returns the first error.
func parallel(conc, n int, fn func(i int) error) error {
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	next := make(chan int)
	for range conc {
		wg.Go(func() {
			for i := range next {
				if err := fn(i); err != nil {
					once.Do(func() { first = err })
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}

// cpu returns Redis's used_cpu_user + used_cpu_sys in seconds.
func cpu(ctx context.Context, c *goredis.Client) (float64, error) {
	info, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	var total float64
	for _, line := range strings.Split(info, "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return total, nil
}

// evalStats returns the calls and total µs of EVALSHA and EVAL since the
// last CONFIG RESETSTAT (INFO commandstats).
func evalStats(ctx context.Context, c *goredis.Client) (calls int64, usec float64, err error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(info, "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "cmdstat_evalsha" && k != "cmdstat_eval") {
			continue
		}
		for _, f := range strings.Split(v, ",") {
			name, val, _ := strings.Cut(f, "=")
			switch name {
			case "calls":
				n, _ := strconv.ParseInt(val, 10, 64)
				calls += n
			case "usec":
				u, _ := strconv.ParseFloat(val, 64)
				usec += u
			}
		}
	}
	return calls, usec, nil
}
