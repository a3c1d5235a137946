// Package capgate caps how many heavy calls of an HTTP API run at once:
// across the cluster, per API host (task), on a shared backend (es2_knn),
// per user tier and per user.
//
// Most users need three names: NewGate, which makes the Gate over a lane
// store (memory.New, or redis.Open for a cluster of gateways) and a config
// source; Gate.Admit, which decides one heavy call and returns its
// Admission (Release it when the call ends, however it ends); and, in front
// of an http.Handler, capgatehttp.NewMiddleware (package
// github.com/capgate/capgate/http), which does both for each request.
// Example and Example_admit show the two ways.
//
// The root package is the domain. It holds the config model, the lane plan,
// the decisions and the Gate that admits one heavy call; it imports the
// standard library, the pure tune package (the adaptive limits' algorithm),
// the status package (the lanes' live state it reports) and the module's
// small internal/ helpers (JSON, random
// ids, a timer loop, truncation), nothing else. Lane stores (memory, redis),
// config stores (sqlite, postgres), the log sink and HTTP adapters live in
// subpackages and talk to each other only through the types and interfaces
// defined here.
package capgate

import "errors"

// Mode says what the gate does with heavy calls.
type Mode string

// The modes, as README.md describes them.
const (
	ModeOff     Mode = "off"     // nothing counted, no headers, no log line
	ModeShadow  Mode = "shadow"  // count and log; never refuse
	ModeEnforce Mode = "enforce" // refuse enforced calls that find a lane full
)

// ParseMode reports whether s names a mode.
func ParseMode(s string) (Mode, bool) {
	switch m := Mode(s); m {
	case ModeOff, ModeShadow, ModeEnforce:
		return m, true
	}
	return "", false
}

// EnforceFor says which calls enforce mode refuses.
type EnforceFor string

// The enforce_for values.
const (
	EnforceAware EnforceFor = "aware" // only clients that send capacity_aware
	EnforceAll   EnforceFor = "all"
)

// Tier is a caller's plan. Tiers are ordered: staff, core, early_access,
// preview; a caller's tier is the highest one it has.
type Tier string

// The tiers, highest first.
const (
	TierStaff       Tier = "staff"
	TierCore        Tier = "core"
	TierEarlyAccess Tier = "early_access"
	TierPreview     Tier = "preview"
)

// AllTiers returns the tiers, highest first.
func AllTiers() []Tier {
	return []Tier{TierStaff, TierCore, TierEarlyAccess, TierPreview}
}

// Default group names that map a user to a tier.
const (
	DefaultCoreGroup        = "core_user"
	DefaultEarlyAccessGroup = "early_access"
)

// TierGroups names the auth groups that grant the core and early_access
// tiers. The zero value uses DefaultCoreGroup and DefaultEarlyAccessGroup.
type TierGroups struct {
	Core        string
	EarlyAccess string
}

// TierOf returns the caller's highest tier: staff (is_staff or
// is_superuser), core, early_access, else preview.
func (g TierGroups) TierOf(staff bool, groups []string) Tier {
	if staff {
		return TierStaff
	}
	core, early := g.Core, g.EarlyAccess
	if core == "" {
		core = DefaultCoreGroup
	}
	if early == "" {
		early = DefaultEarlyAccessGroup
	}
	tier := TierPreview
	for _, grp := range groups {
		switch grp {
		case core:
			return TierCore
		case early:
			tier = TierEarlyAccess
		}
	}
	return tier
}

// Decision is the outcome of admitting a heavy call.
type Decision string

// The decisions, as README.md describes them. A call with no decision (mode off, or not
// heavy) passes untouched.
const (
	DecisionNone          Decision = ""
	DecisionAdmitted      Decision = "admitted"
	DecisionShadowRefused Decision = "shadow-refused"
	DecisionRefused       Decision = "refused"
	DecisionUnavailable   Decision = "unavailable"
	// DecisionJoined: the call repeated one still running (idempotency.go)
	// and got its answer, holding no lane place.
	DecisionJoined Decision = "joined"
	// DecisionReplayed: the call repeated one that had finished and got
	// its kept answer.
	DecisionReplayed Decision = "replayed"
)

// Errors a LaneStore returns. Any error from a LaneStore counts as a store
// failure and opens the gate's skip window.
var (
	// ErrLateAcquire means the store ran an acquire after its not-after
	// time (it sat in a buffer while the store hung); no lease was taken.
	ErrLateAcquire = errors.New("the store ran the acquire after its caller stopped waiting; no lease was taken")
	// ErrBusy means the store had too many operations in flight to send
	// this one within its deadline: this process's own load, not a failed
	// store. The gate does not open its skip window for it.
	ErrBusy = errors.New("the lane store is busy")
)
