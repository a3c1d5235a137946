package capgate

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

// Plan returns the lanes of call under cfg, in lane order: api_heavy (the
// cluster limit for a single-row $match, else the bulk limit), the task
// lane, es2_knn for semantic calls, the tier lane and the user lane.
func (k Keys) Plan(cfg Config, call Call) []Lane {
	return k.AppendPlan(make([]Lane, 0, 5), cfg, call)
}

// AppendPlan is Plan appending to lanes, so a hot path can reuse a buffer.
func (k Keys) AppendPlan(lanes []Lane, cfg Config, call Call) []Lane {
	limit := cfg.BulkLimit()
	if call.SingleRow() {
		limit = cfg.APIHeavy.Cluster
	}
	lanes = append(lanes,
		Lane{LaneAPIHeavy, k.Lane(LaneAPIHeavy, ""), limit},
		Lane{LaneTask, k.Lane(LaneTask, k.TaskID), cfg.APIHeavy.PerTask},
	)
	if call.Semantic {
		lanes = append(lanes, Lane{LaneES2KNN, k.Lane(LaneES2KNN, ""), cfg.ES2KNN})
	}
	return append(lanes,
		Lane{LaneTier, k.Lane(LaneTier, string(call.Tier)), cfg.Tiers.Of(call.Tier)},
		Lane{LaneUser, k.Lane(LaneUser, call.UserID), cfg.PerUser.Of(call.Tier)},
	)
}
