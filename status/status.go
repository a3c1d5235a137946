// Package status is the live state of the lanes as a gate reads it from
// the lane store (capgate.Gate.Status and Gate.ReadLanes): the JSON of GET
// /capacity/status/ and of `capgate capacity status`, the data of the
// status page, and what the lane gauges of package metrics export.
//
// It is a leaf: it imports nothing of capgate, so the root can return its
// types. Mode, enforce_for and tiers are therefore plain strings here, with
// the values of capgate.Mode, capgate.EnforceFor and capgate.Tier.
package status

import "encoding/json"

// Snapshot is the state of the lanes at one read. When the lane store
// fails, only Mode, EnforceFor, Store and Lanes are set, Store holding the
// error.
type Snapshot struct {
	Mode       string `json:"mode"`        // a capgate.Mode
	EnforceFor string `json:"enforce_for"` // a capgate.EnforceFor
	Store      string `json:"redis"`       // OK, or the lane store's error; "redis" on the wire, whatever the store
	Lanes      string `json:"lanes"`       // where the lanes live: memory, redis, redis-sentinel, redis-cluster
	// Idempotency is the idempotency mode in force (a
	// capgate.IdempotencyMode), "" (left out) when off.
	Idempotency string `json:"idempotency,omitempty"`
	// Binding is the lane calls wait on (see BindingLane): "api_heavy",
	// "es2_knn", "task:<id>" or "tier:<tier>"; "" when no lane is full.
	Binding string `json:"binding,omitempty"`
	// Decisions counts this gateway's decisions of the last minutes, when
	// the server keeps them (Recent); nil otherwise.
	Decisions *Decisions      `json:"decisions,omitempty"`
	APIHeavy  *APIHeavy       `json:"api_heavy,omitempty"`
	ES2KNN    *Lane           `json:"es2_knn,omitempty"`
	Tasks     map[string]Lane `json:"-"` // by task id
	Tiers     map[string]Lane `json:"-"` // by capgate.Tier
	Users     map[string]User `json:"-"` // by user id
	// Adaptive is the advice of the adaptive control loop for each
	// adaptive lane, by lane name; nil without one.
	Adaptive map[string]Adaptive `json:"adaptive,omitempty"`
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

// Where a lane's limit in force comes from (LimitSource).
const (
	LimitStatic   = "static"   // the config's limit
	LimitAdaptive = "adaptive" // the limit the adaptive control loop advises
)

// APIHeavy is the cluster lane: its limit and the bulk limit.
type APIHeavy struct {
	InFlight  int `json:"in_flight"`
	Limit     int `json:"limit"`
	BulkLimit int `json:"bulk_limit"`
	Waiting   int `json:"waiting,omitempty"` // calls waiting for this lane
	// Advised and LimitSource are set for an adaptive lane: the limit the
	// control loop advises, and where Limit comes from (LimitStatic or
	// LimitAdaptive).
	Advised     int    `json:"advised,omitempty"`
	LimitSource string `json:"limit_source,omitempty"`
}

// Lane is one lane's calls in flight and its limit.
type Lane struct {
	InFlight int `json:"in_flight"`
	Limit    int `json:"limit"`
	Waiting  int `json:"waiting,omitempty"` // calls waiting for this lane
	// As in APIHeavy, for an adaptive lane.
	Advised     int    `json:"advised,omitempty"`
	LimitSource string `json:"limit_source,omitempty"`
}

// User is one user's calls in flight.
type User struct {
	InFlight int `json:"in_flight"`
	Waiting  int `json:"waiting,omitempty"` // calls waiting for a slot
}

// MarshalJSON writes the full snapshot when the store answered (tasks,
// tiers and users as objects, empty ones too), and only mode, enforce_for,
// the error and where the lanes live when it did not.
func (s Snapshot) MarshalJSON() ([]byte, error) {
	if s.Store != OK {
		return json.Marshal(struct {
			Mode       string     `json:"mode"`
			EnforceFor string     `json:"enforce_for"`
			Redis      string     `json:"redis"`
			Lanes      string     `json:"lanes"`
			Health     string     `json:"lanes_health"`
			Decisions  *Decisions `json:"decisions,omitempty"`
		}{s.Mode, s.EnforceFor, s.Store, s.Lanes, s.Store, s.Decisions})
	}
	type full Snapshot // without this method
	f := full(s)
	if f.Tasks == nil {
		f.Tasks = map[string]Lane{}
	}
	if f.Users == nil {
		f.Users = map[string]User{}
	}
	if f.Tiers == nil {
		f.Tiers = map[string]Lane{}
	}
	// lanes_health is "redis" under a name that fits every store (the
	// in-process lanes are no Redis); "redis" stays for existing readers.
	return json.Marshal(struct {
		full
		Health string          `json:"lanes_health"`
		Tasks  map[string]Lane `json:"tasks"`
		Tiers  map[string]Lane `json:"tiers"`
		Users  map[string]User `json:"users"`
	}{f, f.Store, f.Tasks, f.Tiers, f.Users})
}

// BindingLane returns the lane calls wait on in st: of the full lanes (in
// flight at or over the limit) that have calls waiting, the one with the
// most waiting; with none waiting (shadow, or no wait), the fullest full
// lane. A waiting call is counted in every lane of its plan, so the most
// waiting alone would name a lane with free slots; a full lane is where
// it waits. Per-user lanes are not named: one user's lane binds that user
// only. "" when no lane is full.
func BindingLane(st Snapshot) string {
	type cand struct {
		name                     string
		inFlight, limit, waiting int
	}
	var cands []cand
	if st.APIHeavy != nil {
		// The bulk limit binds bulk calls, the most of them.
		cands = append(cands, cand{"api_heavy", st.APIHeavy.InFlight, st.APIHeavy.BulkLimit, st.APIHeavy.Waiting})
	}
	if st.ES2KNN != nil {
		cands = append(cands, cand{"es2_knn", st.ES2KNN.InFlight, st.ES2KNN.Limit, st.ES2KNN.Waiting})
	}
	for id, l := range st.Tasks {
		cands = append(cands, cand{"task:" + id, l.InFlight, l.Limit, l.Waiting})
	}
	for t, l := range st.Tiers {
		cands = append(cands, cand{"tier:" + t, l.InFlight, l.Limit, l.Waiting})
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
