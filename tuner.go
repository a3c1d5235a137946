package capgate

import (
	"errors"
	"sync"
	"time"

	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
	"github.com/capgate/capgate/status"
	"github.com/capgate/capgate/tune"
)

// tuner is the gate's part of the adaptive limits (package tune) that
// every call needs: it gathers the service times of the calls the gate
// releases on each adaptive lane (observe), and gives the gate the limits
// in force (apply) and the status its advice (annotate). The loop that
// steps them lives in package adaptive: every second it sends the
// gathered samples to the store's tune.Store (the gateway that gets a
// window takes the step for the cluster and saves the new state), reads
// the state back and sets each lane's advised limit, all through
// Gate.Tune. The lanes it may run are the policy's shared lanes
// (policy.Lane.Shared: one count, one limit), named in the config key
// "adaptive".
//
// When the store fails, the gate keeps the last limit it knew (never
// falling to min) and the samples it could not send for the next try; a
// gateway that starts while the store is down uses the static limits
// until it answers. NewGate gives a gate one when its store is a
// tune.Store. nil (a hand-built Gate, or a store without tune.Store): the
// static limits. Its methods are safe for concurrent use.
type tuner struct {
	mu    sync.Mutex
	lanes map[LaneName]*tuneLane // by lane name; requires mu held
}

// tuneLane is what the tuner knows of one adaptive lane.
type tuneLane struct {
	gather tune.Gather // this gateway's calls released since the last take
	tune.LaneState
}

// errNoTuneStore is the error of Gate.Tune on a gate without adaptive
// state.
var errNoTuneStore = errors.New("adaptive limits: the gate keeps no adaptive state (its lane store is no tune.Store, or the Gate was not made by NewGate)")

// Tune calls fn with the adaptive state g keeps of lane name, under the
// lock of that state, which g shares with the gates ForTask derives
// (their released calls feed it, and they take the limits it advises):
// fn must be quick and must not call g. With take, the samples of the
// calls released on the lane since the last take are first added to
// Pending, and the gate gathers anew. It returns an error, calling
// nothing, when g keeps no adaptive state (its store is no tune.Store, or
// it was not made by NewGate); a nil fn only asks that.
func (g *Gate) Tune(name LaneName, take bool, fn func(l *tune.LaneState)) error {
	t := g.tuner
	if t == nil {
		return errNoTuneStore
	}
	if fn == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.lane(name)
	if take {
		l.Pending = l.Pending.Add(l.gather.Window())
		l.gather.Reset()
	}
	fn(&l.LaneState)
	return nil
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
	if capsOf(store).Adaptive != nil {
		return &tuner{}
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
	adv := t.lane(r.name).Advised
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
			Step: l.State.Step, Reason: l.State.Reason, Calls: l.State.Last.Calls, RowMS: l.State.Last.MeanMS,
			NoLoadMS: l.State.Last.NoLoadMS, MaxInFlight: l.State.Last.MaxInFlight, Full: l.State.Last.Full}
		if !l.StepAt.IsZero() {
			a.StepAgeS = max(now.Sub(l.StepAt), 0).Seconds()
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
