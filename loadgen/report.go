package loadgen

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
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
}

// TierReport sums a tier's users.
type TierReport struct {
	Tier          string
	Users         int
	RowsDone      int
	RowsThrottled int
	RowsFailed    int
	// Fairness is Jain's index of the users' rows per second: 1 when every
	// user of the tier got the same throughput, 1/n when one got it all.
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

// Fairness returns Jain's index of xs: (Σx)² / (n·Σx²); 1 for no or all
// zero values.
func Fairness(xs []float64) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += x
		sq += x * x
	}
	if sq == 0 {
		return 1
	}
	return sum * sum / (float64(len(xs)) * sq)
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted)-1) + 0.5)
	return sorted[i]
}

func (r *run) report() *Report {
	rep := &Report{Duration: time.Since(r.start)}
	st := r.cfg.Transport.Stats()
	rep.Capacity429, rep.RateLimit429, rep.Waited = st.Capacity429, st.RateLimit429, st.Waited
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
	for _, name := range slices.Sorted(maps.Keys(tiers)) {
		t := tiers[name]
		t.Fairness = Fairness(rates[name])
		rep.Tiers = append(rep.Tiers, *t)
	}
	for _, kind := range []string{KindBulk, KindSingle, KindRerank} {
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

// Write prints the report as tables.
func (r *Report) Write(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "user\ttier\tcalls\trows done\tthrottled\tfailed\tcancelled\trows/s\twaited\t")
	for _, u := range r.Users {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%.1f\t%s\t\n", u.User, u.Tier, u.Calls, u.RowsDone,
			u.RowsThrottled, u.RowsFailed, u.RowsCancelled, u.RowsPerSecond, u.Waited.Round(time.Millisecond))
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
	fmt.Fprintf(w, "\ncapacity 429s by scope: %s; rate-limit 429s: %d; time waited: %s\n",
		strings.Join(scopes, ", "), r.RateLimit429, r.Waited.Round(time.Millisecond))
	for _, u := range r.Users {
		for _, e := range u.Errors {
			fmt.Fprintf(w, "failure (%s): %s\n", u.User, e)
		}
	}
}

func ms(d time.Duration) string { return d.Round(time.Millisecond).String() }
