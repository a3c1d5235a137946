package capgate

import "github.com/capgate/capgate/policy"

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
