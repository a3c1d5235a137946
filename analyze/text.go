package analyze

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// decisionOrder is the order decisions are shown in.
var decisionOrder = []string{"admitted", "shadow-refused", "refused", "unavailable"}

// WriteJSON writes r as indented JSON. It fails only when w does.
func WriteJSON(w io.Writer, r *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

// WriteText writes r as a plain-text report for people, naming things as
// r.Policy does. It fails only when w does.
func WriteText(w io.Writer, r *Report) error {
	lay := newLayout(r.Policy)
	bw := bufio.NewWriter(w)
	tw := tabwriter.NewWriter(bw, 0, 0, 2, ' ', 0)
	p := func(format string, a ...any) { fmt.Fprintf(tw, format, a...) }

	l := r.Lines
	p("capgate analyze: %d %s lines", l.Events, lay.event)
	if l.Events > 0 {
		p(", %s to %s (%s)", stamp(r.From), stamp(r.To), r.To.Sub(r.From).Round(time.Millisecond))
	}
	p("\n")
	p("Lines: %d read, %d skipped (%d not JSON, %d other events, %d invalid %s, %d too long), %d blank\n",
		l.Read, l.Skipped, l.NotJSON, sum(l.OtherEvents), l.Invalid, lay.event, l.TooLong, l.Blank)
	if len(l.OtherEvents) > 0 {
		p("  other events: %s\n", countList(l.OtherEvents))
	}
	p("Lines dropped by the gateways' sinks (log_dropped): %d\n", r.Dropped)

	p("\nCalls by decision\n")
	p("\t\ttotal\t%s\n", strings.Join(decisionOrder, "\t"))
	p("\tall\t%d\t%s\n", r.Calls.Total, decisionCells(r.Calls.ByDecision))
	for _, e := range sortedKeys(r.Calls.ByEndpoint) {
		p("\t%s %s\t%d\t%s\n", lay.routeKey, orNone(e), sum(r.Calls.ByEndpoint[e]), decisionCells(r.Calls.ByEndpoint[e]))
	}
	for _, t := range sortedTiers(lay, r.Calls.ByTier) {
		p("\ttier %s\t%d\t%s\n", orNone(t), sum(r.Calls.ByTier[t]), decisionCells(r.Calls.ByTier[t]))
	}
	if len(r.Calls.ByMode) > 0 {
		p("  by mode: %s\n", countList(r.Calls.ByMode))
	}

	p("\nPeak calls in flight per lane (recorded: the counts the lines carry; rebuilt: from [ts - held_ms, ts))\n")
	p("\tlane\tlines\tpeak\tlimit at peak\tlimits seen\tover limit\trebuilt peak\tpeak at\n")
	lanes := append(slices.Clone(r.Lanes), r.Users.Top...)
	for _, lp := range lanes {
		name := lp.Lane
		if lp.ID != "" {
			name += ":" + lp.ID
		}
		p("\t%s\t%d\t%d\t%d\t%s\t%d\t%d\t%s\n", name, lp.Calls, lp.Peak, lp.PeakLimit,
			limitRange(lp.MinLimit, lp.MaxLimit), lp.OverLimit, lp.Reconstructed, stamp(lp.PeakAt))
	}
	if r.Users.Seen > 0 {
		p("  users: %d seen, top %d shown by peak", r.Users.Seen, len(r.Users.Top))
		if r.Users.Folded > 0 {
			p("; %d calls of later users folded into %q", r.Users.Folded, otherUsersKey)
		}
		p("\n")
	}

	rf := r.Refusals
	p("\nShadow refusals: %d of %d counted calls (%s); refused: %d\n", rf.ShadowRefused, rf.Calls, pct(rf.Rate.Rate), rf.Refused)
	writeRates(p, "full lane", rf.ByLane)
	writeRates(p, "tier", rf.ByTier)
	writeRates(p, "user", rf.TopUsers)

	p("\nDurations (ms)\n\t\tcount\tp50\tp90\tp99\tmax\n")
	for _, d := range []struct {
		name string
		pc   Percentiles
	}{{"held_ms", r.Held}, {"queue_ms", r.Queue}, {"wait_ms", r.Wait}} {
		p("\t%s\t%d\t%d\t%d\t%d\t%d\n", d.name, d.pc.Count, d.pc.P50, d.pc.P90, d.pc.P99, d.pc.Max)
	}

	u := r.Unavailable
	p("\nUnavailable: %d calls (%d lane store, %d other)\n", u.Calls, u.StoreErrors, u.Other)
	if u.Degraded+u.DegradedRefused > 0 {
		p("\tdegraded (local lanes): %d counted, %d refused\n", u.Degraded, u.DegradedRefused)
	}
	if len(u.Windows) > 0 {
		p("\ttask\tstart\tend\tduration\tcalls\terror\n")
		for _, w := range u.Windows {
			p("\t%s\t%s\t%s\t%s\t%d\t%s\n", orNone(w.Task), stamp(w.Start), stamp(w.End),
				time.Duration(w.DurationMS)*time.Millisecond, w.Calls, w.Error)
		}
		if u.LeftOut > 0 {
			p("  %d more windows not listed\n", u.LeftOut)
		}
	}

	rc := r.Reconstruction
	p("\nReconstruction check: %d of %d counted calls get their logged decision from the intervals (%s); counts exact for %d",
		rc.DecisionsAgree, rc.Calls, pct(rc.Agreement), rc.CountsAgree)
	if d := rc.Calls - rc.DecisionsAgree; d > 0 {
		p("; %d of the %d others had another call start or end within 2 ms", rc.NearTies, d)
	}
	p("\n")
	if rc.Late > 0 {
		p("  %d calls started before the horizon (%s) and were replayed late\n", rc.Late, time.Duration(rc.HorizonMS)*time.Millisecond)
	}
	if r.WhatIf != nil {
		writeWhatIf(p, r.WhatIf)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

func writeWhatIf(p func(string, ...any), wi *WhatIf) {
	p("\nWhat if: %s\n", changeList(wi.Changes))
	p("  %d calls replayed: %s\n", wi.Calls, countList(wi.Decisions))
	p("  would refuse %d (%d not refused in the log); extra wait, estimated: %d s in total (sum of Retry-After)\n",
		wi.Refused, wi.NewlyRefused, wi.ExtraWaitSeconds)
	writeRates(p, "full lane", wi.ByLane)
	writeRates(p, "tier", wi.ByTier)
	a := wi.Agreement
	p("  agreement with the logged decisions: %d of %d (%s)", a.Same, a.Compared, pct(a.Rate))
	if len(a.Changed) > 0 {
		p("; changed: %s; %d of those near a tie (2 ms)", countList(a.Changed), a.NearTies)
	}
	p("\n")
	if f := wi.Fairness; f != nil {
		p("  fairness.by %s, over the calls that waited: user, waited, mean held ms, share of the time logged → replayed\n", f.By)
		for _, u := range f.Users {
			p("\t%s\t%d\t%.0f\t%s → %s\n", u.User, u.Waited, u.MeanHeldMS, pct(u.Logged), pct(u.Replayed))
		}
	}
	for _, n := range wi.Notes {
		p("  note: %s\n", n)
	}
}

func writeRates(p func(string, ...any), what string, rates []Rate) {
	if len(rates) == 0 {
		return
	}
	p("\t%s\tcalls\tshadow-refused\trate\trefused\n", what)
	for _, r := range rates {
		p("\t%s\t%d\t%d\t%s\t%d\n", orNone(r.Name), r.Calls, r.ShadowRefused, pct(r.Rate), r.Refused)
	}
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}

func pct(f float64) string { return fmt.Sprintf("%.2f%%", 100*f) }

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func limitRange(lo, hi int) string {
	if lo == hi {
		return fmt.Sprint(lo)
	}
	return fmt.Sprintf("%d-%d", lo, hi)
}

func sum(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

func decisionCells(m map[string]int64) string {
	cells := make([]string, len(decisionOrder))
	for i, d := range decisionOrder {
		cells[i] = fmt.Sprint(m[d])
	}
	return strings.Join(cells, "\t")
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func countList(m map[string]int64) string {
	parts := make([]string, 0, len(m))
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func changeList(m map[string][2]any) string {
	if len(m) == 0 {
		return "no change (the base config)"
	}
	parts := make([]string, 0, len(m))
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s %v→%v", k, m[k][0], m[k][1]))
	}
	return strings.Join(parts, ", ")
}
