package capgate

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
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

// laneStoreKind names where a gate's lanes live, for status: "memory"
// (this process only), "redis", "redis-sentinel", "redis-cluster"; a
// store that declares no Kind (StoreCaps) is "unknown".
func laneStoreKind(s LaneStore) string {
	if k := capsOf(s).Kind; k != "" {
		return k
	}
	return "unknown"
}

// plan is a call laid out over the config in force, before anything is
// asked of a store: the lanes that take it (each one's key, limit, seats,
// what it may borrow, its class key) and the store request's keys and
// limits. Making it (Keys.plan) is pure: no I/O, no clock. The Admission
// holds its plan; the local lanes' degraded limits and a lending lane's
// borrowed seats change its lanes' limits later.
type plan struct {
	lanes []Lane
	keys  []string // the lanes' keys, then the class key of each lane where the call also counts in its class's seats

	// Backing arrays of lanes, keys, the limits and the counts, so that
	// a call of up to laneBufLen lanes allocates none of them apart.
	laneBuf [laneBufLen]Lane
	keyBuf  [laneBufLen]string
	intBuf  [2 * laneBufLen]int
	seatBuf [laneBufLen]int
}

// plan lays call out over cfg into p: the lanes of cfg's policy that take
// it, their keys and limits (Keys.AppendPlan), and the store request. It
// fails for a call the policy in force can't place (its route replaced,
// an unknown tier, no user, no lane): the gate then lets it go unavailable.
func (k Keys) plan(p *plan, cfg settings.Config, call *Call) error {
	pol := cfg.Policy()
	if r := call.Route; r == nil || r.Index() >= len(pol.Routes) || pol.Routes[r.Index()] != r {
		return errors.New("the call's route is not one of the policy in force (the policy was replaced)")
	}
	tier := pol.TierIndex(call.Tier)
	if tier < 0 {
		return fmt.Errorf("unknown tier %q", call.Tier)
	}
	if call.UserID == "" {
		return errors.New("no user id")
	}
	p.lanes = k.AppendPlan(p.laneBuf[:0], cfg, call, tier)
	if len(p.lanes) == 0 {
		return errors.New("no lane of the policy takes the call")
	}
	if k.TaskID == "" && slices.ContainsFunc(p.lanes, isTaskLane) {
		// A gate built by hand without one (NewGate refuses it): every
		// such gate would share one task lane, a per-task limit acting
		// cluster-wide.
		return errors.New("the gate has no task id: its task lane would be every task's")
	}
	return nil
}

// seats returns the seats the call takes in each of p.keys, for the
// store's requests: nil when it takes one in each (every call of most
// policies), so a one-seat call's requests are what they were before
// seats. A class key takes the seats of its lane.
func (p *plan) seats() []int {
	one := true
	for _, l := range p.lanes {
		one = one && l.seats() == 1
	}
	if one {
		return nil
	}
	s := p.seatBuf[:0]
	for _, l := range p.lanes {
		s = append(s, l.seats())
	}
	for _, l := range p.lanes {
		if l.ClassKey != "" {
			s = append(s, l.seats())
		}
	}
	return s
}

// borrow returns what the call may borrow in each of p.keys, for the
// store's requests: nil when no lane lends it anything (as always when no
// lane's lending is on).
func (p *plan) borrow() []Borrow {
	var out []Borrow
	for i, l := range p.lanes {
		if l.Borrow.Key == "" {
			continue
		}
		if out == nil {
			out = make([]Borrow, len(p.keys))
		}
		out[i] = l.Borrow
	}
	return out
}

// classLimit is a class key's limit in the store's requests: never full,
// since it only counts the class's seats (its lane has the limit).
const classLimit = settings.MaxNumber + 1

// planRequest lays out the store request of p's lanes: p.keys (the lanes'
// keys, then the class key of each lane where the call also counts in
// its class's seats), their limits, and the buffer of the counts before
// the call (the keys', then those of the lanes' Borrow keys).
func (p *plan) planRequest() (limits, before []int) {
	n, nk, nb := len(p.lanes), len(p.lanes), 0
	for _, l := range p.lanes {
		if l.ClassKey != "" {
			nk++
		}
		if l.Borrow.Key != "" {
			nb++
		}
	}
	keys, ints := p.keyBuf[:], p.intBuf[:]
	if nk > len(keys) || 2*nk+nb > len(ints) {
		keys, ints = make([]string, nk), make([]int, 2*nk+nb)
	}
	p.keys = keys[:nk:nk]
	limits, before = ints[:nk:nk], ints[nk:2*nk+nb:2*nk+nb]
	j := n
	for i, l := range p.lanes {
		p.keys[i], limits[i] = l.Key, l.Limit
		if l.ClassKey != "" {
			p.keys[j], limits[j] = l.ClassKey, classLimit
			j++
		}
	}
	return limits, before
}

// lend raises the limit of each lane of lanes that lends the call seats
// by the seats the store lent (Borrow.Borrowable of the class's count,
// which the store reported in counts after the nk keys' counts) and
// returns the lanes' own counts (counts[:len(lanes)]).
func lend(lanes []Lane, counts []int, nk int) []int {
	j := nk
	for i := range lanes {
		if b := lanes[i].Borrow; b.Key != "" {
			lanes[i].Limit = satAdd(lanes[i].Limit, b.Borrowable(counts[j]))
			j++
		}
	}
	return counts[:len(lanes)]
}
