package capgate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
	"github.com/capgate/capgate/status"
	"github.com/capgate/capgate/tune"
)

// Status reads the live state of the gate's lanes under cfg, as served by
// GET /capacity/status/ (README.md, The config): every lane of cfg's
// policy with its calls in flight and the limits in force (the adaptive
// ones where they apply). A lane keyed by tier lists every tier; task
// lanes and lanes keyed by the caller or a call field are found by listing
// keys and are reported only where calls are in flight or waiting. It
// knows nothing of the skip window: staff asking for the status want a
// live read. A store failure is reported in Store. A Gate built by hand
// needs only Store (and KeyPrefix if not the policy's) for it.
func (g *Gate) Status(ctx context.Context, cfg settings.Config) status.Snapshot {
	inForce := g.tuner.apply(cfg)
	k := g.keys(inForce)
	st := newSnapshot(g.Store, inForce)
	if err := g.readLanes(ctx, g.Store, k, inForce, &st, true); err != nil {
		st = failedSnapshot(st, err)
		st.Paused = pausedLanes(inForce)
		return st
	}
	st.Store = status.OK
	g.tuner.annotate(cfg, g.TaskID, g.now(), &st)
	st.Binding = status.BindingLane(st)
	st.Paused = pausedLanes(inForce)
	return st
}

// ReadLanes is Status without listing keys: it reads the gate's shared
// lanes, every tier of a tier lane and its own task lanes only, in one
// count and one waiting count, so it costs the store no scan. A task
// lane holds that one task, also when idle; a lane keyed by the caller or a
// call field is empty. The limits are cfg's. For metrics, read on every
// scrape. When the store can't be read (st.Store says why) and the gate has
// local lanes (Gate.Local), it reads those instead, and local is true: the
// calls this gateway alone counts, which decide while the lane store is
// unavailable, with the degraded limits they then apply (the lanes every
// gateway shares divided among the gateways last seen).
func (g *Gate) ReadLanes(ctx context.Context, cfg settings.Config) (st status.Snapshot, local bool) {
	st = newSnapshot(g.Store, cfg)
	if err := g.readLanes(ctx, g.Store, g.keys(cfg), cfg, &st, false); err != nil {
		st = failedSnapshot(st, err)
		if l, ok := g.readLocalLanes(ctx, cfg); ok && l.Store == status.OK {
			return l, true
		}
		return st, false
	}
	st.Store = status.OK
	return st, false
}

// readLocalLanes is ReadLanes over the gate's local lanes, with their
// degraded limits; ok is false for a gate without local lanes.
func (g *Gate) readLocalLanes(ctx context.Context, cfg settings.Config) (st status.Snapshot, ok bool) {
	if g.Local == nil {
		return status.Snapshot{}, false
	}
	st = newSnapshot(g.Local, cfg)
	if err := g.readLanes(ctx, g.Local, g.keys(cfg), cfg, &st, false); err != nil {
		return failedSnapshot(st, err), true
	}
	n := g.gatewaysSeen()
	p := cfg.Policy()
	shared := func(i int, limit int) int {
		return degradedLimit(Lane{Name: LaneName(p.Lanes[i].Name), Limit: limit, Spec: p.Lanes[i]}, n)
	}
	for i := range st.Shared {
		li := laneIndex(p, st.Shared[i].Name)
		l := &st.Shared[i].Lane
		l.Limit = shared(li, l.Limit)
		if l.BulkLimit != nil {
			b := shared(li, *l.BulkLimit)
			l.BulkLimit = &b
		}
	}
	for i := range st.Keyed {
		kl := &st.Keyed[i]
		li := laneIndex(p, kl.Name)
		for key, e := range kl.Entries {
			e.Limit = shared(li, e.Limit)
			kl.Entries[key] = e
		}
	}
	st.Store = status.OK
	return st, true
}

func laneIndex(p *policy.Policy, name string) int {
	for i, l := range p.Lanes {
		if l.Name == name {
			return i
		}
	}
	return -1
}

func newSnapshot(store LaneStore, cfg settings.Config) status.Snapshot {
	st := status.Snapshot{Mode: string(cfg.Mode), EnforceFor: string(cfg.EnforceFor), Lanes: laneStoreKind(store)}
	if m := cfg.Idempotency.Mode; m != settings.IdempotencyOff && cfg.Mode != settings.ModeOff {
		st.Idempotency = string(m)
	}
	if cfg.Mode == settings.ModeEnforce && cfg.Wait.MaxSeconds > 0 {
		st.Fairness = string(cfg.Fairness.By)
	}
	return st
}

// failedSnapshot is st with the store's error and nothing read.
func failedSnapshot(st status.Snapshot, err error) status.Snapshot {
	return status.Snapshot{Mode: st.Mode, EnforceFor: st.EnforceFor, Store: err.Error(), Lanes: st.Lanes}
}

// statusKey is one key read for the status: which lane of the policy and
// which entry of it (a task id, a tier, a user, a field value; "" for a
// shared lane).
type statusKey struct {
	lane int
	id   string
}

// readLanes counts every lane of cfg's policy in store into st. With
// scan, task lanes and lanes keyed by the caller or a call field are found
// by listing keys (only those with calls in flight or waiting are kept);
// without, a task lane holds this gateway's task and the others none.
func (g *Gate) readLanes(ctx context.Context, store LaneStore, k Keys, cfg settings.Config, st *status.Snapshot, scan bool) error {
	p := cfg.Policy()
	var keys []string
	var which []statusKey
	uncounted := map[int]int{} // lane index → the keys listed past maxStatusKeys
	add := func(lane int, id, key string) {
		keys = append(keys, key)
		which = append(which, statusKey{lane, id})
	}
	for i, l := range p.Lanes {
		name := LaneName(l.Name)
		switch {
		case l.Scope == policy.ScopeCluster:
			add(i, "", k.Lane(name, ""))
		case l.ByTier():
			for _, t := range p.Tiers() {
				add(i, t, k.Lane(name, t))
			}
		case l.Scope == policy.ScopeTask && !scan:
			add(i, k.TaskID, k.Lane(name, k.TaskID))
		case scan:
			prefix := k.Lane(name, "") + ":"
			found, err := store.Keys(ctx, prefix)
			if err != nil {
				return fmt.Errorf("list %s lanes: %w", l.Name, err)
			}
			if len(found) > maxStatusKeys {
				// A bounded read: counting every key of a lane keyed by
				// user could cost the store a count per user; the
				// snapshot says how many were left out.
				uncounted[i], found = len(found)-maxStatusKeys, found[:maxStatusKeys]
			}
			for _, key := range found {
				add(i, strings.TrimPrefix(key, prefix), key)
			}
		}
	}
	counts := make([]int, len(keys))
	if err := store.Count(ctx, keys, counts); err != nil {
		return fmt.Errorf("count lanes: %w", err)
	}
	waiting := make([]int, len(keys))
	if wl := capsOf(store).Waitlist; wl != nil {
		if err := wl.Waiting(ctx, k.prefix(), keys, waiting); err != nil {
			return fmt.Errorf("count waiting calls: %w", err)
		}
	}
	keyed := map[int]int{} // lane index → index in st.Keyed
	for i, l := range p.Lanes {
		if l.Scope == policy.ScopeCluster {
			lane := status.Lane{Limit: cfg.Limit(i, -1)}
			if l.Reserve != nil {
				b := max(lane.Limit-cfg.Reserve(i), 0)
				lane.BulkLimit = &b
				lane.Lend = min(cfg.Lend(i), lane.Limit-b) // of the reserve in effect
			}
			st.Shared = append(st.Shared, status.SharedLane{Name: l.Name, StatusKey: l.Status, Lane: lane})
			continue
		}
		keyed[i] = len(st.Keyed)
		st.Keyed = append(st.Keyed, status.KeyedLane{Name: l.Name, StatusKey: l.Status, Scope: l.Scope.String(),
			Key: l.Key, PerKeyLimit: l.Limit.PerTier == nil || l.ByTier(), Entries: map[string]status.Lane{}, Uncounted: uncounted[i]})
	}
	shared := 0
	for j, w := range which {
		l := p.Lanes[w.lane]
		c, wt := counts[j], waiting[j]
		if l.Scope == policy.ScopeCluster {
			st.Shared[shared].InFlight, st.Shared[shared].Waiting = c, wt
			shared++
			continue
		}
		kl := &st.Keyed[keyed[w.lane]]
		keep := l.ByTier() || (l.Scope == policy.ScopeTask && !scan) || c > 0 || wt > 0
		if !keep {
			continue
		}
		e := status.Lane{InFlight: c, Waiting: wt}
		if kl.PerKeyLimit {
			e.Limit = cfg.Limit(w.lane, p.TierIndex(w.id))
			if n, ok := cfg.KeyLimit(w.lane, w.id); ok {
				e.Limit = n
			}
		}
		kl.Entries[w.id] = e
	}
	// The key values with a limit of their own (key_limits) are shown
	// with no call in flight too, so staff see every limit in force.
	for i, l := range p.Lanes {
		if !l.ByField() || !scan {
			continue
		}
		kl := &st.Keyed[keyed[i]]
		for v, n := range cfg.KeyLimits(i) {
			if _, ok := kl.Entries[v]; !ok {
				kl.Entries[v] = status.Lane{Limit: n}
			}
		}
	}
	return nil
}

// pausedLanes returns the lanes cfg pauses (a limit of 0), in the policy's
// order: a lane with one limit, for every caller; a lane with a limit per
// tier, for each tier at 0; a lane whose limit less its reserve is 0, for
// every call but the reserve's class.
func pausedLanes(cfg settings.Config) []status.Paused {
	p := cfg.Policy()
	var out []status.Paused
	for i, l := range p.Lanes {
		var routes []string
		for _, r := range p.Routes {
			if l.Takes(r) {
				routes = append(routes, r.LogName)
			}
		}
		add := func(tier, except string) {
			out = append(out, status.Paused{Lane: l.Name, Tier: tier, Except: except, Routes: routes, OnlyIf: l.OnlyIf,
				Refuses: status.PausedRefuses(routes, l.OnlyIf, tier, except)})
		}
		if l.Limit.PerTier == nil {
			limit := cfg.Limit(i, -1)
			switch {
			case limit == 0:
				add("", "")
			case l.Reserve != nil && limit-cfg.Reserve(i) <= 0:
				add("", l.Reserve.Class)
			}
			continue
		}
		for t, tier := range p.Tiers() {
			if cfg.Limit(i, t) == 0 {
				add(tier, "")
			}
		}
	}
	return out
}

// maxStatusKeys bounds the keys of one lane Gate.Status counts (a lane
// keyed by user or by a call field, a task lane): past it, the first
// maxStatusKeys keys the store lists are counted, and the snapshot's
// KeyedLane.Uncounted says how many were not.
const maxStatusKeys = 1000

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
	if t == nil || a.cfg.Adaptive.Empty() || a.out.Counts == nil {
		return
	}
	us := max(service.Microseconds(), 1)
	units, byRoute := 1, false
	if r := a.out.Call.Route; r != nil && r.Units != "" {
		units, byRoute = r.UnitsOf(&a.out.Call.Fields), true
	}
	for i, l := range a.lanes {
		if !a.cfg.Adaptive.Lane(string(l.Name)).On() || i >= len(a.out.Counts) || l.Spec == nil || !l.Spec.Shared() {
			continue
		}
		u := units
		if !byRoute {
			u = l.seats() // a call of k seats is k seats' work
		}
		s := tune.Sample{Micros: us, Units: int64(u), InFlight: int64(a.out.Counts[i]), Full: a.full.has(i) || a.out.Queued}
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
