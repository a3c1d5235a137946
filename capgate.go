// Package capgate caps how many heavy calls of an HTTP API run at once:
// in the lanes its policy names (package policy) — across the cluster, per
// API host (task), on a shared backend, per user tier, per user, per value
// of a call field.
//
// Most users need three names: NewGate, which makes the Gate over a lane
// store (memory.New, or redis.Open for a cluster of gateways) and a config
// source; Gate.Admit, which decides one heavy call and returns its
// Admission (Release it when the call ends, however it ends); and, in front
// of an http.Handler, capgatehttp.NewMiddleware (package
// github.com/capgate/capgate/http), which does both for each request.
// Example and Example_admit show the two ways.
//
// The root package is the engine. It holds the lane plan, the decisions and
// the Gate that admits one heavy call; it imports the standard library, the
// pure policy package (which calls are heavy and where they count), the
// pure settings package (the runtime config model), the pure tune package
// (the adaptive limits' algorithm), the status package (the lanes' live
// state it reports) and the module's small internal/ helpers (JSON, random
// ids, a timer loop, truncation), nothing else. Lane stores (memory, redis),
// config stores (sqlite, postgres), the log sink and HTTP adapters live in
// subpackages and talk to each other only through the types and interfaces
// defined here.
package capgate

import "errors"

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
