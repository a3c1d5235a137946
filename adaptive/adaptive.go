// Package adaptive runs a gate's adaptive limits (the config key
// "adaptive", over the policy's shared lanes): every second a Runner sends
// the service times the gate gathered on each adaptive lane to the lane
// store's tune.Store; the gateway that gets the cluster's window takes the
// step (package tune, the algorithm) and saves the new state, and every
// gateway reads the state back into its gate, whose lanes in mode apply
// then take the advised limit. The gate keeps what both sides share (the
// samples gathered, the advised limits in force: capgate.Gate.Tune), so
// its calls never wait for the loop. Nothing is stepped without a Runner:
// a gate whose Runner never runs keeps the static limits.
package adaptive

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/internal/jsonenc"
	"github.com/capgate/capgate/internal/loop"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
	"github.com/capgate/capgate/status"
	"github.com/capgate/capgate/tune"
)

// every is how often a lane's limit is stepped, for the cluster.
const every = time.Second

// heldLogEvery is how many steps apart a step that changed nothing is
// logged at info level (each is at debug).
const heldLogEvery = 30

// eventSuffix ends the "event" of the line written on each change of an
// advised limit: the policy's log event + "_adaptive".
const eventSuffix = "_adaptive"

// readEvery is the window length Read asks for: never due once any
// gateway took a window, so a read takes none of the loop's.
const readEvery = 100 * 365 * 24 * time.Hour

// Runner runs the adaptive limits of its Gate. The gate's fields (Store,
// Source, KeyPrefix, TaskID, Sink, Logger, SkipFor, Now) are read at each
// step, so they may be set after the Runner is made. The gates
// Gate.ForTask derives share the gate's adaptive state: one Runner steps
// them all. Its methods are safe for concurrent use; a Runner must not be
// copied after first use.
type Runner struct {
	// Gate is the gate whose limits it runs; required, made by
	// capgate.NewGate over a lane store that is a tune.Store (a gate
	// without adaptive state keeps the static limits: the methods then
	// say so).
	Gate *capgate.Gate

	mu    sync.Mutex
	since time.Time // the first step tried or age read: the age of a loop that never stepped; requires mu held
}

// Run runs the adaptive limits until ctx is done: it steps them at once
// and then every second (Step). It is idle while the config has no
// adaptive lane. On a gate that keeps no adaptive state (its store is no
// tune.Store, or the Gate was built by hand) it logs a warning and
// returns at once.
func (r *Runner) Run(ctx context.Context) {
	if _, err := r.store(); err != nil {
		logger(r.Gate).Warn("adaptive limits unavailable", "error", err)
		return
	}
	loop.Every(ctx, every, func(ctx context.Context) { _ = r.Step(ctx, nil) })
}

// Step takes one step of the adaptive limits now, as Run does every
// second: it adds observed (samples of service times measured outside
// the gate, by lane; nil: none) to those of the calls the gate released,
// sends each adaptive lane's samples to the store, takes the step when
// this gateway got the window, and reads the state back. It returns the
// first store error (the limits known stay in force), or an error when
// the gate keeps no adaptive state. While the gate skips its store
// (Gate.Skipping) it sends nothing and keeps the samples.
func (r *Runner) Step(ctx context.Context, observed map[capgate.LaneName]tune.Window) error {
	g := r.Gate
	ts, err := r.store()
	if err != nil {
		return err
	}
	for name, w := range observed {
		_ = g.Tune(name, false, func(l *tune.LaneState) { l.Pending = l.Pending.Add(w) })
	}
	r.start(now(g))
	cfg := g.Source.Config(ctx)
	var first error
	for _, ln := range lanesOf(cfg) {
		if !cfg.Adaptive.Lane(string(ln.name)).On() {
			// Samples of a lane switched off say nothing later.
			_ = g.Tune(ln.name, true, func(l *tune.LaneState) { *l = tune.LaneState{} })
			continue
		}
		if g.Skipping() {
			return nil
		}
		if err := r.stepLane(ctx, ts, cfg, ln); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (r *Runner) stepLane(ctx context.Context, ts tune.Store, cfg settings.Config, ln lane) (err error) {
	g := r.Gate
	name := ln.name
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("adaptive %s: internal error: %v", name, r)
		}
		if err != nil {
			logger(g).Warn("adaptive limit: step failed; the last limit stays", "lane", name, "error", err)
		}
	}()
	var batch tune.Window
	_ = g.Tune(name, true, func(l *tune.LaneState) { batch, l.Pending = l.Pending, tune.Window{} })
	key := r.key(cfg, ln)
	round, err := ts.TuneExchange(ctx, key, batch, every)
	if err != nil {
		// Sent next time.
		_ = g.Tune(name, false, func(l *tune.LaneState) { l.Pending = l.Pending.Add(batch) })
		return fmt.Errorf("adaptive %s: exchange: %w", name, err)
	}
	state, derr := tune.Decode(round.State)
	if derr != nil {
		state = tune.State{} // a state we can't read starts over from the static limit
	}
	set := cfg.Adaptive.Lane(string(name))
	b := tune.Bounds{Min: set.Min, Max: set.Max, Static: ln.static(cfg), Advise: set.Mode == tune.Advise}
	if round.Due {
		prev := state.Start(b)
		state = state.Next(round.Window, b)
		state.At = now(g).UnixMilli()
		// Every step's inputs, so that a loop that does not act shows why
		// (few calls, settling, steady): at debug level each step, at info
		// every heldLogEvery steps that changed nothing (a change has its
		// own line, below).
		level := slog.LevelDebug
		if state.Limit == prev && state.Step%heldLogEvery == 0 {
			level = slog.LevelInfo
		}
		logger(g).Log(ctx, level, "adaptive step", "lane", name, "mode", set.Mode, "step", state.Step, "from", prev, "to", state.Limit,
			"reason", state.Reason, "calls", round.Window.Calls, "row_ms", round3ms(round.Window.Mean()),
			"no_load_ms", round3ms(state.NoLoad), "full", round.Window.Full, "max_in_flight", round.Window.MaxInFlight,
			"static", b.Static, "min", b.Min, "max", b.Max)
		enc, err := tune.Encode(state)
		if err != nil {
			return err
		}
		if err := ts.TuneSave(ctx, key, enc); err != nil {
			return fmt.Errorf("adaptive %s: save: %w", name, err)
		}
		if state.Limit != prev {
			r.emit(cfg, ln, prev, state)
		}
	}
	if state.Limit > 0 || round.Due {
		_ = g.Tune(name, false, func(l *tune.LaneState) { install(l, state, b) })
	}
	return derr
}

// install makes state, read from the store, lane l's, within b.
func install(l *tune.LaneState, state tune.State, b tune.Bounds) {
	l.Advised = state.Start(b)
	if state.At > 0 {
		l.StepAt = time.UnixMilli(state.At)
	}
	l.State = state
}

// Read reads the cluster's state of every adaptive lane, sending no
// samples and taking no step, so that a process that runs no loop (the
// capacity status command) shows the advice: the gate's Status and
// Advised then show it. A lane no gateway ever stepped has its (empty)
// window taken, which delays the first step of a loop that starts just
// then by up to a second. It returns the first store error, or an error
// when the gate keeps no adaptive state.
func (r *Runner) Read(ctx context.Context) error {
	g := r.Gate
	ts, err := r.store()
	if err != nil {
		return err
	}
	cfg := g.Source.Config(ctx)
	for _, ln := range lanesOf(cfg) {
		name := ln.name
		set := cfg.Adaptive.Lane(string(name))
		if !set.On() {
			continue
		}
		round, err := ts.TuneExchange(ctx, r.key(cfg, ln), tune.Window{}, readEvery)
		if err != nil {
			return fmt.Errorf("adaptive %s: read: %w", name, err)
		}
		state, err := tune.Decode(round.State)
		if err != nil {
			return fmt.Errorf("adaptive %s: %w", name, err)
		}
		if state.Limit <= 0 {
			continue
		}
		b := tune.Bounds{Min: set.Min, Max: set.Max, Static: ln.static(cfg)}
		_ = g.Tune(name, false, func(l *tune.LaneState) { install(l, state, b) })
	}
	return nil
}

// StepAges returns, for every lane adaptive under the config in force,
// how long ago the cluster last took a step of it, as this gateway last
// read the state (for capgate_adaptive_last_step_age_seconds): about a
// second while the loop runs; growing when no gateway steps it, or this
// one no longer reads the state. A lane no step is known of counts from
// the Runner's first step or first read of the ages. Empty when the gate
// keeps no adaptive state.
func (r *Runner) StepAges(ctx context.Context) map[capgate.LaneName]time.Duration {
	out := map[capgate.LaneName]time.Duration{}
	g := r.Gate
	if g.Tune("", false, nil) != nil {
		return out
	}
	cfg := g.Source.Config(ctx)
	t := now(g)
	since := r.start(t)
	for _, ln := range lanesOf(cfg) {
		if !cfg.Adaptive.Lane(string(ln.name)).On() {
			continue
		}
		var at time.Time
		_ = g.Tune(ln.name, false, func(l *tune.LaneState) { at = l.StepAt })
		if at.IsZero() {
			at = since
		}
		out[ln.name] = max(t.Sub(at), 0)
	}
	return out
}

// Advised returns the advised limit of every adaptive lane that has one
// under the config in force, within its bounds, whether it is applied or
// not (for the metric capgate_lane_advised_limit); empty when there is
// none, or the gate keeps no adaptive state.
func (r *Runner) Advised(ctx context.Context) map[capgate.LaneName]int {
	out := map[capgate.LaneName]int{}
	g := r.Gate
	if g.Tune("", false, nil) != nil {
		return out
	}
	cfg := g.Source.Config(ctx)
	for _, ln := range lanesOf(cfg) {
		set := cfg.Adaptive.Lane(string(ln.name))
		if !set.On() {
			continue
		}
		var adv int
		_ = g.Tune(ln.name, false, func(l *tune.LaneState) { adv = l.Advised })
		if adv > 0 {
			out[ln.name] = tune.Bounds{Min: set.Min, Max: set.Max}.Clamp(adv)
		}
	}
	return out
}

// start returns when the Runner first stepped or read the ages, setting
// it to t the first time.
func (r *Runner) start(t time.Time) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.since.IsZero() {
		r.since = t
	}
	return r.since
}

// errNoTuneStore is the error of a Runner whose gate's lane store keeps
// no adaptive state.
var errNoTuneStore = errors.New("adaptive limits: the gate's lane store is no tune.Store")

// store returns the store of the adaptive state, or why there is none.
func (r *Runner) store() (tune.Store, error) {
	if err := r.Gate.Tune("", false, nil); err != nil {
		return nil, err
	}
	var ts tune.Store
	if r.Gate.Store != nil {
		ts = r.Gate.Store.Caps().Adaptive
	}
	if ts == nil {
		return nil, errNoTuneStore
	}
	return ts, nil
}

// lane is one lane that may be adaptive.
type lane struct {
	name  capgate.LaneName
	index int  // in the policy
	task  bool // one count per API task: its state is per task too
}

// lanesOf returns the lanes of cfg's policy that may have an adaptive
// limit (its shared lanes: one count, one limit), in its order, as the
// gate applies them.
func lanesOf(cfg settings.Config) []lane {
	var out []lane
	for i, l := range cfg.Policy().Lanes {
		if l.Shared() {
			out = append(out, lane{name: capgate.LaneName(l.Name), index: i, task: l.Scope == policy.ScopeTask})
		}
	}
	return out
}

// static returns the static limit an adaptive lane replaces.
func (ln lane) static(cfg settings.Config) int { return cfg.Limit(ln.index, -1) }

// key returns the store key of the adaptive state of lane ln:
// <prefix>:tune:<lane>[:<task>], under the lanes' prefix (the gate's
// KeyPrefix, else the policy's; so a hash-tagged prefix keeps it in their
// slot) but outside every lane's key space.
func (r *Runner) key(cfg settings.Config, ln lane) string {
	prefix := r.Gate.KeyPrefix
	if prefix == "" {
		prefix = cfg.Policy().Names.KeyPrefix
	}
	id := string(ln.name)
	if ln.task {
		id += ":" + r.Gate.TaskID
	}
	return capgate.Keys{Prefix: prefix}.Lane("tune", id)
}

// round3ms returns µs as ms, to the µs.
func round3ms(us float64) float64 { return float64(int64(us)) / 1000 }

// line is the <log event>_adaptive log line.
type line struct {
	Event    string           `json:"event"`
	Lane     capgate.LaneName `json:"lane"`
	Mode     tune.Mode        `json:"mode"`
	Advised  int              `json:"advised"`
	Previous int              `json:"previous"`
	Limit    int              `json:"limit"`        // in force now
	Source   string           `json:"limit_source"` // adaptive or static
	Static   int              `json:"static"`
	Min      int              `json:"min"`
	Max      int              `json:"max"`
	Reason   string           `json:"reason"`
	Step     int64            `json:"step"`
	tune.Snapshot
	Task string `json:"task,omitempty"`
	TS   string `json:"ts"`
}

// emit writes the <log event>_adaptive line of a step of lane ln that
// changed its advised limit from prev to s.Limit.
func (r *Runner) emit(cfg settings.Config, ln lane, prev int, s tune.State) {
	g := r.Gate
	name := ln.name
	set := cfg.Adaptive.Lane(string(name))
	static := ln.static(cfg)
	limit, src := static, status.LimitStatic
	if set.Mode == tune.Apply && static > 0 {
		limit, src = s.Limit, status.LimitAdaptive
	}
	l := line{Event: cfg.Policy().Names.LogEvent + eventSuffix, Lane: name, Mode: set.Mode, Advised: s.Limit, Previous: prev,
		Limit: limit, Source: src, Static: static, Min: set.Min, Max: set.Max, Reason: s.Reason, Step: s.Step,
		Snapshot: s.Last, Task: g.TaskID, TS: now(g).UTC().Format("2006-01-02T15:04:05.000Z")}
	logger(g).Info("adaptive limit changed", "lane", name, "mode", set.Mode, "from", prev, "to", s.Limit, "reason", s.Reason, "mean_ms", s.Last.MeanMS, "no_load_ms", s.Last.NoLoadMS, "calls", s.Last.Calls, "maxin", s.Last.MaxInFlight)
	if g.Sink == nil {
		return
	}
	b, err := jsonenc.Marshal(l)
	if err == nil {
		err = g.Sink.Emit(b)
	}
	if err != nil {
		logger(g).Warn("adaptive limit: log line failed", "error", err)
	}
}

// now is the gate's clock (Gate.Now; nil: time.Now).
func now(g *capgate.Gate) time.Time {
	if g.Now != nil {
		return g.Now()
	}
	return time.Now()
}

// logger is the gate's logger (Gate.Logger; nil: slog.Default()).
func logger(g *capgate.Gate) *slog.Logger {
	if g.Logger != nil {
		return g.Logger
	}
	return slog.Default()
}
