package capgate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/capgate/capgate/internal/jsonenc"
	"github.com/capgate/capgate/internal/loop"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
	"github.com/capgate/capgate/status"
	"github.com/capgate/capgate/tune"
)

// tuneEvery is how often a lane's limit is stepped, for the cluster.
const tuneEvery = time.Second

// heldLogEvery is how many steps apart a step that changed nothing is
// logged at info level (each is at debug).
const heldLogEvery = 30

// adaptiveEventSuffix ends the "event" of the line written on each change
// of an advised limit: the policy's log event + "_adaptive".
const adaptiveEventSuffix = "_adaptive"

// tuner is the gate's part that runs the adaptive limits (package tune): it
// gathers the service times of the calls the gate releases on each adaptive
// lane, and every second (Gate.RunAdaptive) sends them to the store's
// tune.Store; the gateway that gets a window takes the step for the cluster
// and saves the new state, and every gateway reads the state back. apply
// gives the gate the limits in force. The lanes it may run are the policy's
// shared lanes (policy.Lane.Shared: one count, one limit), named in the
// config key "adaptive".
//
// When the store fails, the gate keeps the last limit it knew (never
// falling to min) and keeps the samples it could not send for the next
// try; a gateway that starts while the store is down uses the static
// limits until it answers. NewGate gives a gate one when its store is a
// tune.Store; the gate's fields (Source, keys, Sink, Logger, Skip, Now)
// are read at each step, so they may be set after NewGate. nil (a
// hand-built Gate, or a store without tune.Store): the static limits. Its
// methods are safe for concurrent use.
type tuner struct {
	store tune.Store

	mu    sync.Mutex
	lanes map[LaneName]*tuneLane // by lane name; requires mu held
	since time.Time              // the first step tried or age read: the age of a loop that never stepped; requires mu held
}

// tuneLane is what the tuner knows of one adaptive lane.
type tuneLane struct {
	gather  tune.Gather // this gateway's calls released since the last send
	pending tune.Window // gathered windows not sent yet (a failed send; samples measured outside the gate)
	advised int         // the last advised limit known; 0: none yet
	stepAt  time.Time   // when the cluster last took a step, as the state last read says; zero: none known
	state   tune.State  // the state last read
}

// lane returns lane name's state, made now if it has none. Requires t.mu
// held.
func (t *tuner) lane(name LaneName) *tuneLane {
	if t.lanes == nil {
		t.lanes = map[LaneName]*tuneLane{}
	}
	l, ok := t.lanes[name]
	if !ok {
		l = &tuneLane{}
		t.lanes[name] = l
	}
	return l
}

// newTuner returns the tuner of a gate over store; nil when the store
// keeps no adaptive state.
func newTuner(store LaneStore) *tuner {
	if ts := capsOf(store).Adaptive; ts != nil {
		return &tuner{store: ts}
	}
	return nil
}

// adaptiveLanes returns the lanes of cfg's policy that may have an
// adaptive limit (its shared lanes), in its order, with their indexes.
func adaptiveLanes(cfg settings.Config) []adaptiveLaneRef {
	var out []adaptiveLaneRef
	for i, l := range cfg.Policy().Lanes {
		if l.Shared() {
			out = append(out, adaptiveLaneRef{name: LaneName(l.Name), index: i, task: l.Scope == policy.ScopeTask})
		}
	}
	return out
}

// adaptiveLaneRef is one lane that may be adaptive.
type adaptiveLaneRef struct {
	name  LaneName
	index int  // in the policy
	task  bool // one count per API task: its state is per task too
}

// adaptiveRef returns the adaptive lane name of cfg's policy; ok is false
// for a lane that can't be adaptive.
func adaptiveRef(cfg settings.Config, name LaneName) (adaptiveLaneRef, bool) {
	for _, r := range adaptiveLanes(cfg) {
		if r.name == name {
			return r, true
		}
	}
	return adaptiveLaneRef{}, false
}

// tuneKey returns the store key of the adaptive state of lane r:
// <prefix>:tune:<lane>[:<task>], under the lanes' prefix (so a hash-tagged
// prefix keeps it in their slot) but outside every lane's key space.
func (k Keys) tuneKey(r adaptiveLaneRef) string {
	key := k.prefix() + ":tune:" + string(r.name)
	if r.task {
		key += ":" + k.TaskID
	}
	return key
}

// staticLimit returns the static limit an adaptive lane replaces.
func staticLimit(cfg settings.Config, r adaptiveLaneRef) int { return cfg.Limit(r.index, -1) }

// advised returns the advised limit of lane r under cfg: the last one
// computed, kept within the bounds set now; ok is false when the lane is
// not adaptive or none is known yet.
func (t *tuner) advised(cfg settings.Config, r adaptiveLaneRef) (limit int, ok bool) {
	set := cfg.Adaptive.Lane(string(r.name))
	if t == nil || !set.On() {
		return 0, false
	}
	t.mu.Lock()
	adv := t.lane(r.name).advised
	t.mu.Unlock()
	if adv <= 0 {
		return 0, false
	}
	return tune.Bounds{Min: set.Min, Max: set.Max}.Clamp(adv), true
}

// inForce returns the limit of lane r in force under cfg and where it
// comes from: "adaptive" when its mode is apply and a limit was advised,
// else "static". A paused lane (static limit 0) stays paused.
func (t *tuner) inForce(cfg settings.Config, r adaptiveLaneRef) (limit int, source string) {
	static := staticLimit(cfg, r)
	if adv, ok := t.advised(cfg, r); ok && cfg.Adaptive.Lane(string(r.name)).Mode == tune.Apply && static > 0 {
		return adv, status.LimitAdaptive
	}
	return static, status.LimitStatic
}

// apply returns cfg with the limits of the lanes in mode apply replaced
// by their advised limits (never below the lane's reserve; the bulk limit
// follows). A nil tuner or a config with no adaptive lane returns cfg
// unchanged.
func (t *tuner) apply(cfg settings.Config) settings.Config {
	if t == nil || cfg.Adaptive.Empty() {
		return cfg
	}
	for _, r := range adaptiveLanes(cfg) {
		if l, src := t.inForce(cfg, r); src == status.LimitAdaptive {
			cfg = cfg.WithLimit(r.index, l)
		}
	}
	return cfg
}

// observe takes a released call into each of its adaptive lanes'
// windows: its service time, and its units of work (the route's units
// field: OCL's rows; without one, its seats in the lane; the step measures
// the time per unit: see tune.Gather), beside the lane's count in seats.
func (t *tuner) observe(a *Admission, service time.Duration) {
	if t == nil || a.cfg.Adaptive.Empty() || a.counts == nil {
		return
	}
	us := max(service.Microseconds(), 1)
	units, byRoute := 1, false
	if r := a.call.Route; r != nil && r.Units != "" {
		units, byRoute = r.UnitsOf(&a.call.Fields), true
	}
	for i, l := range a.lanes {
		if !a.cfg.Adaptive.Lane(string(l.Name)).On() || i >= len(a.counts) || l.Spec == nil || !l.Spec.Shared() {
			continue
		}
		u := units
		if !byRoute {
			u = l.seats() // a call of k seats is k seats' work
		}
		s := tune.Sample{Micros: us, Units: int64(u), InFlight: int64(a.counts[i]), Full: a.full.has(i) || a.waited}
		t.mu.Lock()
		t.lane(l.Name).gather.Add(s)
		t.mu.Unlock()
	}
}

// add adds w, a window gathered outside the gate, to the samples of lane
// name to be sent at the next step.
func (t *tuner) add(name LaneName, w tune.Window) {
	t.mu.Lock()
	p := &t.lane(name).pending
	*p = p.Add(w)
	t.mu.Unlock()
}

// errNoTuneStore is the error of StepAdaptive on a gate without adaptive
// state.
var errNoTuneStore = errors.New("adaptive limits: the gate keeps no adaptive state (its lane store is no tune.Store, or the Gate was not made by NewGate)")

// RunAdaptive runs the gate's adaptive limits (the config key "adaptive")
// until ctx is done: it steps them at once and then every second
// (StepAdaptive). Nothing is stepped without it, so a gate that never runs
// it keeps the static limits. It is idle while the config has no adaptive
// lane. On a gate that keeps no adaptive state (its store is no tune.Store,
// or the Gate was built by hand) it logs a warning and returns at once.
func (g *Gate) RunAdaptive(ctx context.Context) {
	if g.tuner == nil {
		g.logger().Warn("adaptive limits unavailable", "error", errNoTuneStore)
		return
	}
	loop.Every(ctx, tuneEvery, func(ctx context.Context) { _ = g.StepAdaptive(ctx, nil) })
}

// StepAdaptive takes one step of the adaptive limits now, as RunAdaptive
// does every second: it adds observed (samples of service times measured
// outside the gate, by lane; nil: none) to those of the calls the gate
// released, sends each adaptive lane's samples to the store, takes the
// step when this gateway got the window, and reads the state back. It
// returns the first store error (the limits known stay in force), or an
// error when the gate keeps no adaptive state.
func (g *Gate) StepAdaptive(ctx context.Context, observed map[LaneName]tune.Window) error {
	t := g.tuner
	if t == nil {
		return errNoTuneStore
	}
	for name, w := range observed {
		t.add(name, w)
	}
	t.mu.Lock()
	if t.since.IsZero() {
		t.since = g.now()
	}
	t.mu.Unlock()
	cfg := g.Source.Config(ctx)
	var first error
	for _, r := range adaptiveLanes(cfg) {
		if !cfg.Adaptive.Lane(string(r.name)).On() {
			t.mu.Lock()
			*t.lane(r.name) = tuneLane{} // samples of a lane switched off say nothing later
			t.mu.Unlock()
			continue
		}
		if g.skipping() {
			return nil
		}
		if err := g.stepLane(ctx, t, cfg, r); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (g *Gate) stepLane(ctx context.Context, t *tuner, cfg settings.Config, r adaptiveLaneRef) (err error) {
	name := r.name
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("adaptive %s: internal error: %v", name, r)
		}
		if err != nil {
			g.logger().Warn("adaptive limit: step failed; the last limit stays", "lane", name, "error", err)
		}
	}()
	t.mu.Lock()
	l := t.lane(name)
	batch := l.pending.Add(l.gather.Window())
	l.pending = tune.Window{}
	l.gather.Reset()
	t.mu.Unlock()
	key := g.keys(cfg).tuneKey(r)
	round, err := t.store.TuneExchange(ctx, key, batch, tuneEvery)
	if err != nil {
		t.mu.Lock()
		l.pending = l.pending.Add(batch) // sent next time
		t.mu.Unlock()
		return fmt.Errorf("adaptive %s: exchange: %w", name, err)
	}
	state, derr := tune.Decode(round.State)
	if derr != nil {
		state = tune.State{} // a state we can't read starts over from the static limit
	}
	set := cfg.Adaptive.Lane(string(name))
	b := tune.Bounds{Min: set.Min, Max: set.Max, Static: staticLimit(cfg, r), Advise: set.Mode == tune.Advise}
	if round.Due {
		prev := state.Start(b)
		state = state.Next(round.Window, b)
		state.At = g.now().UnixMilli()
		// Every step's inputs, so that a loop that does not act shows why
		// (few calls, settling, steady): at debug level each step, at info
		// every heldLogEvery steps that changed nothing (a change has its
		// own line, below).
		level := slog.LevelDebug
		if state.Limit == prev && state.Step%heldLogEvery == 0 {
			level = slog.LevelInfo
		}
		g.logger().Log(ctx, level, "adaptive step", "lane", name, "mode", set.Mode, "step", state.Step, "from", prev, "to", state.Limit,
			"reason", state.Reason, "calls", round.Window.Calls, "row_ms", round3ms(round.Window.Mean()),
			"no_load_ms", round3ms(state.NoLoad), "full", round.Window.Full, "max_in_flight", round.Window.MaxInFlight,
			"static", b.Static, "min", b.Min, "max", b.Max)
		enc, err := tune.Encode(state)
		if err != nil {
			return err
		}
		if err := t.store.TuneSave(ctx, key, enc); err != nil {
			return fmt.Errorf("adaptive %s: save: %w", name, err)
		}
		if state.Limit != prev {
			g.emitAdaptive(cfg, r, prev, state)
		}
	}
	if state.Limit > 0 || round.Due {
		t.mu.Lock()
		l.advised = state.Start(b)
		if state.At > 0 {
			l.stepAt = time.UnixMilli(state.At)
		}
		l.state = state
		t.mu.Unlock()
	}
	return derr
}

// readEvery is the window length ReadAdaptive asks for: never due once
// any gateway took a window, so a read takes none of the loop's.
const readEvery = 100 * 365 * 24 * time.Hour

// ReadAdaptive reads the cluster's state of every adaptive lane, sending
// no samples and taking no step, so that a process that runs no loop (the
// capacity status command) shows the advice: Status and AdvisedLimits then
// show it. A lane no gateway ever stepped has its (empty) window taken,
// which delays the first step of a loop that starts just then by up to a
// second. It returns the first store error, or an error when the gate
// keeps no adaptive state.
func (g *Gate) ReadAdaptive(ctx context.Context) error {
	t := g.tuner
	if t == nil {
		return errNoTuneStore
	}
	cfg := g.Source.Config(ctx)
	for _, r := range adaptiveLanes(cfg) {
		name := r.name
		set := cfg.Adaptive.Lane(string(name))
		if !set.On() {
			continue
		}
		round, err := t.store.TuneExchange(ctx, g.keys(cfg).tuneKey(r), tune.Window{}, readEvery)
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
		b := tune.Bounds{Min: set.Min, Max: set.Max, Static: staticLimit(cfg, r)}
		t.mu.Lock()
		l := t.lane(name)
		l.advised, l.state = state.Start(b), state
		if state.At > 0 {
			l.stepAt = time.UnixMilli(state.At)
		}
		t.mu.Unlock()
	}
	return nil
}

// round3ms returns µs as ms, to the µs.
func round3ms(us float64) float64 { return float64(int64(us)) / 1000 }

// AdaptiveStepAges returns, for every lane adaptive under the config in
// force, how long ago the cluster last took a step of it, as this
// gateway last read the state (for capgate_adaptive_last_step_age_seconds):
// about a second while the loop runs; growing when no gateway steps it, or
// this one no longer reads the state. A lane no step is known of counts
// from the gate's first step or first read of the ages. Empty when the gate keeps no adaptive
// state.
func (g *Gate) AdaptiveStepAges(ctx context.Context) map[LaneName]time.Duration {
	out := map[LaneName]time.Duration{}
	t := g.tuner
	if t == nil {
		return out
	}
	cfg := g.Source.Config(ctx)
	now := g.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.since.IsZero() {
		t.since = now
	}
	for _, r := range adaptiveLanes(cfg) {
		name := r.name
		if !cfg.Adaptive.Lane(string(name)).On() {
			continue
		}
		at := t.lane(name).stepAt
		if at.IsZero() {
			at = t.since
		}
		out[name] = max(now.Sub(at), 0)
	}
	return out
}

// adaptiveLine is the <log event>_adaptive log line.
type adaptiveLine struct {
	Event    string    `json:"event"`
	Lane     LaneName  `json:"lane"`
	Mode     tune.Mode `json:"mode"`
	Advised  int       `json:"advised"`
	Previous int       `json:"previous"`
	Limit    int       `json:"limit"`        // in force now
	Source   string    `json:"limit_source"` // adaptive or static
	Static   int       `json:"static"`
	Min      int       `json:"min"`
	Max      int       `json:"max"`
	Reason   string    `json:"reason"`
	Step     int64     `json:"step"`
	tune.Snapshot
	Task string `json:"task,omitempty"`
	TS   string `json:"ts"`
}

// emitAdaptive writes the <log event>_adaptive line of a step of lane r
// that changed its advised limit from prev to s.Limit.
func (g *Gate) emitAdaptive(cfg settings.Config, r adaptiveLaneRef, prev int, s tune.State) {
	name := r.name
	set := cfg.Adaptive.Lane(string(name))
	static := staticLimit(cfg, r)
	limit, src := static, status.LimitStatic
	if set.Mode == tune.Apply && static > 0 {
		limit, src = s.Limit, status.LimitAdaptive
	}
	line := adaptiveLine{Event: cfg.Policy().Names.LogEvent + adaptiveEventSuffix, Lane: name, Mode: set.Mode, Advised: s.Limit, Previous: prev,
		Limit: limit, Source: src, Static: static, Min: set.Min, Max: set.Max, Reason: s.Reason, Step: s.Step,
		Snapshot: s.Last, Task: g.TaskID, TS: g.now().UTC().Format("2006-01-02T15:04:05.000Z")}
	g.logger().Info("adaptive limit changed", "lane", name, "mode", set.Mode, "from", prev, "to", s.Limit, "reason", s.Reason, "mean_ms", s.Last.MeanMS, "no_load_ms", s.Last.NoLoadMS, "calls", s.Last.Calls, "maxin", s.Last.MaxInFlight)
	if g.Sink == nil {
		return
	}
	b, err := jsonenc.Marshal(line)
	if err == nil {
		err = g.Sink.Emit(b)
	}
	if err != nil {
		g.logger().Warn("adaptive limit: log line failed", "error", err)
	}
}

// annotate sets the limit in force, the advised limit and the limit's
// source of each adaptive lane in st, read under cfg (the static config),
// and st.Adaptive, the loop's advice and why, at now. A task lane's entry
// is task's (the gate's own).
func (t *tuner) annotate(cfg settings.Config, task string, now time.Time, st *status.Snapshot) {
	if t == nil || cfg.Adaptive.Empty() || st.Store != status.OK {
		return
	}
	mark := func(r adaptiveLaneRef, ln *status.Lane) {
		set := cfg.Adaptive.Lane(string(r.name))
		if !set.On() {
			return
		}
		ln.Limit, ln.LimitSource = t.inForce(cfg, r)
		if adv, ok := t.advised(cfg, r); ok {
			ln.Advised = adv
		}
		t.mu.Lock()
		l := *t.lane(r.name)
		t.mu.Unlock()
		a := status.Adaptive{Mode: string(set.Mode), Advised: ln.Advised, Limit: ln.Limit, LimitSource: ln.LimitSource,
			Step: l.state.Step, Reason: l.state.Reason, Calls: l.state.Last.Calls, RowMS: l.state.Last.MeanMS,
			NoLoadMS: l.state.Last.NoLoadMS, MaxInFlight: l.state.Last.MaxInFlight, Full: l.state.Last.Full}
		if !l.stepAt.IsZero() {
			a.StepAgeS = max(now.Sub(l.stepAt), 0).Seconds()
		}
		if st.Adaptive == nil {
			st.Adaptive = map[string]status.Adaptive{}
		}
		st.Adaptive[string(r.name)] = a
		if reserve := cfg.Reserve(r.index); ln.BulkLimit != nil && ln.LimitSource == status.LimitAdaptive {
			ln.Limit = max(ln.Limit, reserve)
			b := max(ln.Limit-reserve, 0)
			ln.BulkLimit = &b
		}
	}
	for _, r := range adaptiveLanes(cfg) {
		if !r.task {
			for i := range st.Shared {
				if st.Shared[i].Name == string(r.name) {
					mark(r, &st.Shared[i].Lane)
				}
			}
			continue
		}
		if !cfg.Adaptive.Lane(string(r.name)).On() {
			continue
		}
		kl, ok := st.KeyedLane(string(r.name))
		if !ok {
			continue
		}
		if kl.Entries == nil {
			kl.Entries = map[string]status.Lane{}
		}
		ts := kl.Entries[task]
		mark(r, &ts)
		kl.Entries[task] = ts
	}
}

// AdvisedLimits returns the advised limit of every adaptive lane that has
// one under the config in force, whether it is applied or not (for the
// metric capgate_lane_advised_limit); empty when there is none, or the
// gate keeps no adaptive state.
func (g *Gate) AdvisedLimits(ctx context.Context) map[LaneName]int {
	out := map[LaneName]int{}
	if g.tuner == nil {
		return out
	}
	cfg := g.Source.Config(ctx)
	for _, r := range adaptiveLanes(cfg) {
		if l, ok := g.tuner.advised(cfg, r); ok {
			out[r.name] = l
		}
	}
	return out
}
