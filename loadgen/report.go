package loadgen

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/capgate/capgate/internal/jain"
)

// Progress is a running count.
type Progress struct {
	Elapsed   time.Duration
	Calls     int
	RowsDone  int
	Throttled int
	Failed    int
}

func (r *run) progress() Progress {
	p := Progress{Elapsed: time.Since(r.start)}
	for _, u := range r.users {
		u.mu.Lock()
		p.Calls += u.calls
		p.RowsDone += u.done
		p.Throttled += u.throttled
		p.Failed += u.failed
		u.mu.Unlock()
	}
	return p
}

// UserReport is what one user got done.
type UserReport struct {
	User          string
	Tier          string
	Calls         int
	RowsDone      int
	RowsThrottled int
	RowsFailed    int
	RowsCancelled int           // still running or waiting when the grace ran out
	RowsPerSecond float64       // rows done per second of the run
	Waited        time.Duration // time held back by refusals and backoffs
	Errors        []string      // the first few failures
	// With Config.Calls: the calls the user had to send, when its last
	// successful call ended (from the run's start), when it would have
	// ended with the bottleneck's slots going round-robin across users
	// (RoundRobinFinish with the mean call time; among the users of least
	// demand, matched by rank: the k-th of them to finish gets the k-th
	// earliest of their shares), and Finish ÷ that.
	Demand   int
	Finish   time.Duration
	RRFinish time.Duration
	Slowdown float64
}

// TierReport sums a tier's users.
type TierReport struct {
	Tier          string
	Users         int
	RowsDone      int
	RowsThrottled int
	RowsFailed    int
	// Fairness is Jain's index of the users' throughput: 1 when every
	// user of the tier got the same, 1/n when one got it all. Throughput is
	// rows done per second of the run; with Config.Calls, rows done ÷ the
	// user's finish time, over the tier's users of equal demand (those
	// with the tier's most common number of calls).
	Fairness float64
}

// Latency holds the percentiles of one kind of call's total time, waits
// included.
type Latency struct {
	Kind          string
	Calls         int
	P50, P90, P99 time.Duration
	Max           time.Duration
}

// Report is the outcome of a run.
type Report struct {
	Duration     time.Duration
	Users        []UserReport
	Tiers        []TierReport
	Latencies    []Latency
	Capacity429  map[string]int64 // capacity refusals by scope
	RateLimit429 int64
	Waited       time.Duration

	Client   string
	Total429 int // every 429 any client got, capacity or not
	// Makespan is from the first call to the last answer.
	Makespan time.Duration
	// Busy is the calls' summed time holding the bottleneck lane; from the
	// upstream's stats (BusySource "upstream") or, without them, the time
	// of every successful attempt as the client saw it ("client").
	Busy       time.Duration
	BusySource string
	Served     int // successful attempts (calls the API ran)
	// With Config.BottleneckLimit: Ideal = Busy ÷ limit, the makespan if
	// the lane's slots had never been idle, and Utilization = Ideal ÷
	// Makespan.
	BottleneckLimit int
	Ideal           time.Duration
	Utilization     float64
	// UtilizationNote, when set, says why Utilization means nothing for
	// this run: the limit did not hold the calls (shadow, fail-open), so
	// busy ÷ (limit × makespan) is not a share of the lane's slots. The
	// report then prints the note instead of the number.
	UtilizationNote string
	// Decisions counts the gateway's answers in its policy's Decision
	// header.
	Decisions map[string]int
	// MaxSlowdown is the largest Slowdown among the users with the fewest
	// calls (the light users; all users when demand is equal).
	MaxSlowdown float64
}

// Failed returns the rows that failed across all users.
func (r *Report) Failed() int {
	n := 0
	for _, u := range r.Users {
		n += u.RowsFailed
	}
	return n
}

// Throttled returns the rows that were throttled across all users.
func (r *Report) Throttled() int {
	n := 0
	for _, u := range r.Users {
		n += u.RowsThrottled
	}
	return n
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted)-1) + 0.5)
	return sorted[i]
}

func (r *run) report() *Report {
	rep := &Report{Duration: time.Since(r.start), Client: r.cfg.Client, Makespan: r.end.Sub(r.start),
		BottleneckLimit: r.cfg.BottleneckLimit}
	if r.cfg.Client == ClientAware {
		st := r.cfg.Transport.Stats()
		rep.Capacity429, rep.RateLimit429, rep.Waited = st.Capacity429, st.RateLimit429, st.Waited
	}
	rep.Busy, rep.Served, rep.Total429 = r.meter.totals()
	rep.BusySource = "client"
	if r.cfg.SimStatsURL != "" {
		rep.Busy, rep.BusySource = r.simAfter-r.simBefore, "upstream"
	}
	rep.Decisions = r.meter.decided()
	if l := r.cfg.BottleneckLimit; l > 0 {
		rep.Ideal = rep.Busy / time.Duration(l)
		rep.Utilization = Utilization(rep.Busy, l, rep.Makespan)
		rep.UtilizationNote = utilizationNote(rep.Decisions, rep.Utilization)
	}
	secs := r.cfg.Duration.Seconds()
	tiers := map[string]*TierReport{}
	rates := map[string][]float64{}
	lat := map[string][]time.Duration{}
	for _, u := range r.users {
		u.mu.Lock()
		ur := UserReport{User: u.Name, Tier: u.Tier, Calls: u.calls, RowsDone: u.done,
			RowsThrottled: u.throttled, RowsFailed: u.failed, RowsCancelled: u.cancelled,
			RowsPerSecond: float64(u.done) / secs, Waited: u.waited, Errors: slices.Clone(u.errs)}
		for k, v := range u.lat {
			lat[k] = append(lat[k], v...)
		}
		u.mu.Unlock()
		rep.Users = append(rep.Users, ur)
		t := tiers[u.Tier]
		if t == nil {
			t = &TierReport{Tier: u.Tier}
			tiers[u.Tier] = t
		}
		t.Users++
		t.RowsDone += ur.RowsDone
		t.RowsThrottled += ur.RowsThrottled
		t.RowsFailed += ur.RowsFailed
		rates[u.Tier] = append(rates[u.Tier], ur.RowsPerSecond)
	}
	if r.cfg.Calls > 0 {
		r.fixedWorkload(rep)
		rates = map[string][]float64{}
		modal := modalDemand(rep.Users)
		for _, u := range rep.Users {
			if u.Demand != modal[u.Tier] {
				continue
			}
			x := 0.0
			if u.Finish > 0 {
				x = float64(u.RowsDone) / u.Finish.Seconds()
			}
			rates[u.Tier] = append(rates[u.Tier], x)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(tiers)) {
		t := tiers[name]
		t.Fairness = jain.Index(rates[name])
		rep.Tiers = append(rep.Tiers, *t)
	}
	kinds := r.kinds
	if kinds == nil {
		kinds = Kinds(r.cfg)
	}
	for _, kind := range kinds {
		d := lat[kind]
		slices.Sort(d)
		if len(d) == 0 {
			continue
		}
		rep.Latencies = append(rep.Latencies, Latency{Kind: kind, Calls: len(d),
			P50: percentile(d, 0.5), P90: percentile(d, 0.9), P99: percentile(d, 0.99), Max: d[len(d)-1]})
	}
	return rep
}

// utilizationNote says why a utilization means nothing, or "" when it
// does: the limit bounded the calls only when none went past it —
// none shadow-refused (shadow, or a call enforce_for did not cover) or
// unavailable (let through while the lane store failed) — and the
// number is then at most 1.
func utilizationNote(decisions map[string]int, u float64) string {
	var past []string
	for _, d := range []string{"shadow-refused", "unavailable"} {
		if n := decisions[d]; n > 0 {
			past = append(past, fmt.Sprintf("%d %s", n, d))
		}
	}
	switch {
	case len(past) > 0:
		return fmt.Sprintf("not meaningful: calls ran past the limit (%s), as in shadow; it measures how busy enforce keeps the lane", strings.Join(past, ", "))
	case u > 1+1e-9:
		return fmt.Sprintf("not meaningful: %.3f is over 1, so calls ran past the limit (is it the lane that binds, and is the gateway in enforce?)", u)
	}
	return ""
}

// fixedWorkload fills each user's demand, finish, round-robin share and
// slowdown.
func (r *run) fixedWorkload(rep *Report) {
	demand := make([]int, len(rep.Users))
	least := 0
	for i, u := range r.users {
		demand[i] = or(u.Calls, r.cfg.Calls)
		rep.Users[i].Demand = demand[i]
		u.mu.Lock()
		rep.Users[i].Finish = u.finish
		u.mu.Unlock()
		if i == 0 || demand[i] < least {
			least = demand[i]
		}
	}
	if rep.Served == 0 || r.cfg.BottleneckLimit <= 0 {
		return
	}
	hold := rep.Busy / time.Duration(rep.Served)
	rr := RoundRobinFinish(demand, r.cfg.BottleneckLimit, hold)
	// Which light user gets which of the light users' round-robin shares
	// is the simulation's arbitrary turn order: match them by rank, the
	// k-th light user to finish against the k-th earliest share.
	var light []int
	var shares []time.Duration
	for i := range rep.Users {
		if demand[i] == least {
			light = append(light, i)
			shares = append(shares, rr[i])
		}
	}
	slices.SortStableFunc(light, func(a, b int) int { return cmp.Compare(rep.Users[a].Finish, rep.Users[b].Finish) })
	slices.Sort(shares)
	for k, i := range light {
		rr[i] = shares[k]
	}
	for i, f := range rr {
		u := &rep.Users[i]
		u.RRFinish = f
		if f > 0 && u.Finish > 0 {
			u.Slowdown = float64(u.Finish) / float64(f)
		}
		if demand[i] == least {
			rep.MaxSlowdown = max(rep.MaxSlowdown, u.Slowdown)
		}
	}
}

// modalDemand returns each tier's most common demand (the smallest on a
// tie).
func modalDemand(users []UserReport) map[string]int {
	counts := map[string]map[int]int{}
	for _, u := range users {
		if counts[u.Tier] == nil {
			counts[u.Tier] = map[int]int{}
		}
		counts[u.Tier][u.Demand]++
	}
	out := map[string]int{}
	for tier, m := range counts {
		best := -1
		for _, d := range slices.Sorted(maps.Keys(m)) {
			if best < 0 || m[d] > m[best] {
				best = d
			}
		}
		out[tier] = best
	}
	return out
}

// Write prints the report as tables.
func (r *Report) Write(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	// Finish times and round-robin shares exist only for a fixed workload
	// (--calls); a timed run has none to show.
	fixed := slices.ContainsFunc(r.Users, func(u UserReport) bool { return u.Finish > 0 })
	head := "user\ttier\tcalls\trows done\tthrottled\tfailed\tcancelled\trows/s\twaited\t"
	if fixed {
		head += "finish\tround-robin\tslowdown\t"
	}
	fmt.Fprintln(tw, head)
	for _, u := range r.Users {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%.1f\t%s\t", u.User, u.Tier, u.Calls, u.RowsDone,
			u.RowsThrottled, u.RowsFailed, u.RowsCancelled, u.RowsPerSecond, u.Waited.Round(time.Millisecond))
		if fixed {
			fmt.Fprintf(tw, "%s\t%s\t%.2f\t", ms(u.Finish), ms(u.RRFinish), u.Slowdown)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintln(tw, "tier\tusers\trows done\tthrottled\tfailed\tfairness (Jain)\t")
	for _, t := range r.Tiers {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%.3f\t\n", t.Tier, t.Users, t.RowsDone, t.RowsThrottled, t.RowsFailed, t.Fairness)
	}
	tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintln(tw, "call\tcalls\tp50\tp90\tp99\tmax\t")
	for _, l := range r.Latencies {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t\n", l.Kind, l.Calls, ms(l.P50), ms(l.P90), ms(l.P99), ms(l.Max))
	}
	tw.Flush()
	var scopes []string
	for _, s := range slices.Sorted(maps.Keys(r.Capacity429)) {
		scopes = append(scopes, fmt.Sprintf("%s %d", s, r.Capacity429[s]))
	}
	if len(scopes) == 0 {
		scopes = []string{"none"}
	}
	fmt.Fprintf(w, "\nclient %s; 429s: %d; capacity 429s by scope (aware client): %s; rate-limit 429s: %d; time waited: %s\n",
		r.Client, r.Total429, strings.Join(scopes, ", "), r.RateLimit429, r.Waited.Round(time.Millisecond))
	fmt.Fprintf(w, "makespan %s; calls served %d, busy %s (%s)", ms(r.Makespan), r.Served, ms(r.Busy), r.BusySource)
	switch {
	case r.BottleneckLimit > 0 && r.UtilizationNote != "":
		fmt.Fprintf(w, "; bottleneck utilization (limit %d) %s", r.BottleneckLimit, r.UtilizationNote)
	case r.BottleneckLimit > 0:
		fmt.Fprintf(w, "; ideal %s; bottleneck utilization %.3f (limit %d)", ms(r.Ideal), r.Utilization, r.BottleneckLimit)
	}
	if r.MaxSlowdown > 0 {
		fmt.Fprintf(w, "; light users' worst slowdown vs round-robin %.2f", r.MaxSlowdown)
	}
	fmt.Fprintf(w, "; rows failed %d\n", r.Failed())
	for _, u := range r.Users {
		for _, e := range u.Errors {
			fmt.Fprintf(w, "failure (%s): %s\n", u.User, e)
		}
	}
}

func ms(d time.Duration) string { return d.Round(time.Millisecond).String() }
