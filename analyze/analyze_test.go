package analyze_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/analyze"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// call describes one log line by its start and held time (ms from t0).
type call struct {
	decision     capgate.Decision
	user         string
	tier         string
	task         string
	endpoint     string
	rows         int
	semantic     bool
	enforced     bool
	start, held  int64 // held < 0: no lease
	counts       []int // api_heavy, task, [es2_knn], tier, user, as recorded
	limits       []int
	full         []string
	queue        int64 // < 0: none
	retryAfter   int
	err          string
	logDropped   int
	endOverride  int64 // ts, when held < 0
	withoutCount bool
	degraded     bool
}

// line encodes c as the gate writes an ocl_capacity line: the fields in
// the documented order, unset ones left out, the lanes' fields named by
// the OCL policy (its lanes' log names). (The lines of the real gate reach analyze in
// the genlog tests.)
func line(c call) string {
	if c.endpoint == "" {
		c.endpoint = "$match"
	}
	if c.rows == 0 {
		c.rows = 5
	}
	if c.tier == "" {
		c.tier = "preview"
	}
	if c.task == "" {
		c.task = "gw1"
	}
	mode := settings.ModeShadow
	if c.enforced {
		mode = settings.ModeEnforce
	}
	ocl := policy.OCL()
	var l lineWriter
	l.str("event", ocl.Names.LogEvent)
	l.str("decision", string(c.decision))
	l.str("mode", string(mode))
	l.raw("enforced", strconv.FormatBool(c.enforced))
	l.str(ocl.Names.LogRouteKey, c.endpoint)
	l.raw("semantic", strconv.FormatBool(c.semantic))
	l.raw("reranker", "false")
	l.raw("rows", strconv.Itoa(c.rows))
	l.raw("single_row", strconv.FormatBool(c.endpoint == "$match" && c.rows == 1))
	l.str("tier", string(c.tier))
	l.str("user_id", c.user)
	if len(c.full) > 0 {
		l.str("scope", c.full[0])
		full, _ := json.Marshal(c.full)
		l.raw("full", string(full))
	}
	lanes := []capgate.LaneName{"api_heavy", "api_heavy_task"}
	if c.semantic {
		lanes = append(lanes, "es2_knn")
	}
	lanes = append(lanes, "tier", "user")
	for i, name := range lanes {
		inFlight, limit := ocl.Lane(string(name)).Log.InFlight, ocl.Lane(string(name)).Log.Limit
		if i < len(c.counts) && !c.withoutCount {
			l.raw(inFlight, strconv.Itoa(c.counts[i]))
		}
		if i < len(c.limits) {
			l.raw(limit, strconv.Itoa(c.limits[i]))
		}
	}
	if c.retryAfter > 0 {
		l.raw("retry_after", strconv.Itoa(c.retryAfter))
	}
	end := c.endOverride
	if c.held >= 0 {
		l.raw("held_ms", strconv.FormatInt(c.held, 10))
		end = c.start + c.held
	}
	if c.queue >= 0 {
		l.raw("queue_ms", strconv.FormatInt(c.queue, 10))
	}
	l.str("error", c.err)
	if c.degraded {
		l.raw("degraded", "true")
	}
	l.str("task", c.task)
	l.str("ts", t0.Add(time.Duration(end)*time.Millisecond).UTC().Format("2006-01-02T15:04:05.000Z07:00"))
	if c.logDropped > 0 {
		l.raw("log_dropped", strconv.Itoa(c.logDropped))
	}
	return "{" + l.b.String() + "}"
}

// lineWriter appends "key":value pairs to a JSON object's body.
type lineWriter struct{ b strings.Builder }

func (l *lineWriter) raw(k, v string) {
	if l.b.Len() > 0 {
		l.b.WriteByte(',')
	}
	l.b.WriteString(strconv.Quote(k) + ":" + v)
}

// str writes a string field; "" is left out, as the gate does.
func (l *lineWriter) str(k, v string) {
	if v == "" {
		return
	}
	s, _ := json.Marshal(v)
	l.raw(k, string(s))
}

func run(t *testing.T, log string, opts analyze.Options) *analyze.Report {
	t.Helper()
	r, err := analyze.Analyze(context.Background(), []analyze.Input{{Name: "test", R: strings.NewReader(log)}}, opts)
	if err != nil {
		t.Fatalf("Analyze: %v", err)
	}
	return r
}

func join(lines ...string) string { return strings.Join(lines, "\n") + "\n" }

// The default limits of a bulk, non-semantic call: api_heavy 3, task 2,
// tier preview 2, user preview 1.
var bulk = []int{3, 2, 2, 1}

func TestSkippedLines(t *testing.T) {
	log := join(
		line(call{decision: "admitted", user: "a", start: 0, held: 100, counts: []int{1, 1, 1, 1}, limits: bulk, queue: -1}),
		`time=2026-03-01T12:00:00Z level=INFO msg="gateway listening"`,
		`{"time":"2026-03-01T12:00:00Z","level":"WARN","msg":"capacity lane store failed"}`,
		`{"event":"ocl_capacity_config","version":3,"changes":{"mode":["shadow","enforce"]},"log_dropped":4}`,
		`{"event":"ocl_capacity","decision":"maybe","ts":"2026-03-01T12:00:00.000Z"}`,
		`{"event":"ocl_capacity","decision":"admitted"}`,
		`{"event":"ocl_capacity","decision":"admitted","ts":"2026-03-01T12:00:00.000Z"`,
		``,
		"   ",
		`{"event":"ocl_capacity","decision":"admitted","ts":"2026-03-01T12:00:00.000Z"} trailing`,
		line(call{decision: "admitted", user: "b", start: 50, held: 10, counts: []int{2, 2, 2, 1}, limits: bulk, queue: -1, logDropped: 3}),
		`{"event":"ocl_capacity","decision":"admitted","user_id":"`+strings.Repeat("x", 1000)+`","ts":"2026-03-01T12:00:00.000Z"}`,
	)
	r := run(t, log, analyze.Options{MaxLineBytes: 900})
	l := r.Lines
	want := analyze.LineCounts{Read: 12, Events: 2, Skipped: 8, Blank: 2, NotJSON: 3, Invalid: 2, TooLong: 1,
		OtherEvents: map[string]int64{"(no event)": 1, "ocl_capacity_config": 1}}
	if l.Read != want.Read || l.Events != want.Events || l.Skipped != want.Skipped || l.Blank != want.Blank ||
		l.NotJSON != want.NotJSON || l.Invalid != want.Invalid || l.TooLong != want.TooLong {
		t.Errorf("lines = %+v, want %+v", l, want)
	}
	if len(l.OtherEvents) != 2 || l.OtherEvents["(no event)"] != 1 || l.OtherEvents["ocl_capacity_config"] != 1 {
		t.Errorf("other events = %v, want %v", l.OtherEvents, want.OtherEvents)
	}
	if r.Dropped != 7 {
		t.Errorf("log_dropped sum = %d, want 7 (4 on a config line, 3 on a call line)", r.Dropped)
	}
	if r.Inputs[0].Lines != 12 || r.Inputs[0].Events != 2 {
		t.Errorf("input summary = %+v, want 12 lines, 2 events", r.Inputs[0])
	}
}

func TestCallsPeaksAndRates(t *testing.T) {
	// Three overlapping calls of user a, and one of b on gw2:
	//   a1 [0,1000)  a2 [200,800)  a3 [500,1500)  b1 [600,700) semantic, $rerank
	// At 600 four calls run: api_heavy peaks at 4; a's user lane at 3.
	//   c refused at 900 (enforced): a1 and a3 hold api_heavy, limit 2.
	log := join(
		line(call{decision: "shadow-refused", user: "b", task: "gw2", endpoint: "$rerank", tier: "core", start: 600, held: 100,
			counts: []int{4, 1, 1, 1}, limits: []int{3, 2, 4, 3}, full: []string{"api_heavy"}, queue: 20}),
		line(call{decision: "shadow-refused", user: "a", start: 200, held: 600, counts: []int{2, 2, 2, 2}, limits: bulk, full: []string{"user"}, queue: 10}),
		line(call{decision: "admitted", user: "a", start: 0, held: 1000, counts: []int{1, 1, 1, 1}, limits: bulk, queue: -1}),
		line(call{decision: "shadow-refused", user: "a", start: 500, held: 1000, counts: []int{3, 3, 3, 3}, limits: bulk,
			full: []string{"api_heavy", "api_heavy_task", "tier", "user"}, queue: 30, retryAfter: 15}),
		line(call{decision: "refused", user: "c", tier: "staff", enforced: true, start: 900, held: -1, endOverride: 900,
			counts: []int{2, 2, 0, 0}, limits: []int{2, 2, 4, 4}, full: []string{"api_heavy"}, queue: -1, retryAfter: 5}),
	)
	r := run(t, log, analyze.Options{})

	if r.Calls.Total != 5 || r.Calls.ByDecision["admitted"] != 1 || r.Calls.ByDecision["shadow-refused"] != 3 || r.Calls.ByDecision["refused"] != 1 {
		t.Errorf("by decision = %v (total %d)", r.Calls.ByDecision, r.Calls.Total)
	}
	if got := r.Calls.ByEndpoint["$rerank"]["shadow-refused"]; got != 1 {
		t.Errorf("$rerank shadow-refused = %d, want 1", got)
	}
	if got := r.Calls.ByTier["preview"]["shadow-refused"]; got != 2 {
		t.Errorf("preview shadow-refused = %d, want 2", got)
	}
	if !r.From.Equal(t0) || !r.To.Equal(t0.Add(1500*time.Millisecond)) {
		t.Errorf("span = %v..%v", r.From, r.To)
	}

	peaks := map[string]analyze.LanePeak{}
	for _, p := range append(r.Lanes, r.Users.Top...) {
		peaks[p.Lane+":"+p.ID] = p
	}
	tests := []struct {
		lane                             string
		peak, limitAtPeak, over, rebuilt int
	}{
		{"api_heavy:", 4, 3, 1, 4}, // b1 recorded 4 > 3
		{"api_heavy_task:gw1", 3, 2, 1, 3},
		{"api_heavy_task:gw2", 1, 2, 0, 1},
		{"tier:preview", 3, 2, 1, 3},
		{"tier:core", 1, 4, 0, 1},
		{"user:a", 3, 1, 2, 3},
		{"user:b", 1, 3, 0, 1},
	}
	for _, tt := range tests {
		p, ok := peaks[tt.lane]
		if !ok {
			t.Errorf("lane %s missing; have %v", tt.lane, peaks)
			continue
		}
		if p.Peak != tt.peak || p.PeakLimit != tt.limitAtPeak || p.OverLimit != int64(tt.over) || p.Reconstructed != tt.rebuilt {
			t.Errorf("%s: peak %d limit %d over %d rebuilt %d, want %d %d %d %d", tt.lane,
				p.Peak, p.PeakLimit, p.OverLimit, p.Reconstructed, tt.peak, tt.limitAtPeak, tt.over, tt.rebuilt)
		}
	}
	if p := peaks["api_heavy:"]; !p.ReconstructedAt.Equal(t0.Add(600 * time.Millisecond)) {
		t.Errorf("api_heavy rebuilt peak at %v, want t0+600ms", p.ReconstructedAt)
	}
	if p := peaks["api_heavy:"]; p.MinLimit != 2 || p.MaxLimit != 3 {
		t.Errorf("api_heavy limits %d-%d, want 2-3", p.MinLimit, p.MaxLimit)
	}

	rf := r.Refusals
	if rf.Calls != 5 || rf.ShadowRefused != 3 || rf.Refused != 1 || rf.Rate.Rate != 0.6 {
		t.Errorf("refusals = %+v, want 5 calls, 3 shadow-refused, 1 refused, rate 0.6", rf.Rate)
	}
	rates := map[string]analyze.Rate{}
	for _, x := range rf.ByLane {
		rates["lane "+x.Name] = x
	}
	for _, x := range rf.ByTier {
		rates["tier "+x.Name] = x
	}
	for _, x := range rf.TopUsers {
		rates["user "+x.Name] = x
	}
	for name, want := range map[string][3]int64{ // calls, shadow-refused, refused
		"lane api_heavy": {5, 2, 1}, "tier core": {1, 1, 0}, "lane user": {5, 2, 0}, "lane api_heavy_task": {5, 1, 0},
		"tier preview": {3, 2, 0}, "tier staff": {1, 0, 1}, "user a": {3, 2, 0}, "user c": {1, 0, 1},
	} {
		got := rates[name]
		if got.Calls != want[0] || got.ShadowRefused != want[1] || got.Refused != want[2] {
			t.Errorf("%s = %+v, want calls %d shadow %d refused %d", name, got, want[0], want[1], want[2])
		}
	}
	if got := rates["user a"].Rate; got < 0.666 || got > 0.667 {
		t.Errorf("user a rate = %v, want 2/3", got)
	}
	if rc := r.Reconstruction; rc.Calls != 5 || rc.DecisionsAgree != 5 || rc.CountsAgree != 5 {
		t.Errorf("reconstruction = %+v, want all 5 agreeing", rc)
	}
}

func TestPercentiles(t *testing.T) {
	var lines []string
	for i := 1; i <= 100; i++ {
		lines = append(lines, line(call{decision: "admitted", user: "u" + strconv.Itoa(i), start: int64(i) * 10000, held: int64(i),
			counts: []int{1, 1, 1, 1}, limits: bulk, queue: int64(1000 - i)}))
	}
	lines = append(lines, line(call{decision: "unavailable", user: "x", start: 0, held: -1, endOverride: 2_000_000, queue: 50000, err: "x"}))
	r := run(t, join(lines...), analyze.Options{})
	if got, want := r.Held, (analyze.Percentiles{Count: 100, P50: 50, P90: 90, P99: 99, Max: 100}); got != want {
		t.Errorf("held = %+v, want %+v", got, want)
	}
	q := r.Queue
	if q.Count != 101 || q.P50 != 950 || q.P90 != 990 || q.Max != 50000 {
		t.Errorf("queue = %+v, want count 101, p50 950, p90 990, max 50000", q)
	}
	if q.P99 < 998 || q.P99 > 999 {
		t.Errorf("queue p99 = %d, want 999 (nearest rank 100 of 101)", q.P99)
	}
}

// Degraded lines (the local lanes decided while the store was
// unavailable) are counted apart; their local counts reach no peak, rate or
// replay, and they belong to the outage's window.
func TestDegradedLines(t *testing.T) {
	deg := func(decision capgate.Decision, start int64, held int64, count int) string {
		return line(call{decision: decision, user: "a", start: start, held: held, endOverride: start,
			counts: []int{count, count, count, count}, limits: []int{1, 1, 1, 1}, queue: -1,
			err: capgate.ErrSkipped.Error(), degraded: true, enforced: true})
	}
	log := join(
		line(call{decision: "admitted", user: "a", start: 0, held: 100, counts: []int{1, 1, 1, 1}, limits: bulk, queue: -1}),
		deg("unavailable", 1000, 5000, 9),
		deg("refused", 2000, -1, 9),
		deg("unavailable", 3000, 500, 9),
	)
	r := run(t, log, analyze.Options{})
	un := r.Unavailable
	if un.Calls != 2 || un.Degraded != 2 || un.DegradedRefused != 1 {
		t.Errorf("unavailable %d, degraded %d, degraded refused %d; want 2, 2, 1", un.Calls, un.Degraded, un.DegradedRefused)
	}
	if len(un.Windows) != 1 || un.Windows[0].Calls != 3 {
		t.Errorf("windows %+v, want one of 3 calls", un.Windows)
	}
	if r.Reconstruction.Calls != 1 {
		t.Errorf("reconstructed %d calls, want only the counted one", r.Reconstruction.Calls)
	}
	var text strings.Builder
	if err := analyze.WriteText(&text, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "degraded (local lanes): 2 counted, 1 refused") {
		t.Errorf("text report lacks the degraded calls:\n%s", text.String())
	}
}

func TestUnavailabilityWindows(t *testing.T) {
	u := func(task string, at int64, err string) string {
		return line(call{decision: "unavailable", user: "a", task: task, held: -1, endOverride: at, queue: -1, err: err, limits: bulk, withoutCount: true})
	}
	ok := func(task string, at int64) string {
		return line(call{decision: "admitted", user: "a", task: task, start: at, held: 0, counts: []int{1, 1, 1, 1}, limits: bulk, queue: -1})
	}
	log := join(
		ok("gw1", 0),
		u("gw1", 1000, "dial tcp 10.0.0.5:6379: connect: connection refused"),
		u("gw2", 1500, "identity: upstream /user/ timed out"), // not the store's: no window
		u("gw1", 2000, capgate.ErrSkipped.Error()),
		u("gw1", 4000, capgate.ErrSkipped.Error()),
		ok("gw2", 4500), // another task: gw1's window stays open
		ok("gw1", 5000),
		u("gw1", 9000, capgate.ErrSkipped.Error()), // within 15 s of the run: the same outage
		ok("gw1", 20000),
		u("gw1", 40000, "redis: i/o timeout"), // a new run, open at the end
	)
	r := run(t, log, analyze.Options{})
	un := r.Unavailable
	if un.Calls != 6 || un.StoreErrors != 5 || un.Other != 1 {
		t.Errorf("unavailable = %d (store %d, other %d), want 6 (5, 1)", un.Calls, un.StoreErrors, un.Other)
	}
	if un.Errors[capgate.ErrSkipped.Error()] != 3 {
		t.Errorf("errors = %v", un.Errors)
	}
	want := []analyze.Window{
		{Task: "gw1", Start: t0.Add(time.Second), End: t0.Add(9 * time.Second), DurationMS: 8000, Calls: 4,
			Error: "dial tcp 10.0.0.5:6379: connect: connection refused"},
		{Task: "gw1", Start: t0.Add(40 * time.Second), End: t0.Add(40 * time.Second), DurationMS: 0, Calls: 1, Error: "redis: i/o timeout"},
	}
	if len(un.Windows) != len(want) {
		t.Fatalf("windows = %+v, want %+v", un.Windows, want)
	}
	for i := range want {
		if g, w := un.Windows[i], want[i]; g.Task != w.Task || !g.Start.Equal(w.Start) || !g.End.Equal(w.End) ||
			g.DurationMS != w.DurationMS || g.Calls != w.Calls || g.Error != w.Error {
			t.Errorf("window %d = %+v, want %+v", i, g, w)
		}
	}
}

func TestWhatIf(t *testing.T) {
	// Four bulk calls of different users overlapping at 500 ms, logged in
	// shadow mode under the defaults (bulk limit 3): the fourth found
	// api_heavy full.
	log := join(
		line(call{decision: "admitted", user: "a", start: 0, held: 1000, counts: []int{1, 1, 1, 1}, limits: bulk, queue: -1}),
		line(call{decision: "admitted", user: "b", task: "gw2", start: 100, held: 1000, counts: []int{2, 1, 2, 1}, limits: bulk, queue: -1}),
		line(call{decision: "admitted", user: "c", tier: "core", start: 200, held: 1000, counts: []int{3, 2, 1, 1}, limits: []int{3, 2, 4, 3}, queue: -1}),
		line(call{decision: "shadow-refused", user: "d", tier: "core", task: "gw2", start: 500, held: 100, counts: []int{4, 2, 2, 1},
			limits: []int{3, 2, 4, 3}, full: []string{"api_heavy"}, queue: -1}),
	)
	base := settings.Default(policy.OCL(), settings.ModeShadow)
	for _, tt := range []struct {
		name        string
		assign      []string
		decisions   map[string]int64
		refused     int64
		extraWait   int64
		agree       int64
		laneRefused map[string]int64
	}{
		{"same limits", []string{"mode=shadow"},
			map[string]int64{"admitted": 3, "shadow-refused": 1}, 0, 0, 4, nil},
		{"bigger cluster", []string{"api_heavy.cluster=5"},
			map[string]int64{"admitted": 4}, 0, 0, 3, nil},
		// enforce for all with cluster 2, reserve 0: a and b admitted; c
		// finds api_heavy 2 ≥ 2 (ahead 1: 5 s); d finds it 2 ≥ 2 again
		// (c took no lease) and its task lane gw2 holds b: 1 < 2.
		{"enforce a smaller cluster", []string{"mode=enforce", "enforce_for=all", "api_heavy.cluster=2", "reserve_single_row=0"},
			map[string]int64{"admitted": 2, "refused": 2}, 2, 10, 2, map[string]int64{"api_heavy": 2}},
		// aware only: nothing was enforced in a shadow log.
		{"enforce aware", []string{"mode=enforce", "api_heavy.cluster=2", "reserve_single_row=0"},
			map[string]int64{"admitted": 2, "shadow-refused": 2}, 0, 0, 3, nil},
		// a paused tier: every core call is refused with retry_after.paused.
		{"pause core", []string{"mode=enforce", "enforce_for=all", "tiers.core=0"},
			map[string]int64{"admitted": 2, "refused": 2}, 2, 240, 2, map[string]int64{"tier": 2}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, _, err := analyze.WhatIfConfig(base, tt.assign)
			if err != nil {
				t.Fatal(err)
			}
			w := run(t, log, analyze.Options{WhatIf: &cfg}).WhatIf
			if w == nil {
				t.Fatal("no what-if in the report")
			}
			if len(w.Decisions) != len(tt.decisions) {
				t.Errorf("decisions = %v, want %v", w.Decisions, tt.decisions)
			}
			for d, n := range tt.decisions {
				if w.Decisions[d] != n {
					t.Errorf("decisions = %v, want %v", w.Decisions, tt.decisions)
				}
			}
			if w.Refused != tt.refused || w.ExtraWaitSeconds != tt.extraWait || w.Agreement.Same != tt.agree || w.Agreement.Compared != 4 {
				t.Errorf("refused %d, wait %d s, agree %d/%d; want %d, %d s, %d/4",
					w.Refused, w.ExtraWaitSeconds, w.Agreement.Same, w.Agreement.Compared, tt.refused, tt.extraWait, tt.agree)
			}
			for _, lr := range w.ByLane {
				if lr.Refused != tt.laneRefused[lr.Name] {
					t.Errorf("lane %s refused %d, want %d", lr.Name, lr.Refused, tt.laneRefused[lr.Name])
				}
			}
		})
	}
}

func TestWhatIfConfigErrors(t *testing.T) {
	base := settings.Default(policy.OCL(), settings.ModeShadow)
	for _, tt := range []struct {
		assign  []string
		invalid bool
		msg     string
	}{
		{nil, false, "Give at least one <setting>=<value>."},
		{[]string{"mode"}, false, `Expected <setting>=<value>, got "mode".`},
		{[]string{"tiers.preview=lots"}, true, `"tiers.preview" must be a whole number from 0 to 100000.`},
		{[]string{"mode=loud"}, true, `"mode" must be one of off, shadow, enforce.`},
		{[]string{"reserve_single_row=9"}, true, `"reserve_single_row" (9) can't be more than "api_heavy.cluster" (4).`},
		{[]string{"tiers.gold=1"}, true, `Unknown setting "tiers.gold".`},
	} {
		_, _, err := analyze.WhatIfConfig(base, tt.assign)
		if err == nil || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("WhatIfConfig(%q) = %v, want %q", tt.assign, err, tt.msg)
			continue
		}
		if got := errors.Is(err, analyze.ErrInvalidWhatIf); got != tt.invalid {
			t.Errorf("WhatIfConfig(%q): errors.Is(ErrInvalidWhatIf) = %v, want %v", tt.assign, got, tt.invalid)
		}
	}
	cfg, changes, err := analyze.WhatIfConfig(base, []string{"tiers.preview=3", "mode=enforce"})
	if preview, _ := cfg.Number("tiers.preview"); err != nil || preview != 3 || cfg.Mode != settings.ModeEnforce || len(changes) != 2 {
		t.Errorf("WhatIfConfig = %+v, %v, %v", cfg, changes, err)
	}
}

func TestInputsMergedByTS(t *testing.T) {
	a := join(
		line(call{decision: "admitted", user: "a", start: 0, held: 1000, counts: []int{1, 1, 1, 1}, limits: bulk, queue: -1}),
		line(call{decision: "admitted", user: "a", start: 2000, held: 1000, counts: []int{2, 1, 2, 1}, limits: bulk, queue: -1}),
	)
	b := join(line(call{decision: "admitted", user: "b", task: "gw2", start: 1500, held: 1000, counts: []int{1, 1, 1, 1}, limits: bulk, queue: -1}))
	r, err := analyze.Analyze(context.Background(), []analyze.Input{
		{Name: "gw1.log", R: strings.NewReader(a)}, {Name: "gw2.log", R: strings.NewReader(b)}}, analyze.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Inputs) != 2 || r.Inputs[0].Events != 2 || r.Inputs[1].Events != 1 {
		t.Errorf("inputs = %+v", r.Inputs)
	}
	if rc := r.Reconstruction; rc.DecisionsAgree != 3 || rc.CountsAgree != 3 {
		t.Errorf("reconstruction = %+v, want 3 calls agreeing in counts (b overlaps a's second call)", rc)
	}
}

func TestCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	log := join(line(call{decision: "admitted", user: "a", held: 1, counts: []int{1, 1, 1, 1}, limits: bulk, queue: -1}))
	_, err := analyze.Analyze(ctx, []analyze.Input{{Name: "x", R: strings.NewReader(log)}}, analyze.Options{})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Analyze after cancel = %v, want context.Canceled", err)
	}
}

// A repeat's line (idempotency) is no call of its own: listed with the
// other events, not as an invalid line.
func TestRepeatLinesAreNoCalls(t *testing.T) {
	log := join(
		line(call{decision: "admitted", user: "a", start: 0, held: 100, counts: []int{1, 1, 1, 1}, limits: bulk, queue: -1}),
		`{"event":"ocl_capacity","decision":"joined","user_id":"a","dedup_of":"c1","ts":"2026-03-01T12:00:01.000Z"}`,
		`{"event":"ocl_capacity","decision":"replayed","user_id":"a","dedup_of":"c1","ts":"2026-03-01T12:00:02.000Z"}`,
	)
	l := run(t, log, analyze.Options{}).Lines
	if l.Events != 1 || l.Invalid != 0 || l.OtherEvents["ocl_capacity joined"] != 1 || l.OtherEvents["ocl_capacity replayed"] != 1 {
		t.Fatalf("lines = %+v", l)
	}
}
