package answer

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/header"
	"github.com/capgate/capgate/policy"
)

// ExposedHeaders lists the headers a browser must be allowed to read on a
// gated response under policy p (nil: the built-in one): the capacity
// headers (each lane's, the waited time and the suggested spacing
// included) and Retry-After.
func ExposedHeaders(p *policy.Policy) []string {
	return append([]string(nil), formatOf(p).exposed...)
}

// SetHeaders sets the capacity headers of o on h: every value that is
// known, and Retry-After (with the policy's Retry-After-Ms and
// X-Should-Retry) only on the gate's own refusal. It does nothing
// for a nil h, or a call that passed untouched (mode off).
func SetHeaders(h http.Header, o capgate.Outcome) {
	if h == nil || o.Decision == capgate.DecisionNone {
		return
	}
	w := headerWriter{h: h}
	w.capacity(&o)
	w.flush()
}

// SetGated sets on h every header a gated call's response carries: the
// capacity headers (Retry-After and the policy's retry headers on the
// gate's own refusal), the RateLimit
// fields when the policy sends them, the CORS expose list (the API's own,
// with the capacity headers added) and X-Request-Id (rid), in one pass at
// two allocations. The gateway sets them on the API's response and on its
// own 429; the decision service hands them to an app that decides inside
// itself, so its responses carry what the gateway's would.
func SetGated(h http.Header, o capgate.Outcome, rid string) {
	if h == nil {
		return
	}
	w := headerWriter{h: h}
	f := formatOf(policyOf(&o))
	if o.Decision != capgate.DecisionNone {
		w.capacity(&o)
	}
	if f.rateLimit {
		w.rateLimit(&o)
	}
	w.set(ExposeHeadersKey, exposeValue(h, f))
	w.set(header.RequestID, rid)
	w.flush()
}

// maxHeaderValues is how many values a headerWriter holds: the most a
// gated response gets is 16 (Retry-After-Ms and X-Should-Retry
// included).
const maxHeaderValues = 18

// headerWriter sets header values at two allocations in all, not two
// each: the numbers and other built text go into one strings.Builder, and
// each value's one-element slice is carved from one backing array
// (capped, so that appending to one never reaches the next). The keys
// must be canonical: they are assigned as they are.
type headerWriter struct {
	h    http.Header
	n    int
	vals [maxHeaderValues]headerValue
	text strings.Builder
}

// headerTextSize is room for all the text of a gated call's values.
const headerTextSize = 160

// headerValue is one value: lit, or text[from:to] when to > from.
type headerValue struct {
	key      string
	lit      string
	from, to int
}

// set sets k to the string v.
func (w *headerWriter) set(k, v string) {
	if w.n == len(w.vals) {
		w.h[k] = []string{v}
		return
	}
	w.vals[w.n] = headerValue{key: k, lit: v}
	w.n++
}

// begin returns where the next value's text starts.
func (w *headerWriter) begin() int {
	if w.text.Cap() == 0 {
		w.text.Grow(headerTextSize)
	}
	return w.text.Len()
}

// setText sets k to the text written since from.
func (w *headerWriter) setText(k string, from int) {
	if w.n == len(w.vals) {
		w.h[k] = []string{w.text.String()[from:]}
		return
	}
	w.vals[w.n] = headerValue{key: k, from: from, to: w.text.Len()}
	w.n++
}

// writeInt writes n in decimal to the text.
func (w *headerWriter) writeInt(n int64) {
	var b [20]byte
	w.text.Write(strconv.AppendInt(b[:0], n, 10))
}

func (w *headerWriter) setInt(k string, n int64) {
	from := w.begin()
	w.writeInt(n)
	w.setText(k, from)
}

// flush assigns the values set to h.
func (w *headerWriter) flush() {
	if w.n == 0 {
		return
	}
	text := w.text.String()
	vals := make([]string, w.n)
	for i, v := range w.vals[:w.n] {
		vals[i] = v.lit
		if v.to > v.from {
			vals[i] = text[v.from:v.to]
		}
		w.h[v.key] = vals[i : i+1 : i+1]
	}
	w.n = 0
}

// capacity sets the capacity headers of o (see SetHeaders), which has a
// decision. The names are canonical.
func (w *headerWriter) capacity(o *capgate.Outcome) {
	n := formatOf(policyOf(o))
	d := o.Decision
	w.set(n.Decision, string(d))
	lanes, counts := o.Lanes, o.Counts
	for i, l := range lanes {
		if l.Spec == nil {
			continue
		}
		lw := n.lanes[l.Spec.Index()]
		if lw.limit == "" {
			continue
		}
		w.setInt(lw.limit, int64(l.Limit))
		if counts != nil {
			w.setInt(lw.inFlight, int64(counts[i]))
		}
	}
	if t := o.Call.Tier; t != "" {
		w.set(n.Tier, t)
	}
	if len(lanes) > 0 {
		w.setInt(n.SuggestedConcurrency, int64(o.Suggested))
	}
	if o.Queued {
		w.setInt(n.Waited, o.Waited.Milliseconds())
	}
	if o.Spacing > 0 {
		// whole milliseconds, rounded up
		w.setInt(n.SuggestedSpacing, int64((o.Spacing+time.Millisecond-1)/time.Millisecond))
	}
	// Only the gate's own refusal gets its Retry-After; one the API sent
	// itself (its rate limit, a 503) is left alone.
	if s := o.RetryAfter; s > 0 && d == capgate.DecisionRefused {
		w.setInt(header.RetryAfter, int64(s))
		if n.retryAfterMS {
			w.setInt(RetryAfterMSKey, int64(s)*1000)
		}
	}
	if n.shouldRetry && d == capgate.DecisionRefused {
		_, paused := refusalScope(o)
		w.set(ShouldRetryKey, strconv.FormatBool(shouldRetry(http.StatusTooManyRequests, paused)))
	}
}
