// Command seats drives a gateway with groups of users and measures what
// issue 33 asks of seats and classes: how busy the protected lane's seats
// are (utilization), how fairly users share them, in seats (Jain's index
// of each user's seat-seconds), how long calls waited for a seat, and the
// refusals. bench/seats.sh runs it; see there for the scenarios.
//
// The lane's occupancy comes from the gateway's own log (each admitted
// call's held_ms, ts and seats in the lane), clipped to the measured
// window [--warm, --duration] after the start: the seats the lane really
// held, not the client's view; so do the waits (each admitted call's
// wait_ms, 0 for one that found room at once). The statuses are the
// client's.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/capgate/capgate/internal/jain"
)

// group is users sending one kind of call.
type group struct {
	Name    string   `json:"name"`
	Tokens  []string `json:"tokens"`  // one user per token
	Scheme  string   `json:"scheme"`  // Authorization scheme: Bearer or Token
	Workers int      `json:"workers"` // closed loop: calls each user keeps going
	// Rate, when > 0, makes each user open-loop: Poisson arrivals at this
	// many calls a second (Workers ignored).
	Rate   float64 `json:"rate"`
	Method string  `json:"method"`
	Path   string  `json:"path"`
	Body   string  `json:"body"`
}

// result is one call as the client saw it.
type result struct {
	group  string
	status int
}

func main() {
	var (
		url      = flag.String("url", "", "the gateway, http://HOST:PORT")
		groupsF  = flag.String("groups", "", "the groups: a JSON file of [{name, tokens, scheme, workers|rate, method, path, body}]")
		duration = flag.Duration("duration", 40*time.Second, "how long users send calls")
		warm     = flag.Duration("warm", 5*time.Second, "the start of the measured window")
		logF     = flag.String("log", "", "the gateway's log file, read after the run")
		event    = flag.String("event", "capgate_call", "the log lines' event")
		lane     = flag.String("lane", "", "the protected lane (its seats key and in-flight key prefix in the line)")
		limit    = flag.Int("limit", 0, "the lane's limit, in seats")
		inFlight = flag.String("in-flight-key", "", "the lane's in-flight key in the line (default <lane>_in_flight)")
		out      = flag.String("json", "", "write the summary as JSON here too")
	)
	flag.Parse()
	if *url == "" || *groupsF == "" || *logF == "" || *lane == "" || *limit <= 0 {
		fmt.Fprintln(os.Stderr, "seats: --url, --groups, --log, --lane and --limit are required")
		os.Exit(2)
	}
	if *inFlight == "" {
		*inFlight = *lane + "_in_flight"
	}
	var groups []group
	if err := readJSON(*groupsF, &groups); err != nil {
		fmt.Fprintln(os.Stderr, "seats:", err)
		os.Exit(2)
	}
	start := time.Now()
	results := run(*url, groups, *duration)
	end := start.Add(*duration)
	// The gateway writes a call's line as it ends: give the last lines a
	// moment to reach the file.
	time.Sleep(time.Second)
	usage, err := readLog(*logF, *event, *lane, *inFlight, start.Add(*warm), end)
	if err != nil {
		fmt.Fprintln(os.Stderr, "seats:", err)
		os.Exit(1)
	}
	s := summarize(groups, results, usage, *limit, end.Sub(start.Add(*warm)))
	b, _ := json.MarshalIndent(s, "", "  ")
	fmt.Println(string(b))
	if *out != "" {
		if err := os.WriteFile(*out, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "seats:", err)
			os.Exit(1)
		}
	}
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// run sends every group's calls until duration and waits for the last
// ones (the gateway bounds them: the wait's max_seconds, the upstream's
// latency).
func run(url string, groups []group, duration time.Duration) []result {
	ctx, cancel := context.WithTimeout(context.Background(), duration)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512}, Timeout: 5 * time.Minute}
	var (
		mu  sync.Mutex
		out []result
		wg  sync.WaitGroup
	)
	call := func(g group, token string) {
		req, err := http.NewRequest(g.Method, url+g.Path, strings.NewReader(g.Body))
		if err != nil {
			panic(err)
		}
		req.Header.Set("Authorization", g.Scheme+" "+token)
		req.Header.Set("Content-Type", "application/json")
		r := result{group: g.Name}
		resp, err := client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			r.status = resp.StatusCode
		}
		mu.Lock()
		out = append(out, r)
		mu.Unlock()
	}
	for gi, g := range groups {
		for ui, token := range g.Tokens {
			if g.Rate > 0 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(gi), uint64(ui)))
					var calls sync.WaitGroup
					defer calls.Wait()
					for {
						d := time.Duration(rng.ExpFloat64() / g.Rate * float64(time.Second))
						select {
						case <-ctx.Done():
							return
						case <-time.After(d):
						}
						calls.Add(1)
						go func() { defer calls.Done(); call(g, token) }()
					}
				}()
				continue
			}
			for range g.Workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for ctx.Err() == nil {
						call(g, token)
					}
				}()
			}
		}
	}
	wg.Wait()
	return out
}

// usage is the lane's seat-seconds in the window, per user and in all,
// and the waits of each user's admitted calls, ms.
type usage struct {
	seatSeconds map[string]float64
	waits       map[string][]float64
	total       float64
	lines       int
	maxInFlight int
}

// readLog sums, over the admitted calls of the log, seats × the part of
// each call's hold [ts − held_ms, ts] inside [from, to].
func readLog(path, event, lane, inFlightKey string, from, to time.Time) (usage, error) {
	f, err := os.Open(path)
	if err != nil {
		return usage{}, err
	}
	defer f.Close()
	u := usage{seatSeconds: map[string]float64{}, waits: map[string][]float64{}}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l struct {
			Event    string         `json:"event"`
			Decision string         `json:"decision"`
			User     string         `json:"user_id"`
			TS       time.Time      `json:"ts"`
			HeldMS   *int64         `json:"held_ms"`
			WaitMS   int64          `json:"wait_ms"`
			Seats    map[string]int `json:"seats"`
		}
		if json.Unmarshal(sc.Bytes(), &l) != nil || l.Event != event || l.HeldMS == nil {
			continue
		}
		var all map[string]any
		_ = json.Unmarshal(sc.Bytes(), &all)
		n, ok := all[inFlightKey].(float64)
		if !ok {
			continue // not a call of the lane
		}
		u.maxInFlight = max(u.maxInFlight, int(n))
		u.lines++
		u.waits[l.User] = append(u.waits[l.User], float64(l.WaitMS))
		seats := max(l.Seats[lane], 1)
		begin := l.TS.Add(-time.Duration(*l.HeldMS) * time.Millisecond)
		lo, hi := maxTime(begin, from), minTime(l.TS, to)
		if hi.After(lo) {
			s := float64(seats) * hi.Sub(lo).Seconds()
			u.seatSeconds[l.User] += s
			u.total += s
		}
	}
	return u, sc.Err()
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// groupSummary is one group's calls.
type groupSummary struct {
	Name        string  `json:"name"`
	Users       int     `json:"users"`
	Calls       int     `json:"calls"`
	OK          int     `json:"ok"`
	Refused     int     `json:"refused_429"`
	Errors      int     `json:"errors"`
	WaitP50MS   float64 `json:"wait_p50_ms"`
	WaitP95MS   float64 `json:"wait_p95_ms"`
	WaitMaxMS   float64 `json:"wait_max_ms"`
	SeatSeconds float64 `json:"seat_seconds"` // the group's, in the window
	ShareOfLane float64 `json:"share_of_lane"`
}

// summary is the run's.
type summary struct {
	Utilization float64        `json:"utilization"` // seat-seconds ÷ (limit × window)
	Jain        float64        `json:"jain_seats"`  // over every user with work in the window
	Limit       int            `json:"limit"`
	WindowS     float64        `json:"window_s"`
	MaxInFlight int            `json:"max_in_flight"` // the lane's count, as the lines recorded it
	Lines       int            `json:"lines"`
	Groups      []groupSummary `json:"groups"`
}

func summarize(groups []group, results []result, u usage, limit int, window time.Duration) summary {
	s := summary{Limit: limit, WindowS: window.Seconds(), MaxInFlight: u.maxInFlight, Lines: u.lines}
	s.Utilization = round3(u.total / (float64(limit) * window.Seconds()))
	var xs []float64
	for _, g := range groups {
		gs := groupSummary{Name: g.Name, Users: len(g.Tokens)}
		var waits []float64
		for _, tok := range g.Tokens {
			waits = append(waits, u.waits[userOf(tok)]...)
		}
		for _, r := range results {
			if r.group != g.Name {
				continue
			}
			gs.Calls++
			switch {
			case r.status == http.StatusOK:
				gs.OK++
			case r.status == http.StatusTooManyRequests:
				gs.Refused++
			default:
				gs.Errors++
			}
		}
		slices.Sort(waits)
		gs.WaitP50MS, gs.WaitP95MS = pct(waits, 0.50), pct(waits, 0.95)
		if len(waits) > 0 {
			gs.WaitMaxMS = waits[len(waits)-1]
		}
		for _, tok := range g.Tokens {
			x := u.seatSeconds[userOf(tok)]
			gs.SeatSeconds += x
			if g.Workers > 0 && g.Rate == 0 {
				xs = append(xs, x) // the backlogged users: equal demand
			}
		}
		gs.SeatSeconds = round3(gs.SeatSeconds)
		if u.total > 0 {
			gs.ShareOfLane = round3(gs.SeatSeconds / u.total)
		}
		s.Groups = append(s.Groups, gs)
	}
	s.Jain = round3(jain.Index(xs))
	return s
}

// userOf maps a token to its user: the bench's tokens are "<user>-token".
func userOf(token string) string { return strings.TrimSuffix(token, "-token") }

func pct(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(i, 0)]
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }
