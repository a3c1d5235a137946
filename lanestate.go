package capgate

import (
	"context"
	"fmt"
	"strings"

	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
	"github.com/capgate/capgate/status"
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
