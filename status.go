package capgate

import (
	"context"
	"fmt"
	"strings"

	"github.com/capgate/capgate/status"
)

// Status reads the live state of the gate's lanes under cfg, as served by
// GET /capacity/status/ (README.md, The config): every lane's calls in
// flight, with the limits in force (the adaptive ones where they apply).
// Per-task and per-user lanes are found by listing keys and are reported
// only where calls are in flight. It knows nothing of the skip window:
// staff asking for the status want a live read. A store failure is
// reported in Store. A Gate built by hand needs only Store (and KeyPrefix
// if not the default) for it.
func (g *Gate) Status(ctx context.Context, cfg Config) status.Snapshot {
	inForce := g.tuner.apply(cfg)
	st := newSnapshot(g.Store, inForce)
	if err := readStatus(ctx, g.Store, g.keys(), inForce, &st); err != nil {
		return failedSnapshot(st, err)
	}
	st.Store = status.OK
	g.tuner.annotate(cfg, g.TaskID, g.now(), &st)
	st.Binding = status.BindingLane(st)
	return st
}

// ReadLanes is Status without listing keys: it reads the gate's fixed
// lanes (api_heavy, es2_knn, every tier) and its own task lane only, in one
// count and one waiting count, so it costs the store no scan. Tasks holds
// that one task, also when idle; Users is empty. The limits are cfg's. For
// metrics, read on every scrape.
func (g *Gate) ReadLanes(ctx context.Context, cfg Config) status.Snapshot {
	store, k := g.Store, g.keys()
	st := newSnapshot(store, cfg)
	counts, waiting, err := countStatus(ctx, store, k, cfg, &st, []string{k.Lane(LaneTask, k.TaskID)})
	if err != nil {
		return failedSnapshot(st, err)
	}
	st.Tasks = map[string]status.Lane{k.TaskID: {InFlight: counts[0], Limit: cfg.APIHeavy.PerTask, Waiting: waiting[0]}}
	st.Users = map[string]status.User{}
	st.Store = status.OK
	return st
}

// ReadLocalLanes is ReadLanes over the gate's local lanes (Gate.Local):
// the calls this gateway alone counts, which decide while the lane store
// is unavailable, with the degraded limits they then apply (the
// cluster-wide lanes divided among the gateways last seen). ok is false
// for a gate without local lanes. For the lane gauges during an outage.
func (g *Gate) ReadLocalLanes(ctx context.Context, cfg Config) (st status.Snapshot, ok bool) {
	if g.Local == nil {
		return status.Snapshot{}, false
	}
	k := g.keys()
	st = newSnapshot(g.Local, cfg)
	counts, waiting, err := countStatus(ctx, g.Local, k, cfg, &st, []string{k.Lane(LaneTask, k.TaskID)})
	if err != nil {
		return failedSnapshot(st, err), true
	}
	n := g.gatewaysSeen()
	cluster := func(limit int) int { return degradedLimit(Lane{Name: LaneAPIHeavy, Limit: limit}, n) }
	st.APIHeavy.Limit, st.APIHeavy.BulkLimit = cluster(st.APIHeavy.Limit), cluster(st.APIHeavy.BulkLimit)
	st.ES2KNN.Limit = cluster(st.ES2KNN.Limit)
	for t, l := range st.Tiers {
		l.Limit = cluster(l.Limit)
		st.Tiers[t] = l
	}
	st.Tasks = map[string]status.Lane{k.TaskID: {InFlight: counts[0], Limit: cfg.APIHeavy.PerTask, Waiting: waiting[0]}}
	st.Users = map[string]status.User{}
	st.Store = status.OK
	return st, true
}

func newSnapshot(store LaneStore, cfg Config) status.Snapshot {
	st := status.Snapshot{Mode: string(cfg.Mode), EnforceFor: string(cfg.EnforceFor), Lanes: laneStoreKind(store)}
	if m := cfg.Idempotency.Mode; m != IdempotencyOff && cfg.Mode != ModeOff {
		st.Idempotency = string(m)
	}
	return st
}

// failedSnapshot is st with the store's error and nothing read.
func failedSnapshot(st status.Snapshot, err error) status.Snapshot {
	return status.Snapshot{Mode: st.Mode, EnforceFor: st.EnforceFor, Store: err.Error(), Lanes: st.Lanes}
}

func readStatus(ctx context.Context, store LaneStore, k Keys, cfg Config, st *status.Snapshot) error {
	tasks, err := store.Keys(ctx, k.Lane(LaneTask, "")+":")
	if err != nil {
		return fmt.Errorf("list task lanes: %w", err)
	}
	users, err := store.Keys(ctx, k.Lane(LaneUser, "")+":")
	if err != nil {
		return fmt.Errorf("list user lanes: %w", err)
	}
	counts, waiting, err := countStatus(ctx, store, k, cfg, st, append(tasks, users...))
	if err != nil {
		return err
	}
	taskPrefix := k.Lane(LaneTask, "") + ":"
	st.Tasks = map[string]status.Lane{}
	for i, key := range tasks {
		if c, w := counts[i], waiting[i]; c > 0 || w > 0 {
			st.Tasks[strings.TrimPrefix(key, taskPrefix)] = status.Lane{InFlight: c, Limit: cfg.APIHeavy.PerTask, Waiting: w}
		}
	}
	n := len(tasks)
	userPrefix := k.Lane(LaneUser, "") + ":"
	st.Users = map[string]status.User{}
	for i, key := range users {
		if c, w := counts[n+i], waiting[n+i]; c > 0 || w > 0 {
			st.Users[strings.TrimPrefix(key, userPrefix)] = status.User{InFlight: c, Waiting: w}
		}
	}
	return nil
}

// countStatus counts the fixed lanes into st, and the lanes of extra (keys)
// into counts and waiting, in extra's order.
func countStatus(ctx context.Context, store LaneStore, k Keys, cfg Config, st *status.Snapshot, extra []string) (counts, waiting []int, err error) {
	tiers := AllTiers()
	keys := make([]string, 0, 2+len(tiers)+len(extra))
	keys = append(keys, k.Lane(LaneAPIHeavy, ""), k.Lane(LaneES2KNN, ""))
	for _, t := range tiers {
		keys = append(keys, k.Lane(LaneTier, string(t)))
	}
	keys = append(keys, extra...)
	counts = make([]int, len(keys))
	if err := store.Count(ctx, keys, counts); err != nil {
		return nil, nil, fmt.Errorf("count lanes: %w", err)
	}
	waiting = make([]int, len(keys))
	if wl, ok := store.(Waitlist); ok {
		if err := wl.Waiting(ctx, k.prefix(), keys, waiting); err != nil {
			return nil, nil, fmt.Errorf("count waiting calls: %w", err)
		}
	}
	st.APIHeavy = &status.APIHeavy{InFlight: counts[0], Limit: cfg.APIHeavy.Cluster, BulkLimit: cfg.bulkLimit(), Waiting: waiting[0]}
	st.ES2KNN = &status.Lane{InFlight: counts[1], Limit: cfg.ES2KNN, Waiting: waiting[1]}
	st.Tiers = make(map[string]status.Lane, len(tiers))
	for i, t := range tiers {
		st.Tiers[string(t)] = status.Lane{InFlight: counts[2+i], Limit: cfg.Tiers.of(t), Waiting: waiting[2+i]}
	}
	n := 2 + len(tiers)
	return counts[n:], waiting[n:], nil
}
