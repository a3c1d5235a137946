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
	// DecisionJoined: the call repeated one still running (package idempotency)
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
