package capgate

import (
	"strconv"
	"time"

	"github.com/capgate/capgate/internal/jsonenc"
	"github.com/capgate/capgate/internal/truncate"
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

// record returns the call's log record, laid out by its policy. Its
// timestamp and held_ms are set once the call is released. The values the
// record's slices and pointer fields point to live in one allocation.
func (a *Admission) record() record { return a.fillRecord(new(recordValues)) }

// appendLine appends the call's log line to b: its record, built on the
// stack (the line is what outlives the call, not the record).
func (a *Admission) appendLine(b []byte) []byte {
	var v recordValues
	r := a.fillRecord(&v)
	return r.AppendJSON(b)
}

// fillRecord returns the call's record, its slices and pointer fields
// pointing into v.
func (a *Admission) fillRecord(v *recordValues) record {
	o := &a.out
	if o.Policy == nil { // not decided (a record made before, for analyze and tests)
		oc := a.Outcome()
		o = &oc
	}
	p := o.Policy
	r := record{
		Event:         p.Names.LogEvent,
		Decision:      o.Decision,
		Mode:          o.Mode,
		Enforced:      o.Enforced,
		RouteKey:      p.Names.LogRouteKey,
		Route:         policy.RouteLogName(o.Call.Route),
		Tier:          a.out.Call.Tier,
		UserID:        a.out.Call.UserID,
		Scope:         string(o.Scope),
		RequestSource: a.out.Call.RequestSource,
		CID:           a.out.Call.CID,
	}
	if a.g != nil { // nil: the zero Admission
		r.Task = a.g.TaskID
	}
	fields := v.fields[:0]
	for pi, fi := range p.Fields() {
		f := logField{Key: fi.Name, Type: fi.Type}
		if rt := a.out.Call.Route; rt != nil {
			if i := rt.PolicyField(pi); i >= 0 {
				switch fi.Type {
				case policy.TypeBool:
					f.B = a.out.Call.Fields.Bool(i)
				case policy.TypeInt:
					f.N = a.out.Call.Fields.Int(i)
				default:
					f.S = a.out.Call.Fields.String(i)
				}
			}
		}
		fields = append(fields, f)
	}
	r.Fields = fields
	classes := v.classes[:0]
	for _, c := range p.Classes {
		classes = append(classes, logClass{Key: c.Name, Is: a.out.Call.Route != nil && c.Has(a.out.Call.Route, &a.out.Call.Fields)})
	}
	r.Classes = classes
	full := v.full[:0]
	lanes := v.lanes[:0]
	for i, l := range o.Lanes {
		if laneSet(o.Full).has(i) {
			full = append(full, string(l.Name))
		}
		ll := logLane{Name: string(l.Name), Seats: l.seats()}
		if l.Spec != nil {
			ll.InFlightKey, ll.LimitKey = l.Spec.Log.InFlight, l.Spec.Log.Limit
		} else {
			ll.InFlightKey, ll.LimitKey = logKeys(p, l.Name)
		}
		if ll.InFlightKey == "" {
			continue
		}
		if o.Counts != nil {
			ll.InFlight, ll.Known = o.Counts[i], true
		}
		ll.Limit = l.Limit
		lanes = append(lanes, ll)
	}
	r.Lanes = lanes
	if len(full) > 0 {
		r.Full = full
	}
	meta := v.meta[:0]
	for i, k := range p.Names.MetadataLog {
		if i < len(a.out.Call.Metadata) {
			meta = append(meta, logAttr{Key: k.Key, Value: a.out.Call.Metadata[i]})
		}
	}
	r.Metadata = meta
	if len(o.Lanes) > 0 {
		v.suggested = o.Suggested
		r.Suggested = &v.suggested
	}
	if o.RetryAfter > 0 {
		v.retryAfter = o.RetryAfter
		r.RetryAfter = &v.retryAfter
	}
	if a.out.Call.HasQueueMS {
		v.queueMS = a.out.Call.QueueMS
		r.QueueMS = &v.queueMS
	}
	if o.Queued {
		v.waitMS = o.Waited.Milliseconds()
		r.WaitMS = &v.waitMS
	}
	if n, ok := a.Usage(); ok {
		v.usage = n
		r.Usage = &v.usage
	}
	a.mu.Lock()
	if a.err != nil {
		r.Error = truncate.Runes(a.err.Error(), maxErrorLen)
	}
	r.LeaseLost, r.TS = a.leaseLost, a.finished
	r.Degraded = a.out.Degraded
	r.DedupOf = a.repeatOf
	if a.repeatErr != nil {
		r.DedupError = truncate.Runes(a.repeatErr.Error(), maxErrorLen)
	}
	r.Resumed = a.resumed
	if a.released && a.heldMS >= 0 {
		v.heldMS = a.heldMS
		r.HeldMS = &v.heldMS
	}
	a.mu.Unlock()
	return r
}

// recordValues holds what a record's slices and pointer fields point to:
// room for a usual call's, a larger one's appended beyond.
type recordValues struct {
	fields                [policy.MaxFields]logField
	classes               [2]logClass
	lanes                 [laneBufLen]logLane
	full                  [laneBufLen]string
	meta                  [policy.MaxMetadataLog]logAttr
	suggested, retryAfter int
	queueMS, waitMS       int64
	heldMS                int64
	usage                 int64
}
