// Package status is the live state of the lanes as a gate reads it from
// the lane store (capgate.Gate.Status and Gate.ReadLanes): the JSON of GET
// /capacity/status/ and of `capgate capacity status`, the data of the
// status page, and what the lane gauges of package metrics export.
//
// It is a leaf: it imports nothing of capgate, so the root can return its
// types. Mode, enforce_for and tiers are therefore plain strings here, with
// the values of capgate.Mode, capgate.EnforceFor and capgate.Tier.
package status

import (
	"bytes"
	"cmp"
	"encoding/json"
	"slices"
	"strings"
)

// Snapshot is the state of the lanes at one read, laid out by the policy's
// lanes. When the lane store fails, only Mode, EnforceFor, Store and Lanes
// are set, Store holding the error.
type Snapshot struct {
	Mode       string // a settings.Mode
	EnforceFor string // a settings.EnforceFor
	Store      string // OK, or the lane store's error: "lanes_health" on the wire, and "redis" for a Redis (NoRedis otherwise)
	Lanes      string // where the lanes live: memory, redis, redis-sentinel, redis-cluster
	// Idempotency is the idempotency mode in force (a
	// settings.IdempotencyMode), "" (left out) when off.
	Idempotency string
	// Fairness is what a waiting call's turn costs its user (a
	// settings.FairBy: calls, time or usage) when calls wait, "" (left
	// out) when none can (not enforced, or wait.max_seconds 0).
	Fairness string
	// Binding is the lane calls wait on (see BindingLane): a shared lane's
	// name, "task:<id>" or "<lane>:<key>" of a lane keyed by tier or by a
	// call field; "" when no lane is full.
	Binding string
	// Decisions counts this gateway's decisions of the last minutes, when
	// the server keeps them (Recent); nil otherwise.
	Decisions *Decisions
	// Shared are the lanes with one count for the whole cluster, in the
	// policy's order.
	Shared []SharedLane
	// Keyed are the lanes with one count per task or per key (tier, user,
	// call field), in the policy's order.
	Keyed []KeyedLane
	// Adaptive is the advice of the adaptive control loop for each
	// adaptive lane, by lane name; nil without one.
	Adaptive map[string]Adaptive
	// Paused are the lanes the config pauses (a limit of 0), in the
	// policy's order; set by Gate.Status, also when the store failed.
	Paused []Paused
}

// SharedLane is one lane with one count for the whole cluster.
type SharedLane struct {
	Name      string // the lane's name
	StatusKey string // its key in the JSON (the policy lane's status)
	Lane
}

// KeyedLane is one lane counted per task or per key.
type KeyedLane struct {
	Name      string // the lane's name
	StatusKey string // its key in the JSON (the policy lane's status)
	Scope     string // "task" or "key"
	Key       string // scope key: "user", "tier" or the call field
	// PerKeyLimit says each entry's Limit is known: false for a lane whose
	// limit is per tier but whose key is not the tier (a user's lane: the
	// user's tier is not read), whose entries then carry no limit.
	PerKeyLimit bool
	// Entries are the keys with calls in flight or waiting (a tier lane
	// and a gateway's own task: every one, idle ones too).
	Entries map[string]Lane
	// Uncounted is how many keys of the lane the store listed that the
	// read did not count (past capgate.Gate.Status counts at most 1000 keys of a lane); 0 when it counted
	// every one.
	Uncounted int
}

// MaxKeysShown is how many keys of a keyed lane the status JSON lists: the
// busiest (most in flight, then most waiting, then by key); the others are
// summed up under "keys_left_out".
const MaxKeysShown = 50

// busiest returns the keys of entries in order, the busiest first.
func busiest(entries map[string]Lane) []string {
	keys := make([]string, 0, len(entries))
	for k := range entries {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		ea, eb := entries[a], entries[b]
		if c := cmp.Compare(eb.InFlight, ea.InFlight); c != 0 {
			return c
		}
		if c := cmp.Compare(eb.Waiting, ea.Waiting); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	return keys
}

// LeftOut is what the status JSON leaves out of a keyed lane: the keys
// past MaxKeysShown, and the keys the read did not count (Uncounted).
type LeftOut struct {
	Keys     int `json:"keys"`      // keys with calls not listed, plus those not counted
	InFlight int `json:"in_flight"` // the calls in flight of the keys counted but not listed
	// Uncounted is how many keys the store listed that the read did not
	// count (past capgate.Gate.Status counts at most 1000 keys of a lane): they may have calls too.
	Uncounted int `json:"uncounted,omitempty"`
}

// Shared returns the shared lane named name.
func (s *Snapshot) SharedLane(name string) (Lane, bool) {
	for _, l := range s.Shared {
		if l.Name == name {
			return l.Lane, true
		}
	}
	return Lane{}, false
}

// KeyedLane returns the keyed lane named name.
func (s *Snapshot) KeyedLane(name string) (*KeyedLane, bool) {
	for i := range s.Keyed {
		if s.Keyed[i].Name == name {
			return &s.Keyed[i], true
		}
	}
	return nil, false
}

// Adaptive is what the adaptive control loop advises for one lane, and
// why, as this gateway last read the cluster's state.
type Adaptive struct {
	Mode        string  `json:"mode"`                      // advise or apply
	Advised     int     `json:"advised,omitempty"`         // 0: none yet
	Limit       int     `json:"limit"`                     // in force
	LimitSource string  `json:"limit_source"`              // LimitStatic or LimitAdaptive
	Step        int64   `json:"step"`                      // steps taken for the cluster
	Reason      string  `json:"reason,omitempty"`          // why the last step did what it did
	StepAgeS    float64 `json:"last_step_age_s,omitempty"` // seconds since the last step; 0: unknown
	Calls       int64   `json:"calls"`                     // the last window decided on: its calls,
	RowMS       float64 `json:"row_ms"`                    // its service time per row,
	NoLoadMS    float64 `json:"no_load_ms"`                // the no-load time per row,
	MaxInFlight int64   `json:"max_in_flight"`             // the most calls in flight,
	Full        int64   `json:"full"`                      // and the calls that found the lane full
}

// OK is Snapshot.Store when the lane store answered.
const OK = "ok"

// NoRedis is the JSON's "redis" when the lanes are in this process
// (Lanes "memory"): there is no Redis whose health it could name, and
// "ok" would say there is. "lanes" names the store, "lanes_health" its
// health, whatever it is.
const NoRedis = "none: lanes in memory"

// redis returns the JSON's "redis": the store's health when it is a Redis
// (the key's meaning since the first status API), NoRedis otherwise.
func (s Snapshot) redis() string {
	if s.Lanes == "memory" {
		return NoRedis
	}
	return s.Store
}

// Where a lane's limit in force comes from (LimitSource).
const (
	LimitStatic   = "static"   // the config's limit
	LimitAdaptive = "adaptive" // the limit the adaptive control loop advises
)

// Lane is one count's calls in flight and its limit.
type Lane struct {
	InFlight int `json:"in_flight"`
	Limit    int `json:"limit"`
	// BulkLimit is the limit of the calls that are not of the lane's
	// reserve class (limit − reserve); nil for a lane without a reserve.
	BulkLimit *int `json:"bulk_limit,omitempty"`
	// Lend is how many of the reserve's seats the other calls may borrow
	// while the class leaves them idle (the config's lending); 0: none.
	Lend    int `json:"lend,omitempty"`
	Waiting int `json:"waiting,omitempty"` // calls waiting for this lane
	// Advised and LimitSource are set for an adaptive lane: the limit the
	// control loop advises, and where Limit comes from (LimitStatic or
	// LimitAdaptive).
	Advised     int    `json:"advised,omitempty"`
	LimitSource string `json:"limit_source,omitempty"`
}

// Bulk returns the limit of the calls outside the lane's reserve: its
// BulkLimit, else its Limit.
func (l Lane) Bulk() int {
	if l.BulkLimit != nil {
		return *l.BulkLimit
	}
	return l.Limit
}

// User is one key's calls in flight when its limit is not known.
type User struct {
	InFlight int `json:"in_flight"`
	Waiting  int `json:"waiting,omitempty"` // calls waiting for a slot
}

// MarshalJSON writes the full snapshot when the store answered — mode,
// enforce_for, the store, the shared lanes (each under its status key),
// adaptive, lanes_health, then the keyed lanes as objects by key (empty
// ones too) — and only mode, enforce_for, the error and where the lanes
// live when it did not.
func (s Snapshot) MarshalJSON() ([]byte, error) {
	if s.Store != OK {
		return json.Marshal(struct {
			Mode       string     `json:"mode"`
			EnforceFor string     `json:"enforce_for"`
			Enforced   string     `json:"enforced"`
			Redis      string     `json:"redis"`
			Lanes      string     `json:"lanes"`
			Health     string     `json:"lanes_health"`
			Paused     []Paused   `json:"paused,omitempty"`
			Decisions  *Decisions `json:"decisions,omitempty"`
		}{s.Mode, s.EnforceFor, Enforced(s.Mode, s.EnforceFor), s.redis(), s.Lanes, s.Store, s.Paused, s.Decisions})
	}
	var b bytes.Buffer
	b.WriteByte('{')
	field := func(k string, v any) error {
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteByte(':')
		vb, err := json.Marshal(v)
		if err != nil {
			return err
		}
		b.Write(vb)
		return nil
	}
	type kv struct {
		k string
		v any
	}
	out := []kv{{"mode", s.Mode}, {"enforce_for", s.EnforceFor}, {"enforced", Enforced(s.Mode, s.EnforceFor)},
		{"redis", s.redis()}, {"lanes", s.Lanes}}
	if len(s.Paused) > 0 {
		out = append(out, kv{"paused", s.Paused})
	}
	if s.Idempotency != "" {
		out = append(out, kv{"idempotency", s.Idempotency})
	}
	if s.Fairness != "" {
		out = append(out, kv{"fairness", s.Fairness})
	}
	if s.Binding != "" {
		out = append(out, kv{"binding", s.Binding})
	}
	if s.Decisions != nil {
		out = append(out, kv{"decisions", s.Decisions})
	}
	for _, l := range s.Shared {
		out = append(out, kv{l.StatusKey, l.Lane})
	}
	if len(s.Adaptive) > 0 {
		out = append(out, kv{"adaptive", s.Adaptive})
	}
	// lanes_health is the store's health under a name that fits every
	// store; "redis" stays for existing readers of a Redis's.
	out = append(out, kv{"lanes_health", s.Store})
	leftOut := map[string]LeftOut{}
	for _, l := range s.Keyed {
		shown := busiest(l.Entries)
		if len(shown) > MaxKeysShown || l.Uncounted > 0 {
			lo := LeftOut{Uncounted: l.Uncounted}
			if len(shown) > MaxKeysShown {
				for _, k := range shown[MaxKeysShown:] {
					lo.InFlight += l.Entries[k].InFlight
				}
				lo.Keys = len(shown) - MaxKeysShown
				shown = shown[:MaxKeysShown]
			}
			lo.Keys += lo.Uncounted
			leftOut[l.StatusKey] = lo
		}
		if l.PerKeyLimit {
			m := make(map[string]Lane, len(shown))
			for _, k := range shown {
				m[k] = l.Entries[k]
			}
			out = append(out, kv{l.StatusKey, m})
			continue
		}
		m := make(map[string]User, len(shown))
		for _, k := range shown {
			e := l.Entries[k]
			m[k] = User{InFlight: e.InFlight, Waiting: e.Waiting}
		}
		out = append(out, kv{l.StatusKey, m})
	}
	if len(leftOut) > 0 {
		out = append(out, kv{"keys_left_out", leftOut})
	}
	for _, e := range out {
		if err := field(e.k, e.v); err != nil {
			return nil, err
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// BindingLane returns the lane calls wait on in st: of the full lanes (in
// flight at or over the limit) that have calls waiting, the one with the
// most waiting; with none waiting (shadow, or no wait), the fullest full
// lane. A waiting call is counted in every lane of its plan, so the most
// waiting alone would name a lane with free slots; a full lane is where
// it waits. A lane keyed by the caller is not named: one user's lane binds
// that user only. "" when no lane is full.
func BindingLane(st Snapshot) string {
	type cand struct {
		name                     string
		inFlight, limit, waiting int
	}
	var cands []cand
	for _, l := range st.Shared {
		// The bulk limit binds bulk calls, the most of them.
		cands = append(cands, cand{l.Name, l.InFlight, l.Bulk(), l.Waiting})
	}
	for _, kl := range st.Keyed {
		if !kl.PerKeyLimit || kl.Key == "user" {
			continue
		}
		prefix := kl.Name + ":"
		if kl.Scope == "task" {
			prefix = "task:"
		}
		for id, l := range kl.Entries {
			cands = append(cands, cand{prefix + id, l.InFlight, l.Limit, l.Waiting})
		}
	}
	best, bestWait, bestRatio := "", -1, -1.0
	for _, c := range cands {
		if c.inFlight < c.limit || (c.limit == 0 && c.inFlight == 0 && c.waiting == 0) {
			continue
		}
		ratio := float64(c.inFlight) / float64(max(c.limit, 1))
		better := c.waiting > bestWait || (c.waiting == bestWait && ratio > bestRatio) ||
			(c.waiting == bestWait && ratio == bestRatio && c.name < best)
		if better {
			best, bestWait, bestRatio = c.name, c.waiting, ratio
		}
	}
	return best
}
