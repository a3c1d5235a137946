package answer

import (
	"net/http"
	"strconv"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/header"
)

// rateLimitFields are the standard fields' names, for the CORS expose list.
var rateLimitFields = []string{header.RateLimitPolicy, header.RateLimit}

// The fields' names in canonical form, as headerWriter assigns them.
var (
	rateLimitPolicyKey = http.CanonicalHeaderKey(header.RateLimitPolicy)
	rateLimitKey       = http.CanonicalHeaderKey(header.RateLimit)
)

// quotaUnit is the draft's quota unit for a cap on calls in flight: the
// quota is freed as calls end, not over a time window, so the policy has
// no w parameter.
const quotaUnit = "concurrent-requests"

// rateLimit sets RateLimit-Policy and RateLimit for the lane in
// scope of adm: the lane that was full (the refusal's scope) or, when none
// was, the one with the least room left. Both are Structured Field lists
// of one item named after the lane:
//
//	RateLimit-Policy: "user";q=1;qu="concurrent-requests"
//	RateLimit: "user";r=0;t=5
//
// q is the lane's limit, r what is left of it after this call (0 when
// full), t the Retry-After seconds of a refusal. Nothing is set when the
// counts are unknown (an unavailable call).
func (w *headerWriter) rateLimit(o *capgate.Outcome) {
	if o == nil {
		return
	}
	lanes, counts := o.Lanes, o.Counts
	if len(lanes) == 0 || len(counts) != len(lanes) {
		return
	}
	i := laneInScope(o.Scope, lanes, counts)
	name := lanes[i].Name
	from := w.begin()
	w.writeQuoted(name)
	w.text.WriteString(";q=")
	w.writeInt(int64(lanes[i].Limit))
	w.text.WriteString(`;qu="` + quotaUnit + `"`)
	w.setText(rateLimitPolicyKey, from)
	from = w.begin()
	w.writeQuoted(name)
	w.text.WriteString(";r=")
	w.writeInt(int64(max(lanes[i].Limit-counts[i], 0)))
	if s := o.RetryAfter; s > 0 && o.Decision == capgate.DecisionRefused {
		w.text.WriteString(";t=")
		w.writeInt(int64(s))
	}
	w.setText(rateLimitKey, from)
}

// laneInScope returns the index of the scope lane, else of the lane with
// the least room left (the first such in lane order).
func laneInScope(scope capgate.LaneName, lanes []capgate.Lane, counts []int) int {
	best := 0
	for i, l := range lanes {
		if scope != "" && l.Name == scope {
			return i
		}
		if l.Limit-counts[i] < lanes[best].Limit-counts[best] {
			best = i
		}
	}
	return best
}

// writeQuoted writes the lane name as a Go-quoted string, which for a lane
// name (plain ASCII) is the Structured Field string too.
func (w *headerWriter) writeQuoted(name capgate.LaneName) {
	var b [64]byte
	w.text.Write(strconv.AppendQuote(b[:0], string(name)))
}
