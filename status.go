package capgate

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

// Status is the live state of the lanes, as served by GET /capacity/status/
// (README.md, The config). When the lane store fails, only Mode, EnforceFor, Store and
// Lanes are set, Store holding the error.
type Status struct {
	Mode       Mode                  `json:"mode"`
	EnforceFor EnforceFor            `json:"enforce_for"`
	Store      string                `json:"redis"` // StatusOK, or the lane store's error; "redis" on the wire, whatever the store
	Lanes      string                `json:"lanes"` // where the lanes live (laneStoreKind): memory, redis, redis-sentinel
	APIHeavy   *APIHeavyStatus       `json:"api_heavy,omitempty"`
	ES2KNN     *LaneStatus           `json:"es2_knn,omitempty"`
	Tasks      map[string]LaneStatus `json:"-"`
	Tiers      map[Tier]LaneStatus   `json:"-"`
	Users      map[string]UserStatus `json:"-"`
}

// APIHeavyStatus is the cluster lane: its limit and the bulk limit.
type APIHeavyStatus struct {
	InFlight  int `json:"in_flight"`
	Limit     int `json:"limit"`
	BulkLimit int `json:"bulk_limit"`
	Waiting   int `json:"waiting,omitempty"` // calls waiting for this lane
	// Advised and LimitSource are set for an adaptive lane (tuner.go):
	// the limit the control loop advises, and where Limit comes from
	// (LimitStatic or LimitAdaptive).
	Advised     int    `json:"advised,omitempty"`
	LimitSource string `json:"limit_source,omitempty"`
}

// LaneStatus is one lane's calls in flight and its limit.
type LaneStatus struct {
	InFlight int `json:"in_flight"`
	Limit    int `json:"limit"`
	Waiting  int `json:"waiting,omitempty"` // calls waiting for this lane
	// As in APIHeavyStatus, for an adaptive lane.
	Advised     int    `json:"advised,omitempty"`
	LimitSource string `json:"limit_source,omitempty"`
}

// UserStatus is one user's calls in flight.
type UserStatus struct {
	InFlight int `json:"in_flight"`
	Waiting  int `json:"waiting,omitempty"` // calls waiting for a slot
}

// MarshalJSON writes the full status when the store answered, and only
// mode, enforce_for and the error when it did not.
func (s Status) MarshalJSON() ([]byte, error) {
	if s.Store != StatusOK {
		return json.Marshal(struct {
			Mode       Mode       `json:"mode"`
			EnforceFor EnforceFor `json:"enforce_for"`
			Redis      string     `json:"redis"`
			Lanes      string     `json:"lanes"`
		}{s.Mode, s.EnforceFor, s.Store, s.Lanes})
	}
	type full Status // without this method
	f := full(s)
	if f.Tasks == nil {
		f.Tasks = map[string]LaneStatus{}
	}
	if f.Users == nil {
		f.Users = map[string]UserStatus{}
	}
	if f.Tiers == nil {
		f.Tiers = map[Tier]LaneStatus{}
	}
	return json.Marshal(struct {
		full
		Tasks map[string]LaneStatus `json:"tasks"`
		Tiers map[Tier]LaneStatus   `json:"tiers"`
		Users map[string]UserStatus `json:"users"`
	}{f, f.Tasks, f.Tiers, f.Users})
}

// StatusOK is Status.Store when the lane store answered.
const StatusOK = "ok"

// ReadStatus reads every lane's calls in flight in store, under the lane
// keys of keys and cfg's limits. Per-task and per-user lanes are found by
// listing keys and are reported only where calls are in flight. It knows
// nothing of a gate's skip window: staff asking for the status want a
// live read. A store failure is reported in Store.
func ReadStatus(ctx context.Context, store LaneStore, keys Keys, cfg Config) Status {
	st := Status{Mode: cfg.Mode, EnforceFor: cfg.EnforceFor, Lanes: laneStoreKind(store)}
	if err := readStatus(ctx, store, keys, cfg, &st); err != nil {
		return Status{Mode: cfg.Mode, EnforceFor: cfg.EnforceFor, Store: err.Error(), Lanes: st.Lanes}
	}
	st.Store = StatusOK
	return st
}

// Status reads the live state of the gate's lanes under cfg (ReadStatus
// over the gate's store and keys).
func (g *Gate) Status(ctx context.Context, cfg Config) Status {
	st := ReadStatus(ctx, g.Store, g.keys(), g.tuner.apply(cfg))
	g.tuner.annotate(cfg, g.TaskID, &st)
	return st
}

// readLanes is ReadStatus without listing keys: it reads the fixed lanes
// (api_heavy, es2_knn, every tier) and the task lane of keys.TaskID only,
// in one count and one waiting count, so it costs the store no scan. Tasks
// holds that one task, also when idle; Users is empty. For metrics, read
// on every scrape.
func readLanes(ctx context.Context, store LaneStore, keys Keys, cfg Config) Status {
	st := Status{Mode: cfg.Mode, EnforceFor: cfg.EnforceFor, Lanes: laneStoreKind(store)}
	counts, waiting, err := countStatus(ctx, store, keys, cfg, &st, []string{keys.Lane(LaneTask, keys.TaskID)})
	if err != nil {
		return Status{Mode: cfg.Mode, EnforceFor: cfg.EnforceFor, Store: err.Error(), Lanes: st.Lanes}
	}
	st.Tasks = map[string]LaneStatus{keys.TaskID: {InFlight: counts[0], Limit: cfg.APIHeavy.PerTask, Waiting: waiting[0]}}
	st.Users = map[string]UserStatus{}
	st.Store = StatusOK
	return st
}

// ReadLanes is ReadStatus without listing keys: it reads the gate's fixed
// lanes (api_heavy, es2_knn, every tier) and its own task lane only, in one
// count and one waiting count, so it costs the store no scan. Tasks holds
// that one task, also when idle; Users is empty. For metrics, read on every
// scrape.
func (g *Gate) ReadLanes(ctx context.Context, cfg Config) Status {
	return readLanes(ctx, g.Store, g.keys(), cfg)
}

func readStatus(ctx context.Context, store LaneStore, k Keys, cfg Config, st *Status) error {
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
	st.Tasks = map[string]LaneStatus{}
	for i, key := range tasks {
		if c, w := counts[i], waiting[i]; c > 0 || w > 0 {
			st.Tasks[strings.TrimPrefix(key, taskPrefix)] = LaneStatus{InFlight: c, Limit: cfg.APIHeavy.PerTask, Waiting: w}
		}
	}
	n := len(tasks)
	userPrefix := k.Lane(LaneUser, "") + ":"
	st.Users = map[string]UserStatus{}
	for i, key := range users {
		if c, w := counts[n+i], waiting[n+i]; c > 0 || w > 0 {
			st.Users[strings.TrimPrefix(key, userPrefix)] = UserStatus{InFlight: c, Waiting: w}
		}
	}
	return nil
}

// countStatus counts the fixed lanes into st, and the lanes of extra (keys)
// into counts and waiting, in extra's order.
func countStatus(ctx context.Context, store LaneStore, k Keys, cfg Config, st *Status, extra []string) (counts, waiting []int, err error) {
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
	st.APIHeavy = &APIHeavyStatus{InFlight: counts[0], Limit: cfg.APIHeavy.Cluster, BulkLimit: cfg.BulkLimit(), Waiting: waiting[0]}
	st.ES2KNN = &LaneStatus{InFlight: counts[1], Limit: cfg.ES2KNN, Waiting: waiting[1]}
	st.Tiers = make(map[Tier]LaneStatus, len(tiers))
	for i, t := range tiers {
		st.Tiers[t] = LaneStatus{InFlight: counts[2+i], Limit: cfg.Tiers.Of(t), Waiting: waiting[2+i]}
	}
	n := 2 + len(tiers)
	return counts[n:], waiting[n:], nil
}
