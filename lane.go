package capgate

import "sync/atomic"

// LaneName names a kind of lane.
type LaneName string

// The lanes, in the order they are always evaluated and reported.
const (
	LaneAPIHeavy LaneName = "api_heavy"      // the whole cluster
	LaneTask     LaneName = "api_heavy_task" // one API task (host)
	LaneES2KNN   LaneName = "es2_knn"        // the shared kNN backend; semantic calls only
	LaneTier     LaneName = "tier"           // the caller's tier
	LaneUser     LaneName = "user"           // the caller
)

// Lane is one scope a call counts in: its store key and the limit that
// applies to this call. A limit of 0 means the lane is paused.
type Lane struct {
	Name  LaneName
	Key   string
	Limit int
}

// Keys builds lane keys: <prefix>:<lane>[:<id>].
type Keys struct {
	Prefix string // DefaultKeyPrefix when empty
	TaskID string // this API task's id

	// cache keeps the keys that are the same for every call (all but the
	// user's); a Gate's Keys have one, so a call builds one key, not five.
	// nil: Plan builds them all.
	cache *keyCache
}

// keyCache holds the constant keys of one Prefix and TaskID, made on first
// use. Safe for concurrent use.
type keyCache struct {
	p atomic.Pointer[constKeys]
}

// constKeys are the keys of a plan that do not depend on the caller.
type constKeys struct {
	prefix, taskID   string // what they were made for
	heavy, task, knn string
	tiers            [len(knownTiers)]string // by index in knownTiers
}

// knownTiers are the tiers whose lane keys are kept.
var knownTiers = [...]Tier{TierStaff, TierCore, TierEarlyAccess, TierPreview}

// constKeys returns the cached constant keys, made now if the cache has
// none for k's prefix and task; nil without a cache.
func (k Keys) constKeys() *constKeys {
	if k.cache == nil {
		return nil
	}
	if c := k.cache.p.Load(); c != nil && c.prefix == k.Prefix && c.taskID == k.TaskID {
		return c
	}
	c := &constKeys{prefix: k.Prefix, taskID: k.TaskID,
		heavy: k.Lane(LaneAPIHeavy, ""), task: k.Lane(LaneTask, k.TaskID), knn: k.Lane(LaneES2KNN, "")}
	for i, t := range knownTiers {
		c.tiers[i] = k.Lane(LaneTier, string(t))
	}
	k.cache.p.Store(c)
	return c
}

// tierKey returns the tier lane's key of t.
func (c *constKeys) tierKey(k Keys, t Tier) string {
	for i, known := range knownTiers {
		if t == known && c.tiers[i] != "" {
			return c.tiers[i]
		}
	}
	return k.Lane(LaneTier, string(t))
}

func (k Keys) prefix() string {
	if k.Prefix == "" {
		return DefaultKeyPrefix
	}
	return k.Prefix
}

// Lane returns the key of lane name with id (empty for the cluster-wide
// lanes).
func (k Keys) Lane(name LaneName, id string) string {
	if id == "" {
		return k.prefix() + ":" + string(name)
	}
	return k.prefix() + ":" + string(name) + ":" + id
}

// planLanes is the most lanes a call is planned in: api_heavy, task,
// es2_knn, tier and user.
const planLanes = 5

// AppendPlan appends the lanes of call under cfg to lanes, in lane order:
// api_heavy (the cluster limit for a single-row $match, else the bulk
// limit), the task lane, es2_knn for semantic calls, the tier lane and the
// user lane. Appending lets a hot path reuse a buffer (the gate's is in
// the Admission).
func (k Keys) AppendPlan(lanes []Lane, cfg Config, call Call) []Lane {
	limit := cfg.bulkLimit()
	if call.SingleRow() {
		limit = cfg.APIHeavy.Cluster
	}
	c := k.constKeys()
	if c == nil {
		c = &constKeys{heavy: k.Lane(LaneAPIHeavy, ""), task: k.Lane(LaneTask, k.TaskID)}
		if call.Semantic {
			c.knn = k.Lane(LaneES2KNN, "")
		}
	}
	lanes = append(lanes,
		Lane{LaneAPIHeavy, c.heavy, limit},
		Lane{LaneTask, c.task, cfg.APIHeavy.PerTask},
	)
	if call.Semantic {
		lanes = append(lanes, Lane{LaneES2KNN, c.knn, cfg.ES2KNN})
	}
	return append(lanes,
		Lane{LaneTier, c.tierKey(k, call.Tier), cfg.Tiers.of(call.Tier)},
		Lane{LaneUser, k.Lane(LaneUser, call.UserID), cfg.PerUser.of(call.Tier)},
	)
}
