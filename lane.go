package capgate

import (
	"hash/fnv"
	"math"
	"strconv"
	"sync/atomic"

	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
)

// LaneName names a lane: the name its policy gives it.
type LaneName string

// Lane is one count a call takes a place in: its store key and the limit
// that applies to this call. A limit of 0 means the lane is paused.
type Lane struct {
	Name  LaneName
	Key   string
	Limit int
	// Seats is what the call takes of the lane: its route's cost there
	// (policy.Route.SeatsIn), at least 1 and at most the lane's limit, so a
	// big call runs alone rather than never.
	Seats int
	// Spec is the policy's lane: its scope and key say what one count
	// covers (the degraded limits, the user lane of the fair wait and the
	// suggested concurrency go by it). nil for a lane built by hand.
	Spec *policy.Lane
	// ClassKey and Borrow are set while the lane lends seats of its
	// reserve (the config's lending): a call of the reserve's class also
	// takes its seats in ClassKey, the class's own count in the lane; any
	// other call may borrow the reserve's idle seats (Borrow, whose Key is
	// that count). Both empty when the lane lends nothing.
	ClassKey string
	Borrow   Borrow
}

// Keys builds lane keys: <prefix>:<lane>[:<id>].
type Keys struct {
	Prefix string // policy.DefaultKeyPrefix when empty
	TaskID string // this API task's id

	// cache keeps the keys that are the same for every call (all but the
	// user's and a call field's); a Gate's Keys have one, so a call builds
	// one key or two, not one per lane. nil: Plan builds them all.
	cache *keyCache
}

// keyCache holds the constant keys of one Prefix, TaskID and policy, made
// on first use. Safe for concurrent use.
type keyCache struct {
	p atomic.Pointer[constKeys]
}

// constKeys are the keys of a plan that do not depend on the caller: per
// lane of the policy, its key (a cluster or task lane) or, for a tier lane,
// one key per tier.
type constKeys struct {
	prefix, taskID string // what they were made for
	policy         *policy.Policy
	lanes          []string   // by lane index; "" for a keyed lane
	tiers          [][]string // by lane index, then tier index; nil but for a tier lane
}

// constKeys returns the cached constant keys of p, made now if the cache
// has none for k's prefix, task and p; nil without a cache.
func (k Keys) constKeys(p *policy.Policy) *constKeys {
	if k.cache == nil {
		return nil
	}
	if c := k.cache.p.Load(); c != nil && c.prefix == k.Prefix && c.taskID == k.TaskID && c.policy == p {
		return c
	}
	c := &constKeys{prefix: k.Prefix, taskID: k.TaskID, policy: p,
		lanes: make([]string, len(p.Lanes)), tiers: make([][]string, len(p.Lanes))}
	for i, l := range p.Lanes {
		switch {
		case l.Scope == policy.ScopeCluster:
			c.lanes[i] = k.Lane(LaneName(l.Name), "")
		case l.Scope == policy.ScopeTask:
			c.lanes[i] = k.Lane(LaneName(l.Name), k.TaskID)
		case l.ByTier():
			for _, t := range p.Tiers() {
				c.tiers[i] = append(c.tiers[i], k.Lane(LaneName(l.Name), t))
			}
		}
	}
	k.cache.p.Store(c)
	return c
}

func (k Keys) prefix() string {
	if k.Prefix == "" {
		return policy.DefaultKeyPrefix
	}
	return k.Prefix
}

// Lane returns the key of lane name with id (empty for a cluster lane).
func (k Keys) Lane(name LaneName, id string) string {
	if id == "" {
		return k.prefix() + ":" + string(name)
	}
	return k.prefix() + ":" + string(name) + ":" + id
}

// maxKeyValue bounds the part of a lane key that comes from a call field
// (a model, a tenant): a longer value is cut and its hash appended, so
// keys stay short and distinct values stay distinct.
const maxKeyValue = 128

// emptyKeyValue is the key part of a call whose field is empty: counted in
// a lane of its own, never passed uncounted.
const emptyKeyValue = "(none)"

// fieldKey returns the key part of a call field's value v.
func fieldKey(v string) string {
	if v == "" {
		return emptyKeyValue
	}
	if len(v) <= maxKeyValue {
		return v
	}
	h := fnv.New64a()
	h.Write([]byte(v))
	return v[:maxKeyValue-17] + "~" + strconv.FormatUint(h.Sum64(), 16)
}

// maxPlanLanes is the most lanes a call is planned in: a policy's lanes.
const maxPlanLanes = policy.MaxLanes

// laneBufLen is how many lanes an Admission holds without allocating;
// a call of more lanes allocates its plan apart.
const laneBufLen = 6

// AppendPlan appends the lanes of call under cfg (the lanes of cfg's
// policy that take the call's route, in the policy's order) to lanes: the
// key of each (a cluster lane's, this task's, or the key the call's user,
// tier or field names) and the limit that applies to this call (the
// lane's, its tier's, or its key value's: the config's key_limits; minus
// the lane's reserve unless the call is of the reserve's class), and the
// seats the call takes there (its route's cost, capped at that limit). Appending lets a hot path reuse a buffer (the
// gate's is in the Admission). The call's route must be of cfg's policy
// and its tier one of the policy's (tier, its index).
func (k Keys) AppendPlan(lanes []Lane, cfg settings.Config, call *Call, tier int) []Lane {
	p := cfg.Policy()
	c := k.constKeys(p)
	for i, l := range p.Lanes {
		if !l.TakesCall(call.Route, &call.Fields) {
			continue
		}
		full := cfg.Limit(i, tier)
		key := k.laneKey(c, i, l, call, tier)
		if l.ByField() {
			// A key value with a limit of its own (the config's
			// key_limits): the value is what follows "<prefix>:<lane>:".
			if n, ok := cfg.KeyLimit(i, key[len(k.prefix())+len(l.Name)+2:]); ok {
				full = n
			}
		}
		lane := Lane{Name: LaneName(l.Name), Key: key, Limit: full, Spec: l}
		lend := 0
		if l.Reserve != nil {
			cls := p.Class(l.Reserve.Class)
			of := cls != nil && cls.Has(call.Route, &call.Fields)
			if !of {
				lane.Limit = max(full-cfg.Reserve(i), 0)
			}
			// The reserve in effect: no more than the limit (a paused
			// lane lends nothing).
			if reserve := full - max(full-cfg.Reserve(i), 0); reserve > 0 && cfg.Lend(i) > 0 {
				key := k.classKey(lane.Key, l.Name, l.Reserve.Class)
				if of {
					lane.ClassKey = key
				} else {
					lend = min(cfg.Lend(i), reserve)
					lane.Borrow = Borrow{Key: key, Reserve: reserve, Lend: lend}
				}
			}
		}
		lane.Seats = 1
		if len(call.Route.Seats) > 0 {
			// At most what the call could ever hold there (borrowing all
			// it may), so a big call runs alone rather than never, and at
			// most what a store takes (MaxSeats).
			lane.Seats = max(1, min(call.Route.SeatsIn(l.Name, &call.Fields), satAdd(lane.Limit, lend), MaxSeats))
		}
		lanes = append(lanes, lane)
	}
	return lanes
}

// satAdd returns a + b for b ≥ 0, saturating at math.MaxInt: a limit
// plus what a lane lends is no limit past MaxInt, never a wrapped one.
func satAdd(a, b int) int {
	if a > math.MaxInt-b {
		return math.MaxInt
	}
	return a + b
}

// classKey returns the class key of the lane whose key is laneKey: where
// the calls of class hold their seats in it, <prefix>:<lane>~<class>[:<id>].
// A lane name has no "~", so no lane's key, nor the prefix of a lane's
// keys that the status and the gateway count list, is ever one.
func (k Keys) classKey(laneKey, lane, class string) string {
	head := k.prefix() + ":" + lane
	return head + "~" + class + laneKey[len(head):]
}

// laneKey returns the key of lane l (index i) for call.
func (k Keys) laneKey(c *constKeys, i int, l *policy.Lane, call *Call, tier int) string {
	switch {
	case l.Scope == policy.ScopeCluster:
		if c != nil {
			return c.lanes[i]
		}
		return k.Lane(LaneName(l.Name), "")
	case l.Scope == policy.ScopeTask:
		if c != nil {
			return c.lanes[i]
		}
		return k.Lane(LaneName(l.Name), k.TaskID)
	case l.ByUser():
		return k.Lane(LaneName(l.Name), call.UserID)
	case l.ByTier():
		if c != nil && tier >= 0 && tier < len(c.tiers[i]) {
			return c.tiers[i][tier]
		}
		return k.Lane(LaneName(l.Name), call.Tier)
	}
	v, _ := call.Fields.ByName(l.Key)
	return k.Lane(LaneName(l.Name), fieldKey(v))
}
