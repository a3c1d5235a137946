package demo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/config"
	"github.com/capgate/capgate/loadgen"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/server"
	"github.com/capgate/capgate/settings"
	"github.com/capgate/capgate/status"
	"github.com/capgate/capgate/tools/simapi"
)

// Demo is the run of `capgate demo`: a simulated API with a knee (it
// slows past its capacity and fails past twice that), the real gateway in
// front of it (server.Server on in-process lanes and a SQLite config in a
// temporary directory), and simulated users of every tier; each mode of
// Modes for its share of Duration, then the modes side by side. Under the
// built-in policy the OCL Mapper's API and users; under another policy a
// simulated API of its routes (simapi.Generic), users of its tiers calling
// them (loadgen's routes workload), the tiers, lanes and summary its own.
type Demo struct {
	Stdout, Stderr io.Writer
	// Live rewrites the progress line in place (a terminal); otherwise a
	// progress line is printed every 5 s.
	Live bool

	PolicyFile string          // the policy (YAML); "": the built-in policy
	Duration   time.Duration   // how long the users send new calls, all modes together; > 0
	Modes      []settings.Mode // shadow, enforce or both in turn; none: shadow then enforce
	PerTier    int             // simulated users in each tier, 1 to 50
	LogFile    string          // the per-call log lines; "": a file in the demo's temporary directory
}

// demoPhase is one half of the demo: its mode and what happened.
type demoPhase struct {
	mode   settings.Mode
	dur    time.Duration
	rep    *loadgen.Report
	api    simapi.Window
	t      *phaseTally
	engine *engineWindow // the inference engine's, under an inference API's policy; nil else
}

// Run runs the demo until its users are done or ctx is.
func (c *Demo) Run(ctx context.Context) error {
	pol, err := server.Settings{PolicyFile: c.PolicyFile}.LoadPolicy()
	if err != nil {
		return err
	}
	modes := c.Modes
	if len(modes) == 0 {
		modes = []settings.Mode{settings.ModeShadow, settings.ModeEnforce}
	}
	for _, m := range modes {
		if m != settings.ModeShadow && m != settings.ModeEnforce {
			return fmt.Errorf("demo: mode %q: use shadow or enforce", m)
		}
	}
	if c.PerTier < 1 || c.PerTier > 50 {
		return fmt.Errorf("demo: %d users per tier: want 1 to 50", c.PerTier)
	}
	if c.Duration <= 0 {
		return fmt.Errorf("demo: duration %s: want a positive duration such as 30s", c.Duration)
	}
	// The Mapper's demo under the built-in policy; the routes' under any
	// other.
	mapper := loadgen.WorkloadOf(loadgen.Config{Policy: pol}) == loadgen.WorkloadMapper
	duration, perTier, logFile := &c.Duration, &c.PerTier, &c.LogFile

	progress := func(step string) { fmt.Fprintf(c.Stdout, "capgate demo: %s\n", step) }
	progress("building the pieces: a temporary directory")
	dir, err := os.MkdirTemp("", "capgate-demo-")
	if err != nil {
		return fmt.Errorf("temporary directory: %w", err)
	}
	defer os.RemoveAll(dir)
	tempLog := *logFile == ""
	if tempLog {
		*logFile = filepath.Join(dir, "capacity.log")
	}

	defaults := settings.Default(pol, settings.ModeShadow)
	cluster := demoCapacity(defaults)
	knee := &simapi.Knee{Capacity: cluster, FailAt: 2 * cluster}
	users, loadUsers := Users(pol, *perTier)
	var api demoUpstream
	var eng *simapi.Engine // an inference API's policy: the engine upstream, its knee in tokens
	identityKind, tokens := "upstream", ""
	workers := 2
	if mapper {
		oclAPI := simapi.New(users)
		// The OCL API loses throughput past its knee, as a kNN backend
		// does (simapi.Knee's Thrash): capping it at the knee gets more
		// rows done, sooner.
		knee.Thrash = demoThrash
		oclAPI.Knee = knee
		api = oclAPI
	} else if servesCompletions(pol) {
		eng = demoEngine(defaults)
		api = &simapi.Inference{Engine: eng, Latency: demoEmbeddings}
		identityKind, tokens, workers = "tokens", filepath.Join(dir, "tokens.json"), demoInferenceWorkers
		if err := WriteTokens(tokens, users); err != nil {
			return err
		}
	} else {
		api = &simapi.Generic{Policy: pol, Users: users, Knee: knee}
		identityKind, tokens = "tokens", filepath.Join(dir, "tokens.json")
		if err := WriteTokens(tokens, users); err != nil {
			return err
		}
	}
	apiLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen for the simulated API: %w", err)
	}
	apiSrv := &http.Server{Handler: api, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = apiSrv.Serve(apiLn) }()
	defer apiSrv.Close()
	progress(fmt.Sprintf("building the pieces: the simulated API at %s (%s)", apiLn.Addr(), kneeText(knee, eng)))

	st, err := server.LoadSettings(func(string) string { return "" }) // embedded defaults, whatever the environment says
	if err != nil {
		return err
	}
	st.Database = "sqlite:" + filepath.Join(dir, "capgate.db")
	st.PolicyFile = c.PolicyFile
	st.Mode = modes[0]
	st.TaskID = "demo"
	opts := server.ServeOptions{Settings: st, Upstream: "http://" + apiLn.Addr().String(), Identity: identityKind, Tokens: tokens,
		MaxBodyBytes: 32 << 20, ShutdownTimeout: 5 * time.Second, LogFile: *logFile}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := server.NewServer(ctx, opts, io.Discard, logger)
	if err != nil {
		return err
	}
	// One change to the defaults, made like any staff change (a version
	// with a note): the simulated calls last about a second, not the
	// minutes a real bulk match can take, so refused calls retry sooner
	// than the default 5 s per call ahead.
	if err := demoSave(ctx, srv, settings.Patch{"retry_after": map[string]any{"base": 1, "max": 10, "paused": 30}},
		"demo: short calls"); err != nil {
		srv.Close()
		return err
	}
	tally := &demoTally{}
	srv.Gate.Observer = teeObserver{srv.Gate.Observer, tally}
	gwLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		srv.Close()
		return fmt.Errorf("listen for the gateway: %w", err)
	}
	serveCtx, stopServe := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(serveCtx, gwLn, nil) }()
	gwURL := "http://" + gwLn.Addr().String()
	progress(fmt.Sprintf("building the pieces: the gateway at %s (in-process lanes, SQLite config)", gwURL))
	if tempLog {
		progress(pol.Names.LogEvent + " lines: a temporary file, removed at the end (--log-file FILE keeps them)")
	} else {
		progress(pol.Names.LogEvent + " lines: " + *logFile)
	}
	fmt.Fprintf(c.Stdout, "capgate demo: %d users (%d per tier, %d calls at once each), %s\n", len(loadUsers), *perTier, workers, *duration)
	fmt.Fprintf(c.Stdout, "live: the API's load, then each lane's calls in flight / limit (tiers: %s)\n\n", strings.Join(pol.Tiers(), ", "))

	phases := make([]demoPhase, len(modes))
	var runErr error
	for i, m := range modes {
		ph := &phases[i]
		ph.mode, ph.dur = m, *duration/time.Duration(len(modes))
		if i > 0 {
			// The switch staff make at runtime: no restart, no deploy.
			// enforce_for all: every demo user runs the capacity-aware client.
			if err := demoSave(ctx, srv, settings.Patch{"mode": string(m), "enforce_for": string(settings.EnforceAll)},
				"demo: "+string(m)); err != nil {
				runErr = err
				break
			}
		}
		fmt.Fprintf(c.Stdout, "== %s for %s: %s\n", m, ph.dur, phaseStory(m, mapper))
		ph.t = tally.begin()
		api.TakeWindow()
		began, tokensBefore := time.Now(), int64(0)
		if eng != nil {
			eng.ResetPeaks()
			tokensBefore = eng.Tokens()
		}
		_, failedBefore := api.Load() // the live line counts this phase's failures
		cfgNow := srv.Configs.Config(ctx)
		var lastPrint time.Time
		ph.rep, runErr = loadgen.Run(ctx, loadgen.Config{BaseURL: gwURL, Users: loadUsers, Duration: ph.dur,
			Workers: workers, Think: time.Second, Grace: 10 * time.Second, BulkRows: [2]int{5, 25}, Policy: pol},
			func(p loadgen.Progress) {
				line := c.progressLine(ctx, srv.Gate, cfgNow, api, failedBefore, p)
				if c.Live {
					fmt.Fprintf(c.Stdout, "\r%s\033[K", line)
				} else if time.Since(lastPrint) >= 5*time.Second {
					fmt.Fprintln(c.Stdout, line)
					lastPrint = time.Now()
				}
			})
		if c.Live {
			fmt.Fprintln(c.Stdout)
		}
		if runErr != nil {
			break
		}
		// Calls the users gave up on at the end still run in the API
		// (the gateway keeps them until it answers); the next phase
		// starts once the API and the lanes are idle, so it counts only
		// its own calls.
		settle(ctx, api, srv.Gate, cfgNow)
		ph.api = api.TakeWindow()
		if eng != nil {
			ph.engine = &engineWindow{tokens: eng.Tokens() - tokensBefore, span: time.Since(began), models: eng.Models()}
		}
	}
	// The config in force, read while the config store is open: once it is
	// closed, a read past the cache gives the last known config with
	// enforce as shadow.
	final := srv.Configs.Config(ctx)
	stopServe()
	serr := <-served
	cerr := srv.Close() // drains the log lines
	if runErr != nil {
		return runErr
	}
	if serr != nil {
		return fmt.Errorf("gateway: %w", serr)
	}
	if cerr != nil {
		return fmt.Errorf("close the gateway: %w", cerr)
	}
	kept := *logFile
	if tempLog {
		kept = "" // removed with the demo's directory
	}
	c.summary(phases, tally, final, knee, eng, kept)
	for _, ph := range phases {
		if n := ph.rep.Failed(); n > 0 && ph.mode == settings.ModeEnforce {
			return fmt.Errorf("demo: %d %s failed in enforce", n, demoUnit(pol))
		}
	}
	return nil
}

// demoThrash is the OCL demo API's loss past its knee (simapi.Knee): at
// twice its capacity each call takes 6 times its time and the API does a
// third of its best work.
const demoThrash = 2.0

// settle waits, at most 15 s, until the API runs no call and the lanes
// hold none.
func settle(ctx context.Context, api demoUpstream, g *capgate.Gate, cfg settings.Config) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	deadline := time.After(15 * time.Second)
	for {
		st := g.Status(ctx, cfg)
		if n, _ := api.Load(); n == 0 && inFlight(st) == 0 {
			return
		}
		select {
		case <-t.C:
		case <-deadline:
			return
		case <-ctx.Done():
			return
		}
	}
}

// inFlight returns the calls in flight in the first shared lane of st.
func inFlight(st status.Snapshot) int {
	if len(st.Shared) == 0 {
		return 0
	}
	return st.Shared[0].InFlight
}

// demoSave makes a change to the demo gateway's config, as staff would.
func demoSave(ctx context.Context, srv *server.Server, set settings.Patch, note string) error {
	_, err := srv.Configs.Save(ctx, config.Edit{Set: set, By: "demo", Source: config.SourceCommand, Note: note})
	if err != nil {
		return fmt.Errorf("demo config (%s): %w", note, err)
	}
	return nil
}

// phaseStory says what a phase shows: the API's knee for the Mapper's
// demo, the policy's lanes for another.
func phaseStory(m settings.Mode, mapper bool) string {
	switch {
	case m == settings.ModeShadow && mapper:
		return "capgate counts and refuses nothing; watch the API pass its knee"
	case m == settings.ModeShadow:
		return "capgate counts and refuses nothing; watch the lanes go past their limits"
	case mapper:
		return "calls that find a lane full wait at the gateway for a slot; the API stays at its knee"
	}
	return "calls that find a lane full wait at the gateway for a slot; every lane holds"
}

// Users makes n users per tier of p, known to the simulated API: for
// each tier, in order, users the tier's rule gives it to (staff, or in the
// rule's first group; none for the default tier), named after the tier.
func Users(p *policy.Policy, n int) ([]simapi.User, []loadgen.User) {
	var su []simapi.User
	var lu []loadgen.User
	for _, tier := range p.Tiers() {
		var staff bool
		var group string
		for _, r := range p.Identity.Tiers {
			if r.Tier == tier {
				staff = r.Staff
				if len(r.Groups) > 0 {
					group = r.Groups[0]
				}
				break
			}
		}
		for i := 1; i <= n; i++ {
			name := fmt.Sprintf("%s-%d", strings.ReplaceAll(tier, "_", "-"), i)
			u := simapi.User{Token: name + "-token", Username: name, IsStaff: staff}
			if group != "" {
				u.Groups = []string{group}
			}
			su = append(su, u)
			lu = append(lu, loadgen.User{Name: name, Token: u.Token, Tier: tier})
		}
	}
	return su, lu
}

// progressLine is the live line: the phase's calls, the API's load and
// failures (since failedBefore), and the lanes, limits as they apply.
func (c *Demo) progressLine(ctx context.Context, g *capgate.Gate, cfg settings.Config, api demoUpstream, failedBefore int, p loadgen.Progress) string {
	st := g.Status(ctx, cfg)
	inAPI, failed := api.Load()
	var b strings.Builder
	fmt.Fprintf(&b, "%3.0fs %-7s calls %-4d", p.Elapsed.Seconds(), cfg.Mode, p.Calls)
	if unit := demoUnit(cfg.Policy()); unit != "calls" {
		fmt.Fprintf(&b, " %s %-5d", unit, p.RowsDone) // the built-in policy's rows
	}
	fmt.Fprintf(&b, " | API %2d at once, %d failed", inAPI, failed-failedBefore)
	if st.Store == status.OK {
		// The shared lanes, then each tier's: "api_heavy 3/4 (bulk 3)
		// es2_knn 2/3 | tiers 0/4 1/4 2/3 1/2" under the built-in policy.
		b.WriteString(" |")
		waiting := 0
		for i, l := range st.Shared {
			fmt.Fprintf(&b, " %s %d/%s", l.Name, l.InFlight, heavyLimit(l.Limit, l.Bulk()))
			if i == 0 {
				waiting = l.Waiting
			}
		}
		for _, kl := range st.Keyed {
			switch kl.Key {
			case policy.KeyTier:
				b.WriteString(" | tiers")
				for _, t := range cfg.Policy().Tiers() {
					l := kl.Entries[t]
					fmt.Fprintf(&b, " %d/%d", l.InFlight, l.Limit)
				}
			case policy.KeyUser:
			default: // a lane keyed by a field: its busy values
				if kl.Scope == "key" && len(kl.Entries) > 0 {
					fmt.Fprintf(&b, " | %s", kl.Name)
					for _, v := range slices.Sorted(maps.Keys(kl.Entries)) {
						fmt.Fprintf(&b, " %s %d/%d", v, kl.Entries[v].InFlight, kl.Entries[v].Limit)
					}
				}
			}
		}
		if waiting > 0 {
			fmt.Fprintf(&b, " | waiting %d", waiting)
		}
	}
	return b.String()
}

// heavyLimit writes api_heavy's limit as the lanes apply it: the cluster
// limit (a single-row $match's) and the bulk limit below it.
func heavyLimit(limit, bulk int) string {
	if limit == bulk {
		return fmt.Sprint(limit)
	}
	return fmt.Sprintf("%d (bulk %d)", limit, bulk)
}

// demoTally counts the gated calls as the gate released them, per phase:
// the same records the log lines are made of, so capgate analyze of the
// log agrees.
type demoTally struct {
	mu     sync.Mutex
	phases []*phaseTally // requires mu held
}

// phaseTally is one phase's count; its fields require demoTally.mu held.
type phaseTally struct {
	decisions map[[3]string]int // tier, endpoint, decision
	peaks     map[string]demoPeak
	wouldRef  map[string]int  // shadow-refused by scope
	refused   map[string]int  // refused by scope
	waits     []time.Duration // of the calls that waited at the gateway
	gated     int
}

type demoPeak struct{ peak, limit, bulk int }

// begin starts a phase: the calls released from now on count in it.
func (d *demoTally) begin() *phaseTally {
	p := &phaseTally{decisions: map[[3]string]int{}, peaks: map[string]demoPeak{}, wouldRef: map[string]int{}, refused: map[string]int{}}
	d.mu.Lock()
	d.phases = append(d.phases, p)
	d.mu.Unlock()
	return p
}

func (d *demoTally) Admitted(*capgate.Admission)                 {}
func (d *demoTally) StoreError(string, error)                    {}
func (d *demoTally) StoreSkipped(string)                         {}
func (d *demoTally) WaitStarted(*capgate.Admission)              {}
func (d *demoTally) WaitEnded(*capgate.Admission, time.Duration) {}
func (d *demoTally) Released(a *capgate.Admission) {
	o := a.Outcome()
	call := o.Call
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.phases) == 0 {
		return
	}
	t := d.phases[len(d.phases)-1]
	t.gated++
	t.decisions[[3]string{call.Tier, policy.RouteLogName(call.Route), string(o.Decision)}]++
	switch o.Decision {
	case capgate.DecisionShadowRefused:
		t.wouldRef[string(o.Scope)]++
	case capgate.DecisionRefused:
		t.refused[string(o.Scope)]++
	}
	if o := a.Outcome(); o.Queued {
		w := o.Waited
		t.waits = append(t.waits, w)
	}
	counts := o.Counts
	for i, l := range o.Lanes {
		if counts == nil {
			continue
		}
		name := string(l.Name)
		switch {
		case l.Spec == nil:
		case l.Spec.ByTier():
			name = string(l.Name) + ":" + call.Tier
		case l.Spec.ByUser():
			name = string(l.Name) + " (busiest, " + call.Tier + ")"
		case l.Spec.ByField():
			v, _ := call.Fields.ByName(l.Spec.Key)
			if v == "" {
				v = "(none)"
			}
			name = string(l.Name) + ":" + v
		}
		p := t.peaks[name]
		p.peak = max(p.peak, counts[i])
		// A lane with a reserve has two limits: a call of its class's
		// (the whole limit) and the bulk limit below it; show both.
		switch {
		case l.Spec == nil || l.Spec.Reserve == nil:
			p.limit, p.bulk = l.Limit, l.Limit
		case inClass(o.Policy, l.Spec.Reserve.Class, call):
			p.limit = l.Limit
		default:
			p.bulk = l.Limit
		}
		t.peaks[name] = p
	}
}

// inClass reports whether call is of class name of p.
func inClass(p *policy.Policy, name string, call capgate.Call) bool {
	c := p.Class(name)
	return c != nil && c.Has(call.Route, &call.Fields)
}

type teeObserver []capgate.Observer

func (t teeObserver) Admitted(a *capgate.Admission) {
	for _, o := range t {
		o.Admitted(a)
	}
}
func (t teeObserver) Released(a *capgate.Admission) {
	for _, o := range t {
		o.Released(a)
	}
}
func (t teeObserver) StoreError(op string, err error) {
	for _, o := range t {
		o.StoreError(op, err)
	}
}
func (t teeObserver) StoreSkipped(op string) {
	for _, o := range t {
		o.StoreSkipped(op)
	}
}
func (t teeObserver) WaitStarted(a *capgate.Admission) {
	for _, o := range t {
		o.WaitStarted(a)
	}
}
func (t teeObserver) WaitEnded(a *capgate.Admission, waited time.Duration) {
	for _, o := range t {
		o.WaitEnded(a, waited)
	}
}

func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[(len(sorted)-1)*p/100]
}

func (c *Demo) summary(phases []demoPhase, d *demoTally, cfg settings.Config, knee *simapi.Knee, eng *simapi.Engine, logFile string) {
	w := c.Stdout
	d.mu.Lock()
	defer d.mu.Unlock()
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(label string, f func(ph demoPhase) string) {
		fmt.Fprintf(tw, "%s\t", label)
		for _, ph := range phases {
			fmt.Fprintf(tw, "%s\t", f(ph))
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprintf(w, "\n== What the API went through (%s)\n", kneeText(knee, eng))
	row("", func(ph demoPhase) string { return fmt.Sprintf("%s (%s)", ph.mode, ph.dur) })
	row("heavy calls served by the API", func(ph demoPhase) string { return fmt.Sprint(ph.api.Served) })
	engineRows(row, phases)
	row("failed by the API (503, overloaded)", func(ph demoPhase) string { return fmt.Sprint(ph.api.Failed) })
	row("most at once in the API", func(ph demoPhase) string {
		s := fmt.Sprint(ph.api.Peak)
		if eng == nil && ph.api.Peak > knee.Capacity {
			s += " (past the knee)"
		}
		return s
	})
	row("time in the API p50 / p95", func(ph demoPhase) string {
		return fmt.Sprintf("%s / %s", ms(ph.api.P50), ms(ph.api.P95))
	})
	row("calls that waited at the gateway", func(ph demoPhase) string { return fmt.Sprintf("%d of %d", len(ph.t.waits), ph.t.gated) })
	row("  their wait p50 / p95", func(ph demoPhase) string {
		if len(ph.t.waits) == 0 {
			return "-"
		}
		ws := slices.Clone(ph.t.waits)
		slices.Sort(ws)
		return fmt.Sprintf("%s / %s", ms(pct(ws, 50)), ms(pct(ws, 95)))
	})
	row("refused (429), retried by the client", func(ph demoPhase) string { return fmt.Sprintf("%d (%s)", sum(ph.t.refused), byScope(ph.t.refused)) })
	row("shadow-refused (would have met a full lane)", func(ph demoPhase) string { return fmt.Sprint(sum(ph.t.wouldRef)) })
	unit := demoUnit(cfg.Policy())
	for _, kind := range loadgen.Kinds(loadgen.Config{Policy: cfg.Policy()}) {
		row("users' "+kind+" p50 / p99", func(ph demoPhase) string {
			for _, l := range ph.rep.Latencies {
				if l.Kind == kind {
					return fmt.Sprintf("%s / %s", ms(l.P50), ms(l.P99))
				}
			}
			return "-"
		})
	}
	row(unit+" done / failed (the client retries 503s)", func(ph demoPhase) string {
		return fmt.Sprintf("%d / %d", rowsDone(ph), ph.rep.Failed())
	})
	for _, tier := range cfg.Policy().Tiers() {
		row("share of "+unit+" done: "+string(tier), func(ph demoPhase) string {
			done, all := 0, 0
			for _, t := range ph.rep.Tiers {
				all += t.RowsDone
				if t.Tier == string(tier) {
					done = t.RowsDone
				}
			}
			if all == 0 {
				return "-"
			}
			return fmt.Sprintf("%.0f %%", 100*float64(done)/float64(all))
		})
	}
	row("users who got "+unit+" done", func(ph demoPhase) string {
		n := 0
		for _, u := range ph.rep.Users {
			if u.RowsDone > 0 {
				n++
			}
		}
		return fmt.Sprintf("%d of %d", n, len(ph.rep.Users))
	})
	tw.Flush()
	fmt.Fprintln(w, "(users' times include the wait at the gateway and any retry; the API's do not)")

	fmt.Fprintf(w, "\n== Decisions by tier and endpoint\n")
	decisions := []capgate.Decision{capgate.DecisionAdmitted, capgate.DecisionShadowRefused, capgate.DecisionRefused, capgate.DecisionUnavailable}
	fmt.Fprintln(tw, "tier\tendpoint\tmode\tadmitted\tshadow-refused\trefused\tunavailable\t")
	total := map[capgate.Decision]int{}
	for _, t := range cfg.Policy().Tiers() {
		for _, r := range cfg.Policy().Routes {
			e := r.LogName
			for _, ph := range phases {
				var cells []string
				any := false
				for _, dec := range decisions {
					n := ph.t.decisions[[3]string{string(t), e, string(dec)}]
					total[dec] += n
					any = any || n > 0
					cells = append(cells, fmt.Sprint(n))
				}
				if any {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", t, e, ph.mode, strings.Join(cells, "\t"))
				}
			}
		}
	}
	fmt.Fprintf(tw, "all\t\t\t%d\t%d\t%d\t%d\t\n", total[capgate.DecisionAdmitted], total[capgate.DecisionShadowRefused],
		total[capgate.DecisionRefused], total[capgate.DecisionUnavailable])
	tw.Flush()

	fmt.Fprintf(w, "\n== Peak calls in flight per lane (as the gate counted them) against its limit\n")
	head := "lane\tlimit\t"
	for _, ph := range phases {
		head += "peak in " + string(ph.mode) + "\t"
	}
	fmt.Fprintln(tw, head)
	names := map[string]demoPeak{}
	for _, ph := range phases {
		for n, p := range ph.t.peaks {
			q := names[n]
			q.limit, q.bulk = max(q.limit, p.limit), max(q.bulk, p.bulk)
			names[n] = q
		}
	}
	for _, n := range slices.Sorted(maps.Keys(names)) {
		l := names[n]
		limit := heavyLimit(l.limit, l.bulk)
		if l.limit == 0 { // only bulk calls took it
			limit = fmt.Sprintf("(bulk %d)", l.bulk)
		}
		fmt.Fprintf(tw, "%s\t%s\t", n, limit)
		for _, ph := range phases {
			p := ph.t.peaks[n]
			cell := fmt.Sprint(p.peak)
			if p.peak > max(l.limit, l.bulk) && ph.mode == settings.ModeShadow {
				cell += " (over: shadow lets it through)"
			}
			fmt.Fprintf(tw, "%s\t", cell)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()

	fmt.Fprintf(w, "\n== What this shows\n")
	for _, ph := range phases {
		switch {
		case ph.engine != nil:
			fmt.Fprintln(w, engineStory(ph, unit))
		case ph.mode == settings.ModeShadow:
			fmt.Fprintf(w, "shadow: %d calls found a lane full (%s); all went ahead, the API ran up to %d at once against its knee of %d, and failed %d.\n",
				sum(ph.t.wouldRef), byScope(ph.t.wouldRef), ph.api.Peak, knee.Capacity, ph.api.Failed)
		default:
			fmt.Fprintf(w, "enforce: the API ran at most %d at once and failed %d; %d calls waited at the gateway instead, %d were refused and retried, and %d %s failed.\n",
				ph.api.Peak, ph.api.Failed, len(ph.t.waits), sum(ph.t.refused), ph.rep.Failed(), unit)
		}
	}
	if len(phases) == 2 {
		// The two halves in one sentence: what capping the API at its knee
		// bought (the model: simapi.Knee).
		kind := loadgen.Kinds(loadgen.Config{Policy: cfg.Policy()})[0]
		p50 := func(ph demoPhase) string {
			for _, l := range ph.rep.Latencies {
				if l.Kind == kind {
					return ms(l.P50)
				}
			}
			return "-"
		}
		fmt.Fprintf(w, "Side by side: %s got %d %s done against %d in %s; users' %s p50 %s against %s.\n",
			phases[1].mode, rowsDone(phases[1]), unit, rowsDone(phases[0]), phases[0].mode, kind, p50(phases[1]), p50(phases[0]))
	}
	cluster, okC := cfg.Number("api_heavy.cluster")
	reserve, okR := cfg.Number("reserve_single_row")
	perTask, okT := cfg.Number("api_heavy.per_task")
	if okC && okR && okT {
		fmt.Fprintf(w, "The config in force now: mode %s, enforce_for %s, api_heavy %s, per_task %d.\n", cfg.Mode, cfg.EnforceFor,
			heavyLimit(cluster, max(cluster-reserve, 0)), perTask)
	} else {
		fmt.Fprintf(w, "The config in force now: mode %s, enforce_for %s, %s.\n", cfg.Mode, cfg.EnforceFor, laneLimits(cfg))
	}
	if logFile == "" {
		fmt.Fprintf(w, "\nThe log of this run was temporary and is gone; run with --log-file FILE to keep it for capgate analyze.\n")
		return
	}
	fmt.Fprintf(w, "\nThe log of this run: %s (capgate analyze reads it).\n", logFile)
}

// rowsDone returns the units of work a phase's users got done.
func rowsDone(ph demoPhase) int {
	done := 0
	for _, t := range ph.rep.Tiers {
		done += t.RowsDone
	}
	return done
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func ms(d time.Duration) string {
	if d >= 10*time.Second {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(10 * time.Millisecond).String()
}

func byScope(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d by %s", m[k], k)
	}
	return strings.Join(parts, ", ")
}
