package analyze

import (
	"cmp"
	"slices"
	"strconv"
	"strings"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/policy"
)

// layout is what a policy says of its log lines and of the calls they
// describe: the event name, the key of the route's name, the fields and
// classes a line carries, the lanes (in plan order) under their log keys,
// and the tiers in order. Analyze reads every line through one layout.
type layout struct {
	p        *policy.Policy
	event    string
	routeKey string
	lanes    []*policy.Lane // at most policy.MaxLanes, in the policy's order
	laneIdx  map[string]int
	fields   []policy.FieldInfo // the fields a line carries (policy.Policy.Fields)
	keys     map[string]lineKey // the line keys the policy names
	routes   map[string]*policy.Route
	// routeFields maps, per route index, each field of the route to its
	// index in fields.
	routeFields [][]int
	// laneField is, per lane, the index in fields of the field a
	// field-keyed lane counts by; -1 for the other lanes.
	laneField []int
	// userLane is the lane counted per caller whose peaks the report lists
	// by user (policy.Policy.UserLane); -1 when the policy has none.
	userLane int
	tiers    map[string]int // tier → its rank (policy.Policy.Tiers order)
}

// lineKey says what a key of a line the policy names holds.
type lineKey struct {
	kind keyKind
	i    int // the index of the field, class or lane
}

type keyKind uint8

const (
	keyRoute    keyKind = iota + 1 // the route's log name
	keyField                       // a field of the call
	keyClass                       // whether the call is of a class
	keyInFlight                    // a lane's count
	keyLimit                       // a lane's limit
)

// laneSet is a set of lane indexes (bit i: lane i).
type laneSet uint16

// A laneSet has a bit for every lane a policy may have.
const _ = laneSet(1 << (policy.MaxLanes - 1))

func (s laneSet) has(i int) bool { return s&(1<<i) != 0 }

// newLayout returns the layout of p; nil is the built-in OCL policy.
func newLayout(p *policy.Policy) *layout {
	if p == nil {
		p = policy.OCL()
	}
	l := &layout{
		p:        p,
		event:    p.Names.LogEvent,
		routeKey: p.Names.LogRouteKey,
		lanes:    p.Lanes[:min(len(p.Lanes), policy.MaxLanes)],
		laneIdx:  map[string]int{},
		fields:   p.Fields(),
		keys:     map[string]lineKey{},
		routes:   map[string]*policy.Route{},
		userLane: p.UserLane(),
		tiers:    map[string]int{},
	}
	if l.routeKey == "" {
		l.routeKey = policy.DefaultLogRouteKey
	}
	l.keys[l.routeKey] = lineKey{kind: keyRoute}
	for i, f := range l.fields {
		l.keys[f.Name] = lineKey{keyField, i}
	}
	for i, c := range p.Classes {
		l.keys[c.Name] = lineKey{keyClass, i}
	}
	for i, ln := range l.lanes {
		l.laneIdx[ln.Name] = i
		if ln.Log.InFlight != "" {
			l.keys[ln.Log.InFlight] = lineKey{keyInFlight, i}
		}
		if ln.Log.Limit != "" {
			l.keys[ln.Log.Limit] = lineKey{keyLimit, i}
		}
		fi := -1
		if ln.ByField() {
			fi = l.fieldIndex(ln.Key)
		}
		l.laneField = append(l.laneField, fi)
	}
	if l.userLane >= len(l.lanes) {
		l.userLane = -1
	}
	l.routeFields = make([][]int, len(p.Routes))
	for _, r := range p.Routes {
		l.routes[r.LogName] = r
		idx := make([]int, len(r.Fields))
		for j, f := range r.Fields {
			idx[j] = l.fieldIndex(f.Name)
		}
		l.routeFields[r.Index()] = idx
	}
	for i, t := range p.Tiers() {
		l.tiers[t] = i
	}
	return l
}

func (l *layout) fieldIndex(name string) int {
	for i, f := range l.fields {
		if f.Name == name {
			return i
		}
	}
	return -1
}

// laneIndex returns the index of the lane named name, or -1.
func (l *layout) laneIndex(name string) int {
	if i, ok := l.laneIdx[name]; ok {
		return i
	}
	return -1
}

// isUserLane reports whether lane i is the one whose peaks are kept per
// user, within MaxUsers.
func (l *layout) isUserLane(i int) bool { return i == l.userLane }

// emptyKey is the id of a field-keyed lane for a call whose field is
// empty: the gate counts such calls in a lane of their own, "(none)".
const emptyKey = "(none)"

// laneID returns the id of lane i of ev's call: its task, tier, user or
// field value; "" for a cluster lane.
func (l *layout) laneID(ev *event, i int) string {
	ln := l.lanes[i]
	switch {
	case ln.Scope == policy.ScopeTask:
		return ev.task
	case ln.ByTier():
		return ev.tier
	case ln.ByUser():
		return ev.user
	case ln.ByField():
		if id := l.fieldText(ev, l.laneField[i]); id != "" {
			return id
		}
		return emptyKey
	}
	return ""
}

// fieldText returns field fi of ev as text, as policy.Fields.String does.
func (l *layout) fieldText(ev *event, fi int) string {
	if fi < 0 || fi >= len(ev.vals) {
		return ""
	}
	v := ev.vals[fi]
	switch l.fields[fi].Type {
	case policy.TypeBool:
		return strconv.FormatBool(v.b)
	case policy.TypeInt:
		return strconv.Itoa(v.n)
	}
	return v.s
}

// callOf sets c to ev's call as the gate planned it: its route and the
// fields its line recorded, its user and tier. A line of a route the
// policy lacks gets no route.
func (l *layout) callOf(ev *event, c *capgate.Call) {
	*c = capgate.Call{Route: ev.rt, UserID: ev.user, Tier: ev.tier}
	if ev.rt == nil {
		return
	}
	c.Fields = policy.NewFields(ev.rt)
	for j, fi := range l.routeFields[ev.rt.Index()] {
		if fi < 0 || fi >= len(ev.vals) {
			continue
		}
		v := ev.vals[fi]
		switch l.fields[fi].Type {
		case policy.TypeBool:
			c.Fields.SetBool(j, v.b)
		case policy.TypeInt:
			c.Fields.SetInt(j, v.n)
		default:
			c.Fields.SetString(j, v.s)
		}
	}
}

// callKeys returns the lanes of ev's call (c, from callOf), in lane order:
// the lanes of the policy that take it; for a route the policy lacks, the
// lanes its line recorded.
func (l *layout) callKeys(buf []laneKey, ev *event, c *capgate.Call) []laneKey {
	buf = buf[:0]
	for i, ln := range l.lanes {
		if ev.rt == nil {
			if !(ev.hasCount | ev.hasLimit).has(i) {
				continue
			}
		} else if !ln.TakesCall(c.Route, &c.Fields) {
			continue
		}
		buf = append(buf, laneKey{i, l.laneID(ev, i)})
	}
	return buf
}

// fixClasses makes ev's fields agree with the classes its line says the
// call is of: a line that says so but lacks the class's field (OCL: a
// single-row call without rows) gets the value the class is defined
// by, so the lane plan sees the call as the gate did.
func (l *layout) fixClasses(ev *event, classes uint64) {
	if classes == 0 || ev.rt == nil {
		return
	}
	for i, c := range l.p.Classes {
		if classes&(1<<i) == 0 || c.Field == "" || !slices.Contains(c.Routes, ev.rt.Name) {
			continue
		}
		fi := l.fieldIndex(c.Field)
		if fi < 0 || fi >= len(ev.vals) {
			continue
		}
		v := &ev.vals[fi]
		switch want := c.Equals.(type) {
		case int:
			if v.n == 0 {
				v.n = want
			}
		case bool:
			if !v.b {
				v.b = want
			}
		case string:
			if v.s == "" {
				v.s = want
			}
		}
	}
}

// tierIndex returns the index of tier t in the policy's tiers, or -1.
func (l *layout) tierIndex(t string) int {
	if i, ok := l.tiers[t]; ok {
		return i
	}
	return -1
}

// tierRank orders tiers as the policy lists them (OCL: staff, core,
// early_access, preview), unknown ones last.
func (l *layout) tierRank(t string) int {
	if i, ok := l.tiers[t]; ok {
		return i
	}
	return len(l.tiers)
}

// sortedTiers returns the keys of m in tier order, unknown tiers last by
// name.
func sortedTiers[V any](l *layout, m map[string]V) []string {
	ts := make([]string, 0, len(m))
	for t := range m {
		ts = append(ts, t)
	}
	slices.SortFunc(ts, func(a, b string) int {
		return cmp.Or(cmp.Compare(l.tierRank(a), l.tierRank(b)), strings.Compare(a, b))
	})
	return ts
}

// userLaneName returns the name of the user lane, "" when there is none.
func (l *layout) userLaneName() string {
	if l.userLane < 0 {
		return ""
	}
	return l.lanes[l.userLane].Name
}
