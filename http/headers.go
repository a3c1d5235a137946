package http

import (
	"net/http"
	"strconv"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/header"
)

// ExposedHeaders lists the headers a browser must be allowed to read on a
// gated response: the capacity headers (the waited time and the suggested
// spacing included) and Retry-After.
func ExposedHeaders() []string {
	return []string{header.Decision, header.Limit, header.InFlight, header.Tier,
		header.TierLimit, header.TierInFlight, header.SuggestedConcurrency, header.SuggestedSpacing,
		header.Waited, header.RetryAfter}
}

// SetHeaders sets the capacity headers of adm on h: every value that is
// known, and Retry-After only on the gate's own refusal. It does nothing
// for a nil h, or an admission that passed untouched (mode off).
func SetHeaders(h http.Header, adm *capgate.Admission) {
	if h == nil || adm == nil || adm.Decision() == capgate.DecisionNone {
		return
	}
	// The names are canonical: assigning them skips h.Set's
	// canonicalisation.
	set := func(k, v string) { h[k] = []string{v} }
	d := adm.Decision()
	set(header.Decision, string(d))
	lanes, counts := adm.Lanes(), adm.Counts()
	for i, l := range lanes {
		var limit, inFlight string
		switch l.Name {
		case capgate.LaneAPIHeavy:
			limit, inFlight = header.Limit, header.InFlight
		case capgate.LaneTier:
			limit, inFlight = header.TierLimit, header.TierInFlight
		default:
			continue
		}
		set(limit, strconv.Itoa(l.Limit))
		if counts != nil {
			set(inFlight, strconv.Itoa(counts[i]))
		}
	}
	if t := adm.Call().Tier; t != "" {
		set(header.Tier, string(t))
	}
	if n, ok := adm.Suggested(); ok {
		set(header.SuggestedConcurrency, strconv.Itoa(n))
	}
	if w, ok := adm.Waited(); ok {
		set(header.Waited, strconv.FormatInt(w.Milliseconds(), 10))
	}
	if ms, ok := adm.SpacingMS(); ok {
		set(header.SuggestedSpacing, strconv.FormatInt(ms, 10))
	}
	// Only the gate's own refusal gets its Retry-After; one the API sent
	// itself (its rate limit, a 503) is left alone.
	if s, ok := adm.RetryAfter(); ok && d == capgate.DecisionRefused {
		set(header.RetryAfter, strconv.Itoa(s))
	}
}

// RefusalBody returns the JSON body of the 429 of a refused call; nil
// unless adm was refused.
func RefusalBody(adm *capgate.Admission) []byte {
	if adm == nil || !adm.Refused() {
		return nil
	}
	scope, paused := adm.Scope(), false
	for _, l := range adm.Lanes() {
		if l.Name == scope {
			paused = l.Limit == 0
			break
		}
	}
	retry, _ := adm.RetryAfter()
	return refusalBody(scope, paused, retry)
}

// refusalBody returns the JSON body of the 429. The scope is one of the
// lane names, plain ASCII, so Go quoting is JSON quoting.
func refusalBody(scope capgate.LaneName, paused bool, retryAfter int) []byte {
	n := strconv.Itoa(retryAfter)
	b := make([]byte, 0, 160)
	b = append(b, `{"detail":"Matching is busy. Please retry in `...)
	b = append(b, n...)
	b = append(b, ` seconds.","error_code":"capacity_exceeded","scope":`...)
	b = strconv.AppendQuote(b, string(scope))
	b = append(b, `,"paused":`...)
	b = strconv.AppendBool(b, paused)
	b = append(b, `,"retry_after":`...)
	b = append(b, n...)
	return append(b, '}')
}
