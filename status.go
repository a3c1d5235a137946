package capgate

// Status is the live state of the lanes, as served by GET /capacity/status/
// (SPEC §9). When the lane store fails, only Mode, EnforceFor and Redis are
// set, Redis holding the error.
type Status struct {
	Mode       Mode                  `json:"mode"`
	EnforceFor EnforceFor            `json:"enforce_for"`
	Redis      string                `json:"redis"`
	APIHeavy   *APIHeavyStatus       `json:"api_heavy,omitempty"`
	ES2KNN     *LaneStatus           `json:"es2_knn,omitempty"`
	Tasks      map[string]LaneStatus `json:"tasks,omitempty"`
	Tiers      map[Tier]LaneStatus   `json:"tiers,omitempty"`
	Users      map[string]UserStatus `json:"users,omitempty"`
}

// APIHeavyStatus is the cluster lane: its limit and the bulk limit.
type APIHeavyStatus struct {
	InFlight  int `json:"in_flight"`
	Limit     int `json:"limit"`
	BulkLimit int `json:"bulk_limit"`
}

// LaneStatus is one lane's calls in flight and its limit.
type LaneStatus struct {
	InFlight int `json:"in_flight"`
	Limit    int `json:"limit"`
}

// UserStatus is one user's calls in flight.
type UserStatus struct {
	InFlight int `json:"in_flight"`
}
