package capgate

import (
	"strconv"
	"time"

	"github.com/capgate/capgate/internal/jsonenc"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
)

// record is the log line of one gated call, laid out as its policy says:
// the event name, the key of the route's name, the call's fields and
// classes, each lane's count and limit under the lane's log names, and the
// client-metadata keys kept. Zero or unset values are left out of the line
// (but a bool or int field, a class, is always written); the pointer
// fields distinguish "0" from "unknown".
type record struct {
	Event    string
	Decision Decision
	Mode     settings.Mode
	Enforced bool
	RouteKey string // the log key of the route's name
	Route    string // the route's LogName
	Fields   []logField
	Classes  []logClass
	Tier     string
	UserID   string
	Scope    string
	Full     []string
	Lanes    []logLane // the planned lanes, in plan order

	Suggested  *int
	RetryAfter *int
	HeldMS     *int64
	QueueMS    *int64
	WaitMS     *int64 // how long the call waited for a slot; nil: it never waited
	Usage      *int64 // what the upstream reported the call used (SetUsage); nil: nothing
	LeaseLost  bool
	Error      string
	Degraded   bool   // decided by the gateway's local lanes alone
	DedupOf    string // the cid of the call this one repeated (joined, replayed)
	DedupError string // why the call could not be checked for repeats
	Resumed    bool   // a running call counted again (AdmitOptions.Resumed)
	Task       string
	// RequestSource and Metadata are attribution: the request-source
	// header's value and the client-metadata keys the policy keeps.
	RequestSource string
	Metadata      []logAttr
	CID           string
	TS            time.Time // when the call finished
}

// logField is one field of the call in the line.
type logField struct {
	Key  string
	Type policy.Type
	B    bool
	N    int
	S    string
}

// logClass is whether the call is of a class.
type logClass struct {
	Key string
	Is  bool
}

// logLane is one lane's count and limit in the line, under its log keys.
// It holds values, not pointers: a record built on the stack stays there.
type logLane struct {
	Name                  string // the lane's name, the key of its seats
	InFlightKey, LimitKey string
	InFlight              int
	Known                 bool // InFlight is known
	Limit                 int
	Seats                 int // the call's seats in the lane
}

// logAttr is one client-metadata key and its value.
type logAttr struct{ Key, Value string }

// AppendJSON appends the record as one compact JSON object, fields in the
// documented order, nulls and empty strings left out.
func (r *record) AppendJSON(b []byte) []byte {
	b = append(b, `{"event":`...)
	b = strconv.AppendQuote(b, r.Event) // an event name is a policy identifier
	b = appendStr(b, "decision", string(r.Decision))
	b = appendStr(b, "mode", string(r.Mode))
	b = appendBool(b, "enforced", r.Enforced)
	if r.RouteKey != "" {
		b = appendStr(b, r.RouteKey, r.Route)
	}
	for i := range r.Fields {
		f := &r.Fields[i]
		switch f.Type {
		case policy.TypeBool:
			b = appendBool(b, f.Key, f.B)
		case policy.TypeInt:
			b = appendInt(b, f.Key, int64(f.N))
		default:
			b = appendStr(b, f.Key, f.S)
		}
	}
	for _, c := range r.Classes {
		b = appendBool(b, c.Key, c.Is)
	}
	b = appendStr(b, "tier", r.Tier)
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
	for _, l := range r.Lanes {
		if l.Known {
			b = appendInt(b, l.InFlightKey, int64(l.InFlight))
		}
		b = appendInt(b, l.LimitKey, int64(l.Limit))
	}
	b = appendSeats(b, r.Lanes)
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
	if r.Usage != nil {
		b = appendInt(b, "usage", *r.Usage)
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
	for _, m := range r.Metadata {
		b = appendStr(b, m.Key, m.Value)
	}
	b = appendStr(b, "cid", r.CID)
	if !r.TS.IsZero() {
		b = append(b, `,"ts":"`...)
		b = r.TS.UTC().AppendFormat(b, "2006-01-02T15:04:05.000Z07:00")
		b = append(b, '"')
	}
	return append(b, '}')
}

// logKeys returns the log line's keys of lane name's count and limit
// under p; "" for a lane p does not have.
func logKeys(p *policy.Policy, name LaneName) (inFlight, limit string) {
	if l := p.Lane(string(name)); l != nil {
		return l.Log.InFlight, l.Log.Limit
	}
	return "", ""
}

// appendSeats appends "seats": the call's seats by lane name, for the lanes
// where it took more than one; nothing when it took one in each (every call
// of a policy without seats: the line is as it was before seats).
func appendSeats(b []byte, lanes []logLane) []byte {
	n := 0
	for _, l := range lanes {
		if l.Seats <= 1 {
			continue
		}
		if n == 0 {
			b = append(b, `,"seats":{`...)
		} else {
			b = append(b, ',')
		}
		b = strconv.AppendQuote(b, l.Name) // lane names are ASCII identifiers
		b = append(b, ':')
		b = strconv.AppendInt(b, int64(l.Seats), 10)
		n++
	}
	if n > 0 {
		b = append(b, '}')
	}
	return b
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
