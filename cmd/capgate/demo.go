package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
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
	"github.com/capgate/capgate/cmd/capgate/internal/loadgen"
	"github.com/capgate/capgate/config"
	"github.com/capgate/capgate/tools/simapi"
)

// DemoCommand is `capgate demo`: a simulated OCL API, the real gateway in
// front of it on embedded defaults, and simulated Mapper users of every
// tier, for about 30 s; then a summary.
type DemoCommand struct {
	Stdout, Stderr io.Writer
	// Live rewrites the progress line in place (a terminal); otherwise a
	// progress line is printed every 5 s.
	Live bool
}

// Usage returns the command's help.
func (c *DemoCommand) Usage() string {
	return `Usage: capgate demo [flags]

Starts a simulated OCL API on loopback, the real capgate gateway in front of
it (in-process lanes, SQLite config in a temporary directory), and simulated
Mapper users of every tier sending bulk and single-row $match and $rerank
calls. Shows live progress, then a summary: decisions by tier and endpoint,
peak calls in flight per lane against its limit, latency percentiles, and
what enforce would have refused. Needs no services. Flags:
`
}

// Run runs the demo.
func (c *DemoCommand) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("capgate demo", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	duration := fs.Duration("duration", 30*time.Second, "how long the users send new calls")
	mode := fs.String("mode", "shadow", "the gateway's mode: shadow (count, refuse nothing) or enforce (refuse; the users wait out refusals)")
	perTier := fs.Int("users-per-tier", 2, "simulated users in each tier")
	logFile := fs.String("log-file", "", "write the ocl_capacity lines here (default: a file in the demo's temporary directory)")
	if done, err := parseFlags(fs, args, c.Usage(), c.Stdout); done {
		return err
	}
	m, ok := capgate.ParseMode(*mode)
	if !ok || m == capgate.ModeOff {
		return &UsageError{Msg: fmt.Sprintf("--mode %q: use shadow or enforce", *mode)}
	}
	if *perTier < 1 || *perTier > 50 {
		return &UsageError{Msg: "--users-per-tier: want 1 to 50"}
	}
	if *duration <= 0 {
		return &UsageError{Msg: "--duration: want a positive duration such as 30s"}
	}

	dir, err := os.MkdirTemp("", "capgate-demo-")
	if err != nil {
		return fmt.Errorf("temporary directory: %w", err)
	}
	defer os.RemoveAll(dir)
	tempLog := *logFile == ""
	if tempLog {
		*logFile = filepath.Join(dir, "capacity.log")
	}

	users, loadUsers := demoUsers(*perTier)
	api := simapi.New(users)
	apiLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen for the simulated API: %w", err)
	}
	apiSrv := &http.Server{Handler: api, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = apiSrv.Serve(apiLn) }()
	defer apiSrv.Close()

	st, err := LoadSettings(func(string) string { return "" }) // embedded defaults, whatever the environment says
	if err != nil {
		return err
	}
	st.Database = "sqlite:" + filepath.Join(dir, "capgate.db")
	st.Mode = m
	st.TaskID = "demo"
	opts := ServeOptions{Settings: st, Upstream: "http://" + apiLn.Addr().String(), Identity: "upstream",
		MaxBodyBytes: 32 << 20, ShutdownTimeout: 5 * time.Second, LogFile: *logFile}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := NewServer(ctx, opts, io.Discard, logger)
	if err != nil {
		return err
	}
	// Two changes to the defaults, made like any staff change (a version
	// with a note): the one demo gateway stands for the whole cluster, so
	// its task lane gets the cluster's limit; and the simulated calls last
	// about a second, not the minutes a real bulk match can take, so
	// refused calls retry sooner than the default 5 s per call ahead.
	change := config.Edit{
		Set: capgate.Patch{
			"api_heavy":   map[string]any{"per_task": 4},
			"retry_after": map[string]any{"base": 1, "max": 10, "paused": 30},
		},
		By: "demo", Source: config.SourceCommand, Note: "demo: one gateway, short calls",
	}
	if _, err := srv.Configs.Save(ctx, change); err != nil {
		srv.Close()
		return fmt.Errorf("demo config: %w", err)
	}
	tally := &demoTally{decisions: map[[3]string]int{}, peaks: map[string]demoPeak{}}
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
	fmt.Fprintf(c.Stdout, "capgate demo: simulated API at %s, gateway at %s, mode %s, %d users, %s\n",
		opts.Upstream, gwURL, m, len(loadUsers), *duration)
	if tempLog {
		fmt.Fprintf(c.Stdout, "ocl_capacity lines: a temporary file, removed at the end (--log-file FILE keeps them)\n\n")
	} else {
		fmt.Fprintf(c.Stdout, "ocl_capacity lines: %s\n\n", *logFile)
	}

	cfgNow := srv.Configs.Config(ctx)
	var lastPrint time.Time
	rep, err := loadgen.Run(ctx, loadgen.Config{BaseURL: gwURL, Users: loadUsers, Duration: *duration,
		Workers: 2, Think: 1500 * time.Millisecond, Grace: 15 * time.Second},
		func(p loadgen.Progress) {
			line := c.progressLine(ctx, srv.Gate, cfgNow, p)
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
	stopServe()
	serr := <-served
	cerr := srv.Close() // drains the log lines
	if err != nil {
		return err
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
	c.summary(rep, tally, api.Stats(), cfgNow, kept)
	if n := rep.Failed(); n > 0 {
		return fmt.Errorf("demo: %d rows failed", n)
	}
	return nil
}

// demoUsers makes n users per tier, known to the simulated API.
func demoUsers(n int) ([]simapi.User, []loadgen.User) {
	var su []simapi.User
	var lu []loadgen.User
	for _, t := range []struct {
		tier  capgate.Tier
		staff bool
		group string
	}{
		{capgate.TierStaff, true, ""}, {capgate.TierCore, false, capgate.DefaultCoreGroup},
		{capgate.TierEarlyAccess, false, capgate.DefaultEarlyAccessGroup}, {capgate.TierPreview, false, ""},
	} {
		for i := 1; i <= n; i++ {
			name := fmt.Sprintf("%s-%d", strings.ReplaceAll(string(t.tier), "_", "-"), i)
			u := simapi.User{Token: name + "-token", Username: name, IsStaff: t.staff}
			if t.group != "" {
				u.Groups = []string{t.group}
			}
			su = append(su, u)
			lu = append(lu, loadgen.User{Name: name, Token: u.Token, Tier: string(t.tier)})
		}
	}
	return su, lu
}

func (c *DemoCommand) progressLine(ctx context.Context, g *capgate.Gate, cfg capgate.Config, p loadgen.Progress) string {
	st := g.Status(ctx, cfg)
	var b strings.Builder
	fmt.Fprintf(&b, "%3.0fs  calls %-5d rows %-6d", p.Elapsed.Seconds(), p.Calls, p.RowsDone)
	if st.APIHeavy != nil {
		fmt.Fprintf(&b, "  in flight: api_heavy %d/%d  es2_knn %d/%d  tiers", st.APIHeavy.InFlight, st.APIHeavy.Limit,
			st.ES2KNN.InFlight, st.ES2KNN.Limit)
		for _, t := range capgate.AllTiers() {
			l := st.Tiers[string(t)]
			fmt.Fprintf(&b, " %s %d/%d", t, l.InFlight, l.Limit)
		}
	}
	return b.String()
}

// demoTally counts the gated calls as the gate released them: the same
// records the log lines are made of, so capgate analyze of the log agrees.
type demoTally struct {
	mu        sync.Mutex
	decisions map[[3]string]int // tier, endpoint, decision
	peaks     map[string]demoPeak
	wouldRef  map[string]int // shadow-refused by scope
	refused   map[string]int // refused by scope
}

type demoPeak struct{ peak, limit int }

func (d *demoTally) Admitted(*capgate.Admission) {}
func (d *demoTally) StoreError(string, error)    {}
func (d *demoTally) StoreSkipped(string)         {}
func (d *demoTally) Released(a *capgate.Admission) {
	call := a.Call()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.decisions[[3]string{string(call.Tier), call.Endpoint, string(a.Decision())}]++
	if d.wouldRef == nil {
		d.wouldRef, d.refused = map[string]int{}, map[string]int{}
	}
	switch a.Decision() {
	case capgate.DecisionShadowRefused:
		d.wouldRef[string(a.Scope())]++
	case capgate.DecisionRefused:
		d.refused[string(a.Scope())]++
	}
	counts := a.Counts()
	for i, l := range a.Lanes() {
		if counts == nil {
			continue
		}
		name := string(l.Name)
		switch l.Name {
		case capgate.LaneTier:
			name = "tier:" + string(call.Tier)
		case capgate.LaneUser:
			name = "user (busiest, " + string(call.Tier) + ")"
		}
		p := d.peaks[name]
		p.peak = max(p.peak, counts[i])
		if l.Name == capgate.LaneAPIHeavy && !call.SingleRow() || l.Name != capgate.LaneAPIHeavy {
			p.limit = l.Limit
		}
		d.peaks[name] = p
	}
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

func (c *DemoCommand) summary(rep *loadgen.Report, d *demoTally, api simapi.Stats, cfg capgate.Config, logFile string) {
	w := c.Stdout
	d.mu.Lock()
	defer d.mu.Unlock()
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "\n== Decisions by tier and endpoint\n")
	decisions := []capgate.Decision{capgate.DecisionAdmitted, capgate.DecisionShadowRefused, capgate.DecisionRefused, capgate.DecisionUnavailable}
	fmt.Fprintln(tw, "tier\tendpoint\tadmitted\tshadow-refused\trefused\tunavailable\t")
	total := map[capgate.Decision]int{}
	for _, t := range capgate.AllTiers() {
		for _, e := range []string{capgate.EndpointMatch, capgate.EndpointRerank} {
			var row []string
			any := false
			for _, dec := range decisions {
				n := d.decisions[[3]string{string(t), e, string(dec)}]
				total[dec] += n
				any = any || n > 0
				row = append(row, fmt.Sprint(n))
			}
			if any {
				fmt.Fprintf(tw, "%s\t%s\t%s\t\n", t, e, strings.Join(row, "\t"))
			}
		}
	}
	fmt.Fprintf(tw, "all\t\t%d\t%d\t%d\t%d\t\n", total[capgate.DecisionAdmitted], total[capgate.DecisionShadowRefused],
		total[capgate.DecisionRefused], total[capgate.DecisionUnavailable])
	tw.Flush()

	fmt.Fprintf(w, "\n== Peak calls in flight per lane (as the gate counted them) against the limit\n")
	fmt.Fprintln(tw, "lane\tpeak\tlimit\t")
	// api_heavy's limit is the bulk limit; a single-row $match may use one more.
	names := make([]string, 0, len(d.peaks))
	for n := range d.peaks {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		p := d.peaks[n]
		over := ""
		if p.peak > p.limit {
			over = "over the limit: shadow lets calls through"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", n, p.peak, p.limit, over)
	}
	tw.Flush()
	fmt.Fprintf(w, "The simulated API saw at most %d heavy calls at once (%d bulk, %d semantic).\n",
		api.Peak, api.PeakBulk, api.PeakSemantic)

	fmt.Fprintf(w, "\n== What enforce refuses\n")
	if cfg.Mode == capgate.ModeShadow {
		fmt.Fprintf(w, "In shadow mode nothing was refused. Enforce would have refused %d calls: %s.\n",
			total[capgate.DecisionShadowRefused], byScope(d.wouldRef))
	} else {
		fmt.Fprintf(w, "Refused %d calls (%s); the users waited them out and retried.\n",
			total[capgate.DecisionRefused], byScope(d.refused))
	}

	fmt.Fprintf(w, "\n== The users (latency includes time spent waiting out refusals)\n")
	rep.Write(w)
	if logFile == "" {
		fmt.Fprintf(w, "\nThe log of this run was temporary and is gone; run with --log-file FILE to keep it for capgate analyze.\n")
		return
	}
	fmt.Fprintf(w, "\nThe log of this run: %s (capgate analyze reads it).\n", logFile)
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
