package capgate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/capgate/capgate/internal/jsonenc"
	"github.com/capgate/capgate/internal/loop"
	"github.com/capgate/capgate/status"
	"github.com/capgate/capgate/tune"
)

// defaultTuneEvery is how often a lane's limit is stepped, for the cluster.
const defaultTuneEvery = time.Second

// AdaptiveEvent is the "event" of the line written on each change of an
// advised limit.
const AdaptiveEvent = "ocl_capacity_adaptive"

// Tuner runs the adaptive limits (package tune) of one gateway: it gathers the
// service times of the calls the gate releases on each adaptive lane, and
// every Every sends them to the tune.Store; the gateway that gets a window
// takes the step for the cluster and saves the new state, and every
// gateway reads the state back. Apply gives the gate the limits in force.
//
// When the store fails, the Tuner keeps the last limit it knew (never
// falling to min) and keeps the samples it could not send for the next
// try; a gateway that starts while the store is down uses the static
// limits until it answers. Build it with NewTuner; a Tuner is safe for
// concurrent use. Run it with Run; nothing is stepped without it.
type Tuner struct {
	Store  tune.Store    // required
	Source ConfigSource  // required
	Keys   Keys          // the lane keys; the task lane is Keys.TaskID's
	Every  time.Duration // how often a lane is stepped, for the cluster; 0: 1 s
	Sink   Sink          // receives the ocl_capacity_adaptive lines; nil: none
	Logger *slog.Logger  // nil: slog.Default()
	Now    func() time.Time
	// skipping, when set, reports whether the gate's skip window is open:
	// while it is, the store is not used (NewTunerFor sets it).
	skipping func() bool

	mu    sync.Mutex
	lanes [3]tuneLane // by index in adaptiveLanes; requires mu held
}

// tuneLane is what the Tuner knows of one adaptive lane.
type tuneLane struct {
	batch   tune.Window // samples not yet sent
	advised int         // the last advised limit known; 0: none yet
}

// NewTuner returns a Tuner over store and cfg with the defaults set.
func NewTuner(store tune.Store, cfg ConfigSource, keys Keys) *Tuner {
	return &Tuner{Store: store, Source: cfg, Keys: keys, Every: defaultTuneEvery, Now: time.Now}
}

func (t *Tuner) now() time.Time {
	if t.Now != nil {
		return t.Now()
	}
	return time.Now()
}

func (t *Tuner) every() time.Duration {
	if t.Every > 0 {
		return t.Every
	}
	return defaultTuneEvery
}

func (t *Tuner) logger() *slog.Logger {
	if t.Logger != nil {
		return t.Logger
	}
	return slog.Default()
}

// laneKey returns the lane key of the adaptive lane name.
func (t *Tuner) laneKey(name LaneName) string {
	if name == LaneTask {
		return t.Keys.Lane(LaneTask, t.Keys.TaskID)
	}
	return t.Keys.Lane(name, "")
}

// tuneKey returns the store key of the adaptive state of lane name:
// <prefix>:tune:<lane>[:<task>], under the lanes' prefix (so a hash-tagged
// prefix keeps it in their slot) but outside every lane's key space.
func (t *Tuner) tuneKey(name LaneName) string {
	k := t.Keys.prefix() + ":tune:" + string(name)
	if name == LaneTask {
		k += ":" + t.Keys.TaskID
	}
	return k
}

// staticLimit returns the static limit an adaptive lane replaces.
func staticLimit(cfg Config, name LaneName) int {
	switch name {
	case LaneAPIHeavy:
		return cfg.APIHeavy.Cluster
	case LaneTask:
		return cfg.APIHeavy.PerTask
	}
	return cfg.ES2KNN
}

// Advised returns the advised limit of lane name under cfg: the last one
// computed, kept within the bounds set now; ok is false when the lane is
// not adaptive or none is known yet.
func (t *Tuner) Advised(cfg Config, name LaneName) (limit int, ok bool) {
	set := cfg.Adaptive.Lane(name)
	if t == nil || !set.On() {
		return 0, false
	}
	i := tuneIndex(name)
	t.mu.Lock()
	adv := t.lanes[i].advised
	t.mu.Unlock()
	if adv <= 0 {
		return 0, false
	}
	return tune.Bounds{Min: set.Min, Max: set.Max}.Clamp(adv), true
}

// inForce returns the limit of lane name in force under cfg and where it
// comes from: "adaptive" when its mode is apply and a limit was advised,
// else "static". A paused lane (static limit 0) stays paused.
func (t *Tuner) inForce(cfg Config, name LaneName) (limit int, source string) {
	static := staticLimit(cfg, name)
	if adv, ok := t.Advised(cfg, name); ok && cfg.Adaptive.Lane(name).Mode == AdaptiveApply && static > 0 {
		return adv, status.LimitAdaptive
	}
	return static, status.LimitStatic
}

// Apply returns cfg with the limits of the lanes in mode apply replaced
// by their advised limits (the bulk limit follows api_heavy). A nil Tuner
// or a config with no adaptive lane returns cfg unchanged.
func (t *Tuner) Apply(cfg Config) Config {
	if t == nil || cfg.Adaptive == (Adaptive{}) {
		return cfg
	}
	if l, src := t.inForce(cfg, LaneAPIHeavy); src == status.LimitAdaptive {
		cfg.APIHeavy.Cluster = max(l, cfg.ReserveSingleRow)
	}
	if l, src := t.inForce(cfg, LaneTask); src == status.LimitAdaptive {
		cfg.APIHeavy.PerTask = l
	}
	if l, src := t.inForce(cfg, LaneES2KNN); src == status.LimitAdaptive {
		cfg.ES2KNN = l
	}
	return cfg
}

func tuneIndex(name LaneName) int {
	switch name {
	case LaneAPIHeavy:
		return 0
	case LaneTask:
		return 1
	}
	return 2
}

// observe takes the service time of a released call into each of its
// adaptive lanes' windows.
func (t *Tuner) observe(a *Admission, service time.Duration) {
	if t == nil || a.cfg.Adaptive == (Adaptive{}) || a.counts == nil {
		return
	}
	us := max(service.Microseconds(), 1)
	for i, l := range a.lanes {
		if !a.cfg.Adaptive.Lane(l.Name).On() || i >= len(a.counts) {
			continue
		}
		var full int64
		if a.full.has(i) || a.waited {
			full = 1
		}
		n := int64(a.counts[i])
		t.Observe(l.Name, tune.Window{Calls: 1, SumMicros: us, Full: full, MaxInFlight: n, SumInFlight: n})
	}
}

// Observe adds w to the samples of lane name to be sent at the next Step.
// The gate calls it for each call it releases on an adaptive lane; a
// program that measures service times elsewhere may call it too.
func (t *Tuner) Observe(name LaneName, w tune.Window) {
	if !slices.Contains(adaptiveLanes, name) {
		return
	}
	t.mu.Lock()
	b := &t.lanes[tuneIndex(name)].batch
	*b = b.Add(w)
	t.mu.Unlock()
}

// Run steps the adaptive lanes every Every until ctx is done.
func (t *Tuner) Run(ctx context.Context) {
	loop.Every(ctx, t.every(), func(ctx context.Context) { _ = t.Step(ctx) })
}

// Step sends each adaptive lane's samples to the store, takes the step when
// this gateway got the window, and reads the state back. It returns the
// first store error (the limits known stay in force).
func (t *Tuner) Step(ctx context.Context) error {
	cfg := t.Source.Config(ctx)
	var first error
	for _, name := range adaptiveLanes {
		i := tuneIndex(name)
		if !cfg.Adaptive.Lane(name).On() {
			t.mu.Lock()
			t.lanes[i] = tuneLane{} // samples of a lane switched off say nothing later
			t.mu.Unlock()
			continue
		}
		if t.skipping != nil && t.skipping() {
			return nil
		}
		if err := t.stepLane(ctx, cfg, name); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (t *Tuner) stepLane(ctx context.Context, cfg Config, name LaneName) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("adaptive %s: internal error: %v", name, r)
		}
		if err != nil {
			t.logger().Warn("adaptive limit: step failed; the last limit stays", "lane", name, "error", err)
		}
	}()
	i := tuneIndex(name)
	t.mu.Lock()
	batch := t.lanes[i].batch
	t.lanes[i].batch = tune.Window{}
	t.mu.Unlock()
	key := t.tuneKey(name)
	round, err := t.Store.TuneExchange(ctx, key, batch, t.every())
	if err != nil {
		t.mu.Lock()
		t.lanes[i].batch = t.lanes[i].batch.Add(batch) // sent next time
		t.mu.Unlock()
		return fmt.Errorf("adaptive %s: exchange: %w", name, err)
	}
	state, derr := tune.Decode(round.State)
	if derr != nil {
		state = tune.State{} // a state we can't read starts over from the static limit
	}
	set := cfg.Adaptive.Lane(name)
	b := tune.Bounds{Min: set.Min, Max: set.Max, Static: staticLimit(cfg, name), Advise: set.Mode == AdaptiveAdvise}
	if round.Due {
		prev := state.Start(b)
		state = state.Next(round.Window, b)
		enc, err := tune.Encode(state)
		if err != nil {
			return err
		}
		if err := t.Store.TuneSave(ctx, key, enc); err != nil {
			return fmt.Errorf("adaptive %s: save: %w", name, err)
		}
		if state.Limit != prev {
			t.emit(cfg, name, prev, state)
		}
	}
	if state.Limit > 0 || round.Due {
		t.mu.Lock()
		t.lanes[i].advised = state.Start(b)
		t.mu.Unlock()
	}
	return derr
}

// adaptiveLine is the ocl_capacity_adaptive log line.
type adaptiveLine struct {
	Event    string       `json:"event"`
	Lane     LaneName     `json:"lane"`
	Mode     AdaptiveMode `json:"mode"`
	Advised  int          `json:"advised"`
	Previous int          `json:"previous"`
	Limit    int          `json:"limit"`        // in force now
	Source   string       `json:"limit_source"` // adaptive or static
	Static   int          `json:"static"`
	Min      int          `json:"min"`
	Max      int          `json:"max"`
	Reason   string       `json:"reason"`
	Step     int64        `json:"step"`
	tune.Snapshot
	Task string `json:"task,omitempty"`
	TS   string `json:"ts"`
}

func (t *Tuner) emit(cfg Config, name LaneName, prev int, s tune.State) {
	set := cfg.Adaptive.Lane(name)
	static := staticLimit(cfg, name)
	limit, src := static, status.LimitStatic
	if set.Mode == AdaptiveApply && static > 0 {
		limit, src = s.Limit, status.LimitAdaptive
	}
	line := adaptiveLine{Event: AdaptiveEvent, Lane: name, Mode: set.Mode, Advised: s.Limit, Previous: prev,
		Limit: limit, Source: src, Static: static, Min: set.Min, Max: set.Max, Reason: s.Reason, Step: s.Step,
		Snapshot: s.Last, Task: t.Keys.TaskID, TS: t.now().UTC().Format("2006-01-02T15:04:05.000Z")}
	t.logger().Info("adaptive limit changed", "lane", name, "mode", set.Mode, "from", prev, "to", s.Limit, "reason", s.Reason, "mean_ms", s.Last.MeanMS, "no_load_ms", s.Last.NoLoadMS, "calls", s.Last.Calls, "maxin", s.Last.MaxInFlight)
	if t.Sink == nil {
		return
	}
	b, err := jsonenc.Marshal(line)
	if err == nil {
		err = t.Sink.Emit(b)
	}
	if err != nil {
		t.logger().Warn("adaptive limit: log line failed", "error", err)
	}
}

// errNoTuneStore is returned by NewTunerFor for a store without tune.Store.
var errNoTuneStore = errors.New("the lane store keeps no adaptive state")

// NewTunerFor returns a Tuner for the gate's store, config, keys, sink and
// skip window, or an error when the store is no tune.Store.
func (g *Gate) NewTunerFor() (*Tuner, error) {
	ts, ok := g.Store.(tune.Store)
	if !ok {
		return nil, errNoTuneStore
	}
	t := NewTuner(ts, g.Source, Keys{Prefix: g.KeyPrefix, TaskID: g.TaskID})
	t.Sink, t.Logger, t.skipping, t.Now = g.Sink, g.Logger, g.skipping, g.Now
	return t, nil
}

// annotate sets the limit in force, the advised limit and the limit's
// source of each adaptive lane in st, read under cfg (the static config).
// The task lane is this gateway's.
func (t *Tuner) annotate(cfg Config, st *status.Snapshot) {
	if t == nil || cfg.Adaptive == (Adaptive{}) || st.Store != status.OK {
		return
	}
	mark := func(name LaneName, limit, advised *int, source *string) {
		if !cfg.Adaptive.Lane(name).On() {
			return
		}
		*limit, *source = t.inForce(cfg, name)
		if adv, ok := t.Advised(cfg, name); ok {
			*advised = adv
		}
	}
	if h := st.APIHeavy; h != nil {
		mark(LaneAPIHeavy, &h.Limit, &h.Advised, &h.LimitSource)
		if h.LimitSource == status.LimitAdaptive {
			h.Limit = max(h.Limit, cfg.ReserveSingleRow)
			h.BulkLimit = max(h.Limit-cfg.ReserveSingleRow, 0)
		}
	}
	if e := st.ES2KNN; e != nil {
		mark(LaneES2KNN, &e.Limit, &e.Advised, &e.LimitSource)
	}
	if cfg.Adaptive.Lane(LaneTask).On() {
		task := st.Tasks[t.Keys.TaskID]
		mark(LaneTask, &task.Limit, &task.Advised, &task.LimitSource)
		if st.Tasks == nil {
			st.Tasks = map[string]status.Lane{}
		}
		st.Tasks[t.Keys.TaskID] = task
	}
}

// AdvisedLimits returns the advised limit of every adaptive lane that has
// one under the config in force (for the metric).
func (t *Tuner) AdvisedLimits(ctx context.Context) map[LaneName]int {
	cfg := t.Source.Config(ctx)
	out := map[LaneName]int{}
	for _, name := range adaptiveLanes {
		if l, ok := t.Advised(cfg, name); ok {
			out[name] = l
		}
	}
	return out
}
