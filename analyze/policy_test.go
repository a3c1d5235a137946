package analyze_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/capgate/capgate/analyze"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
	"github.com/capgate/capgate/tools/genlog"
)

// The tests of a log of another policy than OCL: the inference example
// (lanes cluster, model keyed by the body's model, user per tier free 1,
// pro 3; event capgate_call, route key "route"), its lines made by the
// real gate (genlog) under that policy. The tests read the lines
// themselves, with encoding/json, and check the report's per-lane numbers
// against theirs.

func inferencePolicy(t *testing.T) *policy.Policy {
	t.Helper()
	p, err := policy.Load("../examples/inference/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// callLine is what a test reads of a line.
type callLine struct {
	decision   string
	route      string
	model      string
	inputs     int // an embeddings call's texts
	tier, user string
	full       []string
	counts     map[string]int // by lane, where the line has the count
	limits     map[string]int
	start, end int64 // ms; start = end - held_ms
	held       bool
}

// laneID returns the report's name of lane of l's call: the lane, then
// ":" and the model or user for the lanes keyed by them.
func (l callLine) laneID(lane string) string {
	switch lane {
	case "model":
		return "model:" + l.model
	case "user":
		return "user:" + l.user
	}
	return lane
}

// readLines decodes the lines of p's event in log, in order.
func readLines(t *testing.T, log []byte, p *policy.Policy) []callLine {
	t.Helper()
	var out []callLine
	sc := bufio.NewScanner(bytes.NewReader(log))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) != nil || m["event"] != p.Names.LogEvent {
			continue
		}
		str := func(k string) string { s, _ := m[k].(string); return s }
		l := callLine{decision: str("decision"), route: str(p.Names.LogRouteKey), model: str("model"),
			tier: str("tier"), user: str("user_id"), counts: map[string]int{}, limits: map[string]int{}}
		if n, ok := m["inputs"].(float64); ok {
			l.inputs = int(n)
		}
		full, _ := m["full"].([]any)
		for _, f := range full {
			l.full = append(l.full, f.(string))
		}
		for _, ln := range p.Lanes {
			if n, ok := m[ln.Log.InFlight].(float64); ok {
				l.counts[ln.Name] = int(n)
			}
			if n, ok := m[ln.Log.Limit].(float64); ok {
				l.limits[ln.Name] = int(n)
			}
		}
		ts, err := time.Parse(time.RFC3339Nano, str("ts"))
		if err != nil {
			t.Fatal(err)
		}
		l.end = ts.UnixMilli()
		l.start = l.end
		if h, ok := m["held_ms"].(float64); ok {
			l.start, l.held = l.end-int64(h), true
		}
		out = append(out, l)
	}
	return out
}

func TestAnotherPolicyReport(t *testing.T) {
	p := inferencePolicy(t)
	log, st := generate(t, genlog.Options{Policy: p, Calls: 6000, Rate: 3, Users: 60, Tasks: 2, NoiseEvery: 500, Seed: 21})
	r := analyzeBytes(t, log, analyze.Options{Policy: p})
	lines := readLines(t, log, p)
	if len(lines) != st.Calls || r.Lines.Events != int64(st.Calls) || r.Lines.Skipped != int64(st.Noise) || r.Lines.Invalid != 0 {
		t.Fatalf("lines %+v, %d read here; want %d calls, %d skipped", r.Lines, len(lines), st.Calls, st.Noise)
	}
	if st.Decisions["shadow-refused"] < 500 {
		t.Fatalf("want lanes full in the generated log: %v", st.Decisions)
	}
	if got := slices.Sorted(maps.Keys(r.Calls.ByEndpoint)); !slices.Equal(got, []string{"chat", "completions", "embeddings"}) {
		t.Errorf("calls by route %v, want chat, completions, embeddings", got)
	}
	if got := slices.Sorted(maps.Keys(r.Calls.ByTier)); !slices.Equal(got, []string{"free", "pro"}) {
		t.Errorf("calls by tier %v, want free and pro", got)
	}

	// The peaks and limits of each lane, and the refusals by lane, as the
	// lines give them.
	type peak struct {
		lines          int64
		peak, over     int
		minLim, maxLim int
	}
	want := map[string]*peak{}
	type rate struct{ calls, shadow int64 }
	wantRates := map[string]*rate{}
	for _, l := range lines {
		for _, ln := range p.Lanes {
			id := l.laneID(ln.Name)
			pk := want[id]
			if pk == nil {
				pk = &peak{minLim: 1 << 30}
				want[id] = pk
			}
			lim, hasLim := l.limits[ln.Name]
			if hasLim {
				pk.minLim, pk.maxLim = min(pk.minLim, lim), max(pk.maxLim, lim)
				rt := wantRates[ln.Name]
				if rt == nil {
					rt = &rate{}
					wantRates[ln.Name] = rt
				}
				rt.calls++
				if l.decision == "shadow-refused" && slices.Contains(l.full, ln.Name) {
					rt.shadow++
				}
			}
			if n, ok := l.counts[ln.Name]; ok {
				pk.lines++
				pk.peak = max(pk.peak, n)
				if hasLim && n > lim {
					pk.over++
				}
			}
		}
	}
	models := 0
	for i, lp := range r.Lanes {
		id := lp.Lane
		if lp.ID != "" {
			id += ":" + lp.ID
		}
		switch {
		case i == 0 && id != "cluster", i > 0 && lp.Lane != "model":
			t.Errorf("lane %d is %s: want cluster, then the models", i, id)
		case lp.Lane == "model":
			models++
			if i > 1 && r.Lanes[i-1].ID >= lp.ID {
				t.Errorf("model lanes out of order: %s after %s", lp.ID, r.Lanes[i-1].ID)
			}
		}
	}
	if models < 3 {
		t.Errorf("%d model lanes, want one per model of the log", models)
	}
	checked := 0
	for _, lp := range append(slices.Clone(r.Lanes), r.Users.Top...) {
		id := lp.Lane
		if lp.ID != "" {
			id += ":" + lp.ID
		}
		w := want[id]
		if w == nil {
			t.Errorf("lane %s is in no line", id)
			continue
		}
		checked++
		if lp.Calls != w.lines || lp.Peak != w.peak || lp.OverLimit != int64(w.over) || lp.MinLimit != w.minLim || lp.MaxLimit != w.maxLim {
			t.Errorf("%s: lines %d peak %d over %d limits %d-%d; the lines say %d %d %d %d-%d", id,
				lp.Calls, lp.Peak, lp.OverLimit, lp.MinLimit, lp.MaxLimit, w.lines, w.peak, w.over, w.minLim, w.maxLim)
		}
		if d := lp.Peak - lp.Reconstructed; d < -1 || d > 1 {
			t.Errorf("%s: recorded peak %d, rebuilt %d", id, lp.Peak, lp.Reconstructed)
		}
	}
	if checked != 1+models+len(r.Users.Top) || len(r.Users.Top) != analyze.DefaultTop {
		t.Errorf("checked %d lanes, %d users listed", checked, len(r.Users.Top))
	}
	if lim := want["cluster"]; lim.minLim != 8 || lim.maxLim != 8 {
		t.Errorf("cluster limits %d-%d, want the policy's 8", lim.minLim, lim.maxLim)
	}
	var laneNames []string
	for _, lr := range r.Refusals.ByLane {
		laneNames = append(laneNames, lr.Name)
		if w := wantRates[lr.Name]; w == nil || lr.Calls != w.calls || lr.ShadowRefused != w.shadow {
			t.Errorf("lane %s: %d calls, %d shadow-refused; the lines say %+v", lr.Name, lr.Calls, lr.ShadowRefused, w)
		}
	}
	if !slices.Equal(laneNames, []string{"cluster", "model", "user"}) {
		t.Errorf("refusals by lane %v, want the policy's order", laneNames)
	}
	var tiers []string
	for _, tr := range r.Refusals.ByTier {
		tiers = append(tiers, tr.Name)
	}
	if !slices.Equal(tiers, []string{"pro", "free"}) {
		t.Errorf("refusals by tier %v, want the policy's order pro, free", tiers)
	}
	if rc := r.Reconstruction; rc.Agreement < 0.99 || float64(rc.CountsAgree) < 0.98*float64(rc.Calls) || rc.Late != 0 {
		t.Errorf("reconstruction %+v, want ≥ 99 %% decisions, ≥ 98 %% exact counts, none late", rc)
	}

	var text, page strings.Builder
	if err := analyze.WriteText(&text, r); err != nil {
		t.Fatal(err)
	}
	if err := analyze.WriteHTML(&page, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"capgate analyze: 6000 capgate_call lines", "invalid capgate_call", "  route chat ",
		"  tier pro ", "  model:model-0 ", "  cluster "} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
	for _, want := range []string{"<code>capgate_call</code> lines", "Calls by decision, route and tier", "route chat",
		"Calls in flight: model:model-0", "limit (the largest recorded in the interval)</p>"} {
		if !strings.Contains(page.String(), want) {
			t.Errorf("page lacks %q", want)
		}
	}
	for _, out := range []string{text.String(), page.String()} {
		if strings.Contains(out, "ocl_capacity") || strings.Contains(out, "endpoint") || strings.Contains(out, "$match") {
			t.Errorf("report names OCL things:\n%.2000s", out)
		}
	}
}

// replayLines replays lines as an enforce-all config with the limits of
// cfg (the inference lanes) would decide them, calls in order of start:
// a call finding a lane full is refused and holds nothing. It returns the
// decisions and the refusals by full lane.
func replayLines(t *testing.T, lines []callLine, cfg settings.Config) (decisions, byLane map[string]int64) {
	t.Helper()
	number := func(key string) int {
		n, ok := cfg.Number(key)
		if !ok {
			t.Fatalf("no config key %s", key)
		}
		return n
	}
	order := make([]int, len(lines))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return lines[order[a]].start < lines[order[b]].start })
	type hold struct {
		end   int64
		keys  []string
		seats []int
	}
	var active []hold
	count := map[string]int{}
	decisions, byLane = map[string]int64{}, map[string]int64{}
	for _, i := range order {
		l := lines[i]
		kept := active[:0]
		for _, h := range active {
			if h.end > l.start {
				kept = append(kept, h)
				continue
			}
			for j, k := range h.keys {
				count[k] -= h.seats[j]
			}
		}
		active = kept
		limits := map[string]int{"cluster": number("lanes.cluster"), "model": number("lanes.model"), "user": number("lanes.user." + l.tier)}
		var keys []string
		var seats []int
		full := false
		for _, lane := range []string{"cluster", "model", "user"} {
			k := l.laneID(lane)
			// The example's seats: an embeddings call takes a seat per 16
			// texts in the model lane, at least 1, at most 4 and at most
			// the limit.
			n := 1
			if lane == "model" && l.route == "embeddings" {
				n = max(1, min((l.inputs+15)/16, 4, limits[lane]))
			}
			keys, seats = append(keys, k), append(seats, n)
			if count[k]+n > limits[lane] {
				full = true
				byLane[lane]++
			}
		}
		if full {
			decisions["refused"]++
			continue
		}
		decisions["admitted"]++
		if l.held && l.end > l.start {
			for j, k := range keys {
				count[k] += seats[j]
			}
			active = append(active, hold{l.end, keys, seats})
		}
	}
	return decisions, byLane
}

func TestAnotherPolicyWhatIf(t *testing.T) {
	p := inferencePolicy(t)
	cfg := settings.Default(p, settings.ModeShadow)
	log, st := generate(t, genlog.Options{Policy: p, Config: &cfg, Calls: 6000, Rate: 3, Users: 60, Tasks: 2, Seed: 22})
	lines := readLines(t, log, p)

	// The config in force, replayed, gives the logged decisions.
	same, _, err := analyze.WhatIfConfig(cfg, []string{"mode=shadow"})
	if err != nil {
		t.Fatal(err)
	}
	r := analyzeBytes(t, log, analyze.Options{Policy: p, WhatIf: &same})
	if a := r.WhatIf.Agreement; a.Compared != int64(st.Calls) || a.Rate < 0.99 || a.NearTies != a.Compared-a.Same {
		t.Errorf("replay of the config in force: agreement %+v, want ≥ 0.99 of %d, every change near a tie", a, st.Calls)
	}

	for _, tt := range []struct {
		name   string
		assign []string
		full   []string // lanes that refuse calls
	}{
		{"one call per model", []string{"mode=enforce", "enforce_for=all", "lanes.model=1"}, []string{"model", "user"}},
		{"a small cluster", []string{"mode=enforce", "enforce_for=all", "lanes.cluster=3", "lanes.user.pro=1"}, []string{"cluster", "user"}},
		{"everything loose", []string{"mode=enforce", "enforce_for=all", "lanes.cluster=1000", "lanes.model=1000",
			"lanes.user.free=1000", "lanes.user.pro=1000"}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			wi, changes, err := analyze.WhatIfConfig(cfg, tt.assign)
			if err != nil {
				t.Fatal(err)
			}
			r := analyzeBytes(t, log, analyze.Options{Policy: p, WhatIf: &wi})
			w := r.WhatIf
			if len(w.Changes) != len(changes) || len(changes) != len(tt.assign) {
				t.Errorf("changes %v, want %d", w.Changes, len(tt.assign))
			}
			decisions, byLane := replayLines(t, lines, wi)
			if !maps.Equal(w.Decisions, decisions) || w.Refused != decisions["refused"] {
				t.Errorf("decisions %v (refused %d), the lines replayed here give %v", w.Decisions, w.Refused, decisions)
			}
			var names []string
			for _, lr := range w.ByLane {
				names = append(names, lr.Name)
				if lr.Calls != int64(st.Calls) || lr.Refused != byLane[lr.Name] || lr.ShadowRefused != 0 ||
					(lr.Refused > 0) != slices.Contains(tt.full, lr.Name) {
					t.Errorf("lane %s: %+v; want %d calls, %d refused (full: %v)", lr.Name, lr, st.Calls, byLane[lr.Name], tt.full)
				}
			}
			if !slices.Equal(names, []string{"cluster", "model", "user"}) {
				t.Errorf("what-if by lane %v, want the policy's order", names)
			}
			var text strings.Builder
			if err := analyze.WriteText(&text, r); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(text.String(), "What if: ") || !strings.Contains(text.String(), "lanes.") {
				t.Errorf("text lacks the what-if:\n%s", text.String())
			}
		})
	}

	// OCL's keys are not this policy's.
	_, _, err = analyze.WhatIfConfig(cfg, []string{"api_heavy.cluster=2"})
	if !errors.Is(err, analyze.ErrInvalidWhatIf) || !strings.Contains(err.Error(), `Unknown setting "api_heavy".`) {
		t.Errorf("an OCL key: %v", err)
	}
}

// TestAnotherPolicyEnforceLog replays an enforce log of the inference
// policy with aware and unaware clients under the config it ran with.
func TestAnotherPolicyEnforceLog(t *testing.T) {
	p := inferencePolicy(t)
	cfg := settings.Default(p, settings.ModeEnforce)
	log, st := generate(t, genlog.Options{Policy: p, Config: &cfg, Calls: 6000, Rate: 3, Users: 60, Tasks: 2, Aware: 0.5, Seed: 23})
	if st.Decisions["refused"] < 300 {
		t.Fatalf("want refusals in the generated log: %v", st.Decisions)
	}
	// Options.Policy defaults to the base config's.
	r := analyzeBytes(t, log, analyze.Options{Base: &cfg, WhatIf: &cfg})
	if r.Lines.Events != int64(st.Calls) {
		t.Fatalf("%d calls read, want %d", r.Lines.Events, st.Calls)
	}
	a := r.WhatIf.Agreement
	if a.Rate < 0.99 {
		t.Errorf("agreement %.4f, want ≥ 0.99; changed %v", a.Rate, a.Changed)
	}
	if got, want := r.WhatIf.Decisions["refused"], st.Decisions["refused"]; got < want*98/100 || got > want*102/100 {
		t.Errorf("replay refused %d, log %d", got, want)
	}
}

// A lane keyed by a call field keeps MaxUsers values, then one entry for
// the rest.
func TestFieldLaneFolds(t *testing.T) {
	p := inferencePolicy(t)
	log, _ := generate(t, genlog.Options{Policy: p, Calls: 3000, Rate: 3, Users: 60, Seed: 24})
	whole := analyzeBytes(t, log, analyze.Options{Policy: p})
	folded := analyzeBytes(t, log, analyze.Options{Policy: p, MaxUsers: 2})
	lines := func(r *analyze.Report) (ids []string, n int64) {
		for _, lp := range r.Lanes {
			if lp.Lane == "model" {
				ids = append(ids, lp.ID)
				n += lp.Calls
			}
		}
		return ids, n
	}
	wholeIDs, wholeN := lines(whole)
	ids, n := lines(folded)
	if len(wholeIDs) <= 3 || len(ids) != 3 || !slices.Contains(ids, "(other keys)") || n != wholeN {
		t.Errorf("model lanes %v (%d lines), folded into %v (%d lines); want 2 and (other keys), the same lines",
			wholeIDs, wholeN, ids, n)
	}
}

func TestPolicyMismatch(t *testing.T) {
	p := inferencePolicy(t)
	ocl := settings.Default(nil, settings.ModeShadow)
	for _, opts := range []analyze.Options{{Policy: p, Base: &ocl}, {Policy: p, WhatIf: &ocl}} {
		if _, err := analyze.Analyze(t.Context(), nil, opts); !errors.Is(err, analyze.ErrPolicyMismatch) {
			t.Errorf("Analyze(%+v) = %v, want ErrPolicyMismatch", opts, err)
		}
	}
	// An OCL log read as the inference policy's: no line is a call.
	log, st := generate(t, genlog.Options{Calls: 200, Seed: 25})
	r := analyzeBytes(t, log, analyze.Options{Policy: p})
	if r.Lines.Events != 0 || r.Lines.OtherEvents["ocl_capacity"] != int64(st.Calls) {
		t.Errorf("lines %+v, want %d other events ocl_capacity", r.Lines, st.Calls)
	}
}
