package capgate

import (
	"errors"

	"github.com/capgate/capgate/policy"
)

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

// Call describes one heavy call: what the lane plan needs, and what its log
// line reports. Its route and fields are the policy's: the route the
// request matched (or the decision service was told of) and the fields it
// carries.
type Call struct {
	// Route is the policy route the call matched. The gate plans it under
	// the policy of the config in force; a route of another policy (one
	// replaced since the call was read) makes the call unavailable.
	Route *policy.Route
	// Fields are the call's field values (policy.Fields.Detach'ed: they
	// outlive the request).
	Fields policy.Fields
	UserID string // the username; lane key and log line
	Tier   string // one of the policy's tiers
	// Aware is set when the client said it handles refusals (the policy's
	// client-metadata header with its aware field "true" or 1).
	Aware bool

	// Attribution, for the log line only.
	RequestSource string // the policy's request-source header, first 50 characters
	// Metadata are the values of the client-metadata keys the policy's
	// log keeps (policy.Names.MetadataLog), in its order, each cut to its
	// length (at most policy.MaxMetadataLog keys).
	Metadata   [policy.MaxMetadataLog]string
	QueueMS    int64 // time waited before the gateway, if HasQueueMS
	HasQueueMS bool
	CID        string // the request's correlation id
}
