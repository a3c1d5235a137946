package capgate

import (
	"strconv"
	"time"

	"github.com/capgate/capgate/internal/jsonenc"
)

// record is the log line of one gated call. Zero or unset
// values are left out of the line; the pointer fields distinguish "0" from
// "unknown".
type record struct {
	Decision       Decision
	Mode           Mode
	Enforced       bool
	Endpoint       string
	Semantic       bool
	Reranker       bool
	Rows           int
	SingleRow      bool
	Tier           Tier
	UserID         string
	Scope          string
	Full           []string
	InFlight       *int // api_heavy
	Limit          *int
	TaskInFlight   *int
	TaskLimit      *int
	ES2KNNInFlight *int
	ES2KNNLimit    *int
	TierInFlight   *int
	TierLimit      *int
	UserInFlight   *int
	UserLimit      *int
	Suggested      *int
	RetryAfter     *int
	HeldMS         *int64
	QueueMS        *int64
	WaitMS         *int64 // how long the call waited for a slot; nil: it never waited
	LeaseLost      bool
	Error          string
	Degraded       bool   // decided by the gateway's local lanes alone
	DedupOf        string // the cid of the call this one repeated (joined, replayed)
	DedupError     string // why the call could not be checked for repeats
	Resumed        bool   // a running call counted again (AdmitOptions.Resumed)
	Task           string
	RequestSource  string
	AlgorithmID    string
	AutomatchRunID string
	CID            string
	TS             time.Time // when the call finished
}

// AppendJSON appends the record as one compact JSON object, fields in the
// documented order, nulls and empty strings left out.
func (r *record) AppendJSON(b []byte) []byte {
	b = append(b, `{"event":"ocl_capacity"`...)
	b = appendStr(b, "decision", string(r.Decision))
	b = appendStr(b, "mode", string(r.Mode))
	b = appendBool(b, "enforced", r.Enforced)
	b = appendStr(b, "endpoint", r.Endpoint)
	b = appendBool(b, "semantic", r.Semantic)
	b = appendBool(b, "reranker", r.Reranker)
	b = appendInt(b, "rows", int64(r.Rows))
	b = appendBool(b, "single_row", r.SingleRow)
	b = appendStr(b, "tier", string(r.Tier))
	b = appendStr(b, "user_id", r.UserID)
	b = appendStr(b, "scope", r.Scope)
	if len(r.Full) > 0 {
		b = append(b, `,"full":[`...)
		for i, f := range r.Full {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendQuote(b, f) // lane names are ASCII identifiers
		}
		b = append(b, ']')
	}
	for _, f := range r.laneFields() {
		b = appendIntP(b, f.inFlightKey, *f.inFlight)
		b = appendIntP(b, f.limitKey, *f.limit)
	}
	b = appendIntP(b, "suggested", r.Suggested)
	b = appendIntP(b, "retry_after", r.RetryAfter)
	if r.HeldMS != nil {
		b = appendInt(b, "held_ms", *r.HeldMS)
	}
	if r.QueueMS != nil {
		b = appendInt(b, "queue_ms", *r.QueueMS)
	}
	if r.WaitMS != nil {
		b = appendInt(b, "wait_ms", *r.WaitMS)
	}
	if r.LeaseLost {
		b = append(b, `,"lease_lost":true`...)
	}
	b = appendStr(b, "error", r.Error)
	if r.Degraded {
		b = append(b, `,"degraded":true`...)
	}
	b = appendStr(b, "dedup_of", r.DedupOf)
	b = appendStr(b, "dedup_error", r.DedupError)
	if r.Resumed {
		b = append(b, `,"resumed":true`...)
	}
	b = appendStr(b, "task", r.Task)
	b = appendStr(b, "request_source", r.RequestSource)
	b = appendStr(b, "algorithm_id", r.AlgorithmID)
	b = appendStr(b, "automatch_run_id", r.AutomatchRunID)
	b = appendStr(b, "cid", r.CID)
	if !r.TS.IsZero() {
		b = append(b, `,"ts":"`...)
		b = r.TS.UTC().AppendFormat(b, "2006-01-02T15:04:05.000Z07:00")
		b = append(b, '"')
	}
	return append(b, '}')
}

// laneField is one lane's count and limit in a record, and the names of
// their fields in the log line.
type laneField struct {
	lane                  LaneName
	inFlightKey, limitKey string
	inFlight, limit       **int
}

// laneFields returns r's per-lane fields in lane order: the one table
// that AppendJSON, SetLane and LogFields go by.
func (r *record) laneFields() [5]laneField {
	return [...]laneField{
		{LaneAPIHeavy, "in_flight", "limit", &r.InFlight, &r.Limit},
		{LaneTask, "task_in_flight", "task_limit", &r.TaskInFlight, &r.TaskLimit},
		{LaneES2KNN, "es2_knn_in_flight", "es2_knn_limit", &r.ES2KNNInFlight, &r.ES2KNNLimit},
		{LaneTier, "tier_in_flight", "tier_limit", &r.TierInFlight, &r.TierLimit},
		{LaneUser, "user_in_flight", "user_limit", &r.UserInFlight, &r.UserLimit},
	}
}

// SetLane sets the count (nil: not known) and the limit of lane; an
// unknown lane is ignored.
func (r *record) SetLane(lane LaneName, inFlight, limit *int) {
	for _, f := range r.laneFields() {
		if f.lane == lane {
			*f.inFlight, *f.limit = inFlight, limit
			return
		}
	}
}

// LogFields returns the names of the ocl_capacity line's fields that hold
// the lane's count and limit; "" for an unknown lane.
func (n LaneName) LogFields() (inFlight, limit string) {
	var r record
	for _, f := range r.laneFields() {
		if f.lane == n {
			return f.inFlightKey, f.limitKey
		}
	}
	return "", ""
}

func appendKey(b []byte, k string) []byte {
	b = append(b, ',', '"')
	b = append(b, k...)
	return append(b, '"', ':')
}

func appendStr(b []byte, k, v string) []byte {
	if v == "" {
		return b
	}
	// HTML-safe, and a hostile header can't break the line (invalid UTF-8
	// becomes U+FFFD).
	return jsonenc.AppendStringHTMLSafe(appendKey(b, k), v)
}

func appendBool(b []byte, k string, v bool) []byte {
	return strconv.AppendBool(appendKey(b, k), v)
}

func appendInt(b []byte, k string, v int64) []byte {
	return strconv.AppendInt(appendKey(b, k), v, 10)
}

func appendIntP(b []byte, k string, v *int) []byte {
	if v == nil {
		return b
	}
	return appendInt(b, k, int64(*v))
}
