package client

import (
	"encoding/json"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/capgate/capgate/header"
)

// The delays of the protocol (the refusal and the Mapper's constants).
const (
	// MinDelay is the floor of every wait after a 429 or 503, however the
	// delay was found: Retry-After: 0 waits a second.
	MinDelay = time.Second
	// DefaultBackoff is the first wait after a 429 that gave no usable
	// delay; it doubles with each such 429 of the call up to MaxBackoff.
	DefaultBackoff = 5 * time.Second
	// MaxBackoff caps DefaultBackoff's doubling.
	MaxBackoff = 60 * time.Second
	// errorBackoff is the first wait before retrying a 503 without a delay
	// or an ambiguous failure with an idempotency key; ×4 each retry.
	errorBackoff = 3 * time.Second
	// maxUnavailableDelay caps the delay a 503 asks for.
	maxUnavailableDelay = 60 * time.Second
	// maxRefusalBody is how much of a 429 or 503 body is read.
	maxRefusalBody = 64 << 10
	// MinSpacing is the floor of the pace a spacing hint
	// (the Suggested-Spacing-Ms header) sets: a broken header can't
	// make the client send faster than this.
	MinSpacing = 100 * time.Millisecond
)

// Where a delay came from.
const (
	sourceHeader  = "header"
	sourceBody    = "body"
	sourceDefault = "default"
)

// refusal is what a 429 or 503 says.
type refusal struct {
	kind   Kind
	scope  string // the lane of a capacity refusal
	paused bool
	tier   string // the Tier header, when sent
	delay  time.Duration
	source string // sourceHeader, sourceBody or sourceDefault
	// spacing is the server's Suggested-Spacing-Ms header; 0 when
	// absent or not a positive number.
	spacing time.Duration
}

// refusalBody is the part of the 429 body the client reads.
type refusalBody struct {
	ErrorCode  string
	Scope      string
	Paused     bool
	RetryAfter time.Duration
	HasRetry   bool
}

// readRefusalBody reads at most maxRefusalBody bytes of a 429 or 503 body
// and returns its fields; a body that is not a JSON object gives zero
// fields. Each field is read on its own, so one of the wrong type does not
// hide the others.
func readRefusalBody(r io.Reader) refusalBody {
	var b refusalBody
	data, err := io.ReadAll(io.LimitReader(r, maxRefusalBody))
	if err != nil {
		return b
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(data, &m) != nil {
		return b
	}
	_ = json.Unmarshal(m["error_code"], &b.ErrorCode)
	if b.ErrorCode == "" {
		// OpenAI's error shape, {"error": {"code": ...}}, which a policy
		// may give capgate's refusals (names.answers).
		var e struct {
			Code string `json:"code"`
		}
		if json.Unmarshal(m["error"], &e) == nil {
			b.ErrorCode = e.Code
		}
	}
	_ = json.Unmarshal(m["scope"], &b.Scope)
	_ = json.Unmarshal(m["paused"], &b.Paused)
	b.RetryAfter, b.HasRetry = bodyRetryAfter(m["retry_after"])
	return b
}

// bodyRetryAfter parses the body's retry_after: a finite JSON number ≥ 0
// of seconds (fractions allowed). A string such as "15" is not a number.
func bodyRetryAfter(raw json.RawMessage) (time.Duration, bool) {
	s := strings.TrimSpace(string(raw))
	if s == "" || s[0] == '"' {
		return 0, false
	}
	var n json.Number
	if json.Unmarshal(raw, &n) != nil {
		return 0, false
	}
	f, err := n.Float64()
	if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, false
	}
	return seconds(f), true
}

// headerRetryAfter parses a Retry-After header: a decimal number of
// seconds ≥ 0 (fractions allowed), or an HTTP-date, which gives the time
// from now until then, 0 if it has passed. An absent, negative or
// malformed value gives false.
func headerRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if isDecimal(v) {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsInf(f, 0) {
			return 0, false
		}
		return seconds(f), true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(t.Sub(now), 0), true
}

// isDecimal reports whether s is digits with at most one '.', no sign.
func isDecimal(s string) bool {
	digits, dots := 0, 0
	for _, c := range s {
		switch {
		case c >= '0' && c <= '9':
			digits++
		case c == '.':
			dots++
		default:
			return false
		}
	}
	return digits > 0 && dots <= 1
}

// seconds converts f seconds to a Duration, saturating instead of
// overflowing.
func seconds(f float64) time.Duration {
	if f >= float64(math.MaxInt64)/float64(time.Second) {
		return math.MaxInt64
	}
	return time.Duration(f * float64(time.Second))
}

// parseRefusal classifies a 429 or 503 and finds its delay: the
// Retry-After header; if that is absent or unusable, the body's
// retry_after; else the default (5 s doubling per earlier delay-less 429 of
// this call, n, up to 60 s; for a 503, 3 s × 4^n). Every delay is at least
// MinDelay; a 503's is at most 60 s (a 429's is capped later, by
// Transport.MaxRetryAfter). It reads and closes the body.
func parseRefusal(resp *http.Response, now time.Time, n int, names *header.Names) refusal {
	body := readRefusalBody(resp.Body)
	_ = resp.Body.Close()
	r := refusal{kind: RateLimit, tier: resp.Header.Get(names.Tier)}
	switch {
	case resp.StatusCode == http.StatusServiceUnavailable:
		r.kind = Unavailable
	case body.ErrorCode != "" && body.ErrorCode == names.RefusalCode:
		r.kind, r.scope, r.paused = Capacity, body.Scope, body.Paused
	}
	if r.kind == Capacity && r.scope == "" && resp.Header.Get(names.Decision) == "refused" {
		// A body in a policy's own shape may not say the lane: the
		// RateLimit field names it, and X-Should-Retry: false on the
		// gate's refusal says it is paused.
		r.scope = rateLimitScope(resp.Header.Get("RateLimit"))
		r.paused = r.paused || resp.Header.Get("X-Should-Retry") == "false"
	}
	if d, ok := headerRetryAfter(resp.Header.Get("Retry-After"), now); ok {
		r.delay, r.source = d, sourceHeader
	} else if body.HasRetry {
		r.delay, r.source = body.RetryAfter, sourceBody
	} else {
		r.source = sourceDefault
		if r.kind == Unavailable {
			r.delay = errorDelay(n)
		} else {
			r.delay = min(DefaultBackoff<<min(n, 4), MaxBackoff)
		}
	}
	if r.kind == Unavailable {
		r.delay = min(r.delay, maxUnavailableDelay)
	}
	r.delay = max(r.delay, MinDelay)
	if ms, err := strconv.ParseInt(strings.TrimSpace(resp.Header.Get(names.SuggestedSpacing)), 10, 64); err == nil && ms > 0 {
		r.spacing = time.Duration(min(ms, int64(time.Hour/time.Millisecond))) * time.Millisecond
	}
	return r
}

// errorDelay is the wait before error retry n (0-based): 3 s × 4^n.
func errorDelay(n int) time.Duration {
	return errorBackoff << (2 * min(n, 4))
}

// rateLimitScope returns the lane a RateLimit field names ("user" of
// `"user";r=0;t=5`), or "".
func rateLimitScope(v string) string {
	item, _, _ := strings.Cut(strings.TrimSpace(v), ";")
	if len(item) < 2 || item[0] != '"' || item[len(item)-1] != '"' {
		return ""
	}
	return item[1 : len(item)-1]
}
