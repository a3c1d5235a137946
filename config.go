package capgate

import (
	"encoding/json"
	"errors"
)

// Config is the runtime config (SPEC §6). Its JSON form is the one stored,
// served by the staff API and changed by staff.
type Config struct {
	Mode             Mode       `json:"mode"`
	EnforceFor       EnforceFor `json:"enforce_for"`
	APIHeavy         APIHeavy   `json:"api_heavy"`
	ES2KNN           int        `json:"es2_knn"`
	ReserveSingleRow int        `json:"reserve_single_row"`
	Tiers            TierLimits `json:"tiers"`
	PerUser          TierLimits `json:"per_user"`
	LeaseSeconds     int        `json:"lease_seconds"`
	RenewSeconds     int        `json:"renew_seconds"`
	MaxHoldSeconds   int        `json:"max_hold_seconds"`
	RetryAfter       RetryAfter `json:"retry_after"`
}

// APIHeavy holds the limits of the api_heavy lanes.
type APIHeavy struct {
	Cluster int `json:"cluster"`  // heavy calls at once across the cluster
	PerTask int `json:"per_task"` // heavy calls at once on one API task
}

// TierLimits holds one number per tier.
type TierLimits struct {
	Staff       int `json:"staff"`
	Core        int `json:"core"`
	EarlyAccess int `json:"early_access"`
	Preview     int `json:"preview"`
}

// Of returns the number for tier t; an unknown tier gets the preview number.
func (l TierLimits) Of(t Tier) int {
	switch t {
	case TierStaff:
		return l.Staff
	case TierCore:
		return l.Core
	case TierEarlyAccess:
		return l.EarlyAccess
	}
	return l.Preview
}

// RetryAfter holds the Retry-After numbers, in seconds.
type RetryAfter struct {
	Base   int `json:"base"`   // per call ahead in the fullest lane
	Max    int `json:"max"`    // cap for base × calls ahead
	Paused int `json:"paused"` // when a full lane's limit is 0
}

// DefaultConfig returns the built-in config with the given boot mode; an
// invalid mode means shadow.
func DefaultConfig(mode Mode) Config {
	if _, ok := ParseMode(string(mode)); !ok {
		mode = ModeShadow
	}
	return Config{
		Mode:             mode,
		EnforceFor:       EnforceAware,
		APIHeavy:         APIHeavy{Cluster: 4, PerTask: 2},
		ES2KNN:           3,
		ReserveSingleRow: 1,
		Tiers:            TierLimits{Staff: 4, Core: 4, EarlyAccess: 3, Preview: 2},
		PerUser:          TierLimits{Staff: 4, Core: 3, EarlyAccess: 2, Preview: 1},
		LeaseSeconds:     60,
		RenewSeconds:     20,
		MaxHoldSeconds:   900,
		RetryAfter:       RetryAfter{Base: 5, Max: 30, Paused: 120},
	}
}

// BulkLimit is the api_heavy limit of every call but a single-row $match:
// max(cluster − reserve_single_row, 0).
func (c Config) BulkLimit() int {
	return max(c.APIHeavy.Cluster-c.ReserveSingleRow, 0)
}

// Doc returns c as a JSON object tree (numbers as json.Number), the form
// that Merge, Diff and Validate work on.
func (c Config) Doc() map[string]any {
	b, err := json.Marshal(c)
	if err != nil {
		panic(err) // Config holds only strings and ints
	}
	doc, err := ParseDoc(b)
	if err != nil {
		panic(err)
	}
	return doc.(map[string]any)
}

// ParseDoc decodes JSON keeping numbers as json.Number, so validation can
// tell 3 from 3.0 and 1e2.
func ParseDoc(b []byte) (any, error) {
	// TODO(config model): implemented in the config model change.
	var v any
	return v, json.Unmarshal(b, &v)
}

// Validate checks a config document (SPEC §6) and returns every problem
// found, as messages; none means the document is a valid config.
func Validate(doc any) []string {
	return nil // TODO(config model)
}

// ConfigFromDoc validates doc and converts it to a Config.
func ConfigFromDoc(doc any) (Config, []string) {
	return Config{}, []string{"not implemented"} // TODO(config model)
}

// Merge returns base deep-merged with change: nested objects are merged,
// other values replaced. With knownOnly, keys base lacks are dropped. Neither
// input is modified.
func Merge(base, change map[string]any, knownOnly bool) map[string]any {
	return nil // TODO(config model)
}

// Diff returns {"dotted.path": [old, new]} for every value that differs
// between old and new (either may be nil).
func Diff(old, new any) map[string][2]any {
	return nil // TODO(config model)
}

// ErrInvalidConfig is wrapped by Resolve's error when a stored config is
// invalid.
var ErrInvalidConfig = errors.New("capacity config is invalid")

// Resolve reads a stored config: defaults overlaid with the keys stored
// that are still known. An invalid result returns the defaults and an error
// wrapping ErrInvalidConfig, which the caller logs.
func Resolve(stored map[string]any, defaults Config) (Config, error) {
	return defaults, nil // TODO(config model)
}
