package capgate

// The heavy endpoints of the OCL profile.
const (
	EndpointMatch  = "$match"
	EndpointRerank = "$rerank"
)

// Call describes one heavy call: what the lane plan needs, and what its log
// line reports.
type Call struct {
	Endpoint string // EndpointMatch or EndpointRerank
	Rows     int    // number of input rows
	Semantic bool   // takes the es2_knn lane
	Reranker bool   // logged only
	UserID   string // the username; lane key and log line
	Tier     Tier
	// Aware is set when the client said it handles refusals
	// (X-OCL-Event-Metadata capacity_aware "true" or "1").
	Aware bool

	// Attribution, for the log line only.
	RequestSource  string // X-OCL-Request-Source, first 50 characters
	AlgorithmID    string // metadata algorithm_id, first 100 characters
	AutomatchRunID string // metadata automatch_run_id, first 20 characters
	QueueMS        int64  // time waited before the gateway, if HasQueueMS
	HasQueueMS     bool
	CID            string // the request's correlation id
}

// SingleRow reports whether the call may use the reserved single-row slot:
// a $match of exactly one row.
func (c Call) SingleRow() bool {
	return c.Endpoint == EndpointMatch && c.Rows == 1
}

// Caller is who makes a call, as an identity resolver found it.
type Caller struct {
	UserID string   // the username
	Staff  bool     // is_staff or is_superuser
	Groups []string // auth groups
}
