package answer

import (
	"net/http"
	"strconv"
	"strings"

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

// SetHeaders sets the capacity headers of adm on h: every value that is
// known, and Retry-After (with the policy's Retry-After-Ms and
// X-Should-Retry) only on the gate's own refusal. It does nothing
// for a nil h, or an admission that passed untouched (mode off).
func SetHeaders(h http.Header, adm *capgate.Admission) {
	if h == nil || adm == nil || adm.Decision() == capgate.DecisionNone {
		return
	}
	w := headerWriter{h: h}
	w.capacity(adm)
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
func SetGated(h http.Header, adm *capgate.Admission, rid string) {
	if h == nil {
		return
	}
	w := headerWriter{h: h}
	f := formatOf(policyOf(adm))
	if adm != nil && adm.Decision() != capgate.DecisionNone {
		w.capacity(adm)
	}
	if f.rateLimit {
		w.rateLimit(adm)
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

// capacity sets the capacity headers of adm (see SetHeaders), which has a
// decision. The names are canonical.
func (w *headerWriter) capacity(adm *capgate.Admission) {
	n := formatOf(adm.Policy())
	d := adm.Decision()
	w.set(n.Decision, string(d))
	lanes, counts := adm.Lanes(), adm.Counts()
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
	if t := adm.Call().Tier; t != "" {
		w.set(n.Tier, t)
	}
	if k, ok := adm.Suggested(); ok {
		w.setInt(n.SuggestedConcurrency, int64(k))
	}
	if d, ok := adm.Waited(); ok {
		w.setInt(n.Waited, d.Milliseconds())
	}
	if ms, ok := adm.SpacingMS(); ok {
		w.setInt(n.SuggestedSpacing, ms)
	}
	// Only the gate's own refusal gets its Retry-After; one the API sent
	// itself (its rate limit, a 503) is left alone.
	if s, ok := adm.RetryAfter(); ok && d == capgate.DecisionRefused {
		w.setInt(header.RetryAfter, int64(s))
		if n.retryAfterMS {
			w.setInt(RetryAfterMSKey, int64(s)*1000)
		}
	}
	if n.shouldRetry && d == capgate.DecisionRefused {
		_, paused := refusalScope(adm)
		w.set(ShouldRetryKey, strconv.FormatBool(shouldRetry(http.StatusTooManyRequests, paused)))
	}
}
