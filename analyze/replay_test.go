package analyze_test

import (
	"bufio"
	"bytes"
	"context"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/analyze"
	"github.com/capgate/capgate/configtest"
	"github.com/capgate/capgate/settings"
	"github.com/capgate/capgate/tools/genlog"
)

// generate runs the real gate over a simulated store and returns its log.
func generate(t *testing.T, opts genlog.Options) ([]byte, genlog.Stats) {
	t.Helper()
	var buf bytes.Buffer
	st, err := genlog.Generate(context.Background(), &buf, opts)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	return buf.Bytes(), st
}

func analyzeBytes(t *testing.T, log []byte, opts analyze.Options) *analyze.Report {
	t.Helper()
	r, err := analyze.Analyze(context.Background(), []analyze.Input{{Name: "gen", R: bytes.NewReader(log)}}, opts)
	if err != nil {
		t.Fatalf("Analyze: %v", err)
	}
	return r
}

// TestReplayReproducesShadowLog replays a shadow log of the real gate with
// the limits that were in force: at least 99 % of the calls must get the
// decision their line records.
func TestReplayReproducesShadowLog(t *testing.T) {
	cfg := settings.Default(nil, settings.ModeShadow)
	log, st := generate(t, genlog.Options{Calls: 20000, Rate: 2, Users: 150, Tasks: 3, NoiseEvery: 500, Seed: 7, Config: &cfg})
	if st.Decisions["admitted"] < 2000 || st.Decisions["shadow-refused"] < 2000 {
		t.Fatalf("the generated log should mix decisions: %v", st.Decisions)
	}
	whatIf, _, err := analyze.WhatIfConfig(cfg, []string{"mode=shadow"})
	if err != nil {
		t.Fatal(err)
	}
	r := analyzeBytes(t, log, analyze.Options{WhatIf: &whatIf})

	if r.Calls.Total != int64(st.Calls) {
		t.Errorf("calls = %d, want %d", r.Calls.Total, st.Calls)
	}
	for d, n := range st.Decisions {
		if r.Calls.ByDecision[d] != n {
			t.Errorf("%s = %d, want %d", d, r.Calls.ByDecision[d], n)
		}
	}
	if r.Lines.Skipped != int64(st.Noise) || r.Dropped != st.Dropped {
		t.Errorf("skipped %d, dropped %d; want %d, %d", r.Lines.Skipped, r.Dropped, st.Noise, st.Dropped)
	}
	a := r.WhatIf.Agreement
	t.Logf("what-if agreement %d/%d (%.3f%%), changed %v, near ties %d; reconstruction %+v",
		a.Same, a.Compared, 100*a.Rate, a.Changed, a.NearTies, r.Reconstruction)
	if a.Compared != int64(st.Calls) || a.Rate < 0.99 {
		t.Errorf("what-if agreement %d/%d = %.4f, want ≥ 0.99 of %d", a.Same, a.Compared, a.Rate, st.Calls)
	}
	// Every call replayed differently had another call start or end
	// within 2 ms: the order lost to the millisecond resolution of the log.
	if a.NearTies != a.Compared-a.Same {
		t.Errorf("%d of %d disagreements are near ties, want all", a.NearTies, a.Compared-a.Same)
	}
	if rc := r.Reconstruction; rc.Agreement < 0.99 || float64(rc.CountsAgree) < 0.98*float64(rc.Calls) {
		t.Errorf("reconstruction %+v, want ≥ 99 %% decisions and ≥ 98 %% exact counts", rc)
	}
	if r.Reconstruction.Late != 0 {
		t.Errorf("late = %d, want 0 (the horizon grows with held_ms)", r.Reconstruction.Late)
	}
	// The recorded peaks and the rebuilt ones describe the same log.
	for _, p := range r.Lanes {
		if d := p.Peak - p.Reconstructed; d < -1 || d > 1 {
			t.Errorf("%s:%s recorded peak %d, rebuilt %d", p.Lane, p.ID, p.Peak, p.Reconstructed)
		}
	}
}

// TestReplayReproducesEnforceLog replays an enforce log with aware and
// unaware clients: refused calls took no lease, and the replay must refuse
// them again.
func TestReplayReproducesEnforceLog(t *testing.T) {
	cfg := settings.Default(nil, settings.ModeEnforce)
	cfg.EnforceFor = settings.EnforceAware
	log, st := generate(t, genlog.Options{Calls: 10000, Rate: 2, Users: 100, Tasks: 2, Aware: 0.5, Seed: 11, Config: &cfg})
	if st.Decisions["refused"] < 500 {
		t.Fatalf("want refusals in the generated log: %v", st.Decisions)
	}
	r := analyzeBytes(t, log, analyze.Options{Base: &cfg, WhatIf: &cfg})
	a := r.WhatIf.Agreement
	t.Logf("agreement %d/%d, changed %v", a.Same, a.Compared, a.Changed)
	if a.Rate < 0.99 {
		t.Errorf("agreement %.4f, want ≥ 0.99; changed %v", a.Rate, a.Changed)
	}
	if got, want := r.WhatIf.Decisions["refused"], st.Decisions["refused"]; got < want*98/100 || got > want*102/100 {
		t.Errorf("replay refused %d, log %d", got, want)
	}
	// Relaxing every limit admits every call, and the refused ones, which
	// never ran, take no lease.
	loose, _, err := analyze.WhatIfConfig(cfg, []string{"api_heavy.cluster=1000", "api_heavy.per_task=1000", "es2_knn=1000",
		"tiers.staff=1000", "tiers.core=1000", "tiers.early_access=1000", "tiers.preview=1000",
		"per_user.staff=1000", "per_user.core=1000", "per_user.early_access=1000", "per_user.preview=1000"})
	if err != nil {
		t.Fatal(err)
	}
	w := analyzeBytes(t, log, analyze.Options{Base: &cfg, WhatIf: &loose}).WhatIf
	if w.Refused != 0 || w.Decisions["admitted"] != int64(st.Calls) || w.NoLease != st.Decisions["refused"] {
		t.Errorf("loose what-if: %+v, want all admitted and %d without a lease", w, st.Decisions["refused"])
	}
}

// TestOutageWindows finds the store outages of a generated log.
func TestOutageWindows(t *testing.T) {
	out := []genlog.Outage{{At: 100 * time.Second, For: 20 * time.Second}, {At: 400 * time.Second, For: 5 * time.Second}}
	log, st := generate(t, genlog.Options{Calls: 2000, Rate: 3, Tasks: 1, Outages: out, Seed: 3})
	r := analyzeBytes(t, log, analyze.Options{})
	if r.Unavailable.Calls != st.Decisions["unavailable"] || r.Unavailable.StoreErrors != r.Unavailable.Calls {
		t.Errorf("unavailable %+v, want %d, all the store's", r.Unavailable, st.Decisions["unavailable"])
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if len(r.Unavailable.Windows) != 2 {
		t.Fatalf("windows = %+v, want 2", r.Unavailable.Windows)
	}
	for i, w := range r.Unavailable.Windows {
		// A window starts with the outage's first call and covers the
		// outage. The gate skips the store for 15 s after an error, and a
		// line's ts is when its call ended: the window may end up to the
		// skip plus the longest call after the outage.
		from := start.Add(out[i].At)
		to := from.Add(out[i].For + capgate.DefaultSkipDuration + time.Duration(r.Held.Max)*time.Millisecond)
		if w.Start.Before(from) || w.Start.After(from.Add(5*time.Second)) || w.End.Before(from.Add(out[i].For)) || w.End.After(to) {
			t.Errorf("window %d = %+v, want from %v (+5 s) to between %v and %v", i, w, from, from.Add(out[i].For), to)
		}
	}
}

// TestMergedGatewayLogs splits a log per task, as one file per gateway,
// and gets the same report from the two files as from the whole.
func TestMergedGatewayLogs(t *testing.T) {
	log, _ := generate(t, genlog.Options{Calls: 5000, Rate: 2, Tasks: 2, Seed: 5})
	var parts [2]bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(log))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		i := 0
		if strings.Contains(sc.Text(), `"task":"task-2"`) {
			i = 1
		}
		parts[i].Write(sc.Bytes())
		parts[i].WriteByte('\n')
	}
	whole := analyzeBytes(t, log, analyze.Options{})
	split, err := analyze.Analyze(context.Background(), []analyze.Input{
		{Name: "task-1", R: &parts[0]}, {Name: "task-2", R: &parts[1]}}, analyze.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if split.Reconstruction.DecisionsAgree != whole.Reconstruction.DecisionsAgree || split.Calls.Total != whole.Calls.Total {
		t.Errorf("split %+v, whole %+v", split.Reconstruction, whole.Reconstruction)
	}
	for i := range whole.Lanes {
		if whole.Lanes[i] != split.Lanes[i] {
			t.Errorf("lane %d: whole %+v, split %+v", i, whole.Lanes[i], split.Lanes[i])
		}
	}
}

// Lending (config lending.api_heavy): the real gate's log with lending on
// replays to the decisions it recorded, and a what-if of lending on a log
// made without it admits batch calls the reserve turned away.
func TestReplayWithLending(t *testing.T) {
	off := settings.Default(nil, settings.ModeShadow)
	configtest.SetNumbers(t, &off, "api_heavy.cluster", 4, "reserve_single_row", 2)
	on, _, err := off.Apply(settings.Patch{"lending": map[string]any{"api_heavy": 2}})
	if err != nil {
		t.Fatal(err)
	}
	log, st := generate(t, genlog.Options{Calls: 8000, Rate: 3, Users: 100, Tasks: 2, Seed: 31, Config: &on})
	same, _, err := analyze.WhatIfConfig(on, []string{"mode=shadow"})
	if err != nil {
		t.Fatal(err)
	}
	r := analyzeBytes(t, log, analyze.Options{WhatIf: &same})
	if a := r.WhatIf.Agreement; a.Compared != int64(st.Calls) || a.Rate < 0.99 || a.NearTies != a.Compared-a.Same {
		t.Errorf("replay of the lending config in force: agreement %+v, want ≥ 0.99 of %d, every change near a tie", a, st.Calls)
	}
	if rc := r.Reconstruction; rc.Agreement < 0.99 {
		t.Errorf("reconstruction %+v, want ≥ 99 %% decisions", rc)
	}

	// The same traffic without lending, replayed with it: fewer refused.
	log, _ = generate(t, genlog.Options{Calls: 8000, Rate: 3, Users: 100, Tasks: 2, Seed: 31, Config: &off})
	wiOff, _, _ := analyze.WhatIfConfig(off, []string{"mode=enforce", "enforce_for=all"})
	wiOn, _, _ := analyze.WhatIfConfig(off, []string{"mode=enforce", "enforce_for=all", "lending.api_heavy=2"})
	a := analyzeBytes(t, log, analyze.Options{WhatIf: &wiOff}).WhatIf
	b := analyzeBytes(t, log, analyze.Options{WhatIf: &wiOn}).WhatIf
	if a.Refused == 0 || b.Refused >= a.Refused {
		t.Errorf("refused without lending %d, with %d; want fewer with lending", a.Refused, b.Refused)
	}
	t.Logf("what-if refused: %d without lending, %d with", a.Refused, b.Refused)
}

// The what-if replays the config's fairness.by over the calls that waited
// in the log: a's calls hold 10× b's, and both waited; by calls a keeps
// about 10/11 of the contended time, by time each gets half.
func TestReplayFairness(t *testing.T) {
	var log strings.Builder
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	line := func(user string, held int64) {
		at = at.Add(time.Duration(held) * time.Millisecond)
		log.WriteString(`{"event":"ocl_capacity","decision":"admitted","user_id":"` + user + `","tier":"core","enforced":true,` +
			`"rows":10,"held_ms":` + strconv.FormatInt(held, 10) + `,"wait_ms":300,"ts":"` + at.Format(time.RFC3339Nano) + "\"}\n")
	}
	for range 10 {
		line("a", 2000)
		line("b", 200)
	}
	// c never waited.
	log.WriteString(strings.Replace(`{"event":"ocl_capacity","decision":"admitted","user_id":"c","tier":"core","enforced":true,"rows":10,"held_ms":100,"ts":"T"}`+"\n",
		"T", at.Add(time.Second).Format(time.RFC3339Nano), 1))
	for _, c := range []struct {
		by   string
		want map[string][2]float64 // user → logged, replayed share
	}{
		{"calls", map[string][2]float64{"a": {10.0 / 11, 10.0 / 11}, "b": {1.0 / 11, 1.0 / 11}, "c": {0, 0}}},
		{"time", map[string][2]float64{"a": {10.0 / 11, 0.5}, "b": {1.0 / 11, 0.5}}},
	} {
		cfg, _, err := analyze.WhatIfConfig(settings.Default(nil, settings.ModeEnforce), []string{"fairness.by=" + c.by})
		if err != nil {
			t.Fatal(err)
		}
		f := analyzeBytes(t, []byte(log.String()), analyze.Options{WhatIf: &cfg}).WhatIf.Fairness
		if f == nil || f.By != c.by || len(f.Users) != 2 {
			t.Fatalf("by %s: fairness %+v, want a and b (c never waited)", c.by, f)
		}
		for _, u := range f.Users {
			w := c.want[u.User]
			if math.Abs(u.Logged-w[0]) > 1e-9 || math.Abs(u.Replayed-w[1]) > 1e-9 {
				t.Errorf("by %s: %s's share logged %.3f, replayed %.3f; want %.3f, %.3f", c.by, u.User, u.Logged, u.Replayed, w[0], w[1])
			}
		}
	}
}
