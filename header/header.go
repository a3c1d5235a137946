// Package header holds the HTTP protocol that the gateway and its clients
// share: the names of the capacity headers and the event metadata a client
// sends. It imports the standard library (not net/http) and the module's
// JSON helpers (internal/jsonenc, internal/jsontree), nothing else, so the
// client package can use it without the gateway's dependencies.
//
// The names are in Go's canonical form (as http.CanonicalHeaderKey gives
// them), so they index an http.Header directly without being
// canonicalised again on every call. Header names are case-insensitive on
// the wire.
package header

// The headers of every policy.
const (
	// RetryAfter carries the seconds to wait after the gate's own refusal.
	RetryAfter = "Retry-After"
	// RateLimitPolicy and RateLimit are the standard rate-limit fields
	// (draft-ietf-httpapi-ratelimit-headers), sent alongside the capacity
	// headers (a policy's names.ratelimit) so generic clients and proxies
	// can read the gate's state. Spelled as the draft spells them (the CORS
	// expose list shows them so); on the wire they go out in Go's
	// canonical form.
	RateLimitPolicy = "RateLimit-Policy"
	RateLimit       = "RateLimit"
	// RequestID identifies the call: the caller's own, or one the gateway
	// makes; the log line keeps it as cid.
	RequestID = "X-Request-Id"
	// IdempotentReplayed is "true" on the answer of a call that repeated
	// another (it joined the call running, or got its kept answer).
	IdempotentReplayed = "Idempotent-Replayed"
	// IdempotencyKey names a call so that a repeat of it joins it instead
	// of running again (draft-ietf-httpapi-idempotency-key-header).
	IdempotencyKey = "Idempotency-Key"
)

// Names are the capacity headers of one policy (its names section), in
// Go's canonical form: the ones the gateway sets on every gated response,
// and the ones a client sends. A lane's own limit and count headers are
// the policy's (policy.Lane.Headers), after Prefix.
type Names struct {
	Prefix   string // every capacity header starts with it, e.g. "Capgate-"
	Decision string // the call's decision
	Tier     string // the caller's tier
	// SuggestedConcurrency is how many calls the caller should keep in
	// flight; SuggestedSpacing how often the lane that refused a call
	// frees a place, in ms; Waited how long a call waited for a place, in
	// ms.
	SuggestedConcurrency string
	SuggestedSpacing     string
	Waited               string
	// Metadata is the client-metadata request header (a JSON object whose
	// scalar values are strings, ParseEventMetadata), and AwareField its
	// key that says the client handles refusals ("" when the policy has
	// none). RequestSource names what sent the call ("" none).
	Metadata      string
	AwareField    string
	RequestSource string
	// RefusalCode is the error_code of the gate's own 429 body: a client
	// tells a capacity refusal from the API's own 429 by it.
	RefusalCode string
}

// NewNames returns the names of a policy whose headers start with prefix,
// whose client-metadata header is metadata with its aware field, and
// whose request-source header is requestSource ("" for none of those).
func NewNames(prefix, metadata, awareField, requestSource string) Names {
	return Names{
		Prefix:               canonical(prefix),
		Decision:             canonical(prefix + "Decision"),
		Tier:                 canonical(prefix + "Tier"),
		SuggestedConcurrency: canonical(prefix + "Suggested-Concurrency"),
		SuggestedSpacing:     canonical(prefix + "Suggested-Spacing-Ms"),
		Waited:               canonical(prefix + "Waited-Ms"),
		Metadata:             canonical(metadata),
		AwareField:           awareField,
		RequestSource:        canonical(requestSource),
	}
}

// Lane returns the canonical name of a lane's header of the given suffix
// (a policy lane's headers.limit or headers.in_flight).
func (n Names) Lane(suffix string) string { return canonical(n.Prefix + suffix) }

// Generic are the names of a policy written for capgate (names.header_prefix
// Capgate-, client metadata Capgate-Client with capacity_aware, no
// request-source header, error code capacity_exceeded): the client's
// default.
var Generic = func() Names {
	n := NewNames("Capgate-", "Capgate-Client", "capacity_aware", "")
	n.RefusalCode = "capacity_exceeded"
	return n
}()

// canonical is net/textproto's canonical form of a header key (the package
// keeps no net/http dependency): each dash-separated word capitalized.
func canonical(k string) string {
	b := []byte(k)
	upper := true
	for i, c := range b {
		switch {
		case upper && 'a' <= c && c <= 'z':
			b[i] = c - 'a' + 'A'
		case !upper && 'A' <= c && c <= 'Z':
			b[i] = c - 'A' + 'a'
		}
		upper = c == '-'
	}
	return string(b)
}
