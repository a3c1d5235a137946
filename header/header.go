// Package header holds the HTTP protocol that the gateway and its clients
// share: the names of the capacity headers and the event metadata a client
// sends. It imports the standard library (not net/http) and the module's
// JSON helpers (internal/jsonenc, internal/jsontree), nothing else, so the
// client package can use it without the gateway's dependencies.
//
// The names are in Go's canonical form (as http.CanonicalHeaderKey gives
// them), so they index an http.Header directly without being
// canonicalised again on every call. Header names are case-insensitive on
// the wire; the documentation spells them X-OCL-….
package header

// The capacity headers the gateway sets on a gated response.
const (
	Decision             = "X-Ocl-Capacity-Decision"
	Limit                = "X-Ocl-Capacity-Limit"
	InFlight             = "X-Ocl-Capacity-In-Flight"
	Tier                 = "X-Ocl-Capacity-Tier"
	TierLimit            = "X-Ocl-Capacity-Tier-Limit"
	TierInFlight         = "X-Ocl-Capacity-Tier-In-Flight"
	SuggestedConcurrency = "X-Ocl-Capacity-Suggested-Concurrency"
	SuggestedSpacing     = "X-Ocl-Capacity-Suggested-Spacing-Ms"
	// Waited is set on the response of a call that waited for a slot: how
	// long it waited, in whole milliseconds.
	Waited = "X-Ocl-Capacity-Waited-Ms"
	// RetryAfter carries the seconds to wait after the gate's own refusal.
	RetryAfter = "Retry-After"
	// RateLimitPolicy and RateLimit are the standard rate-limit fields
	// (draft-ietf-httpapi-ratelimit-headers), sent alongside the capacity
	// headers so generic clients and proxies can read the gate's state.
	// Spelled as the draft spells them (the CORS expose list shows them so);
	// on the wire they go out in Go's canonical form, as every name here.
	RateLimitPolicy = "RateLimit-Policy"
	RateLimit       = "RateLimit"
	// RequestID identifies the call: the caller's own, or one the gateway
	// makes; the log line keeps it as cid.
	RequestID = "X-Request-Id"
	// IdempotentReplayed is "true" on the answer of a call that repeated
	// another (it joined the call running, or got its kept answer).
	IdempotentReplayed = "Idempotent-Replayed"
)

// The request headers a client sends.
const (
	// EventMetadata carries the call's metadata, a JSON object whose scalar
	// values are strings (ParseEventMetadata).
	EventMetadata = "X-Ocl-Event-Metadata"
	// RequestSource names what sent the call; the log line keeps its first
	// 50 characters.
	RequestSource = "X-Ocl-Request-Source"
	// IdempotencyKey names a call so that a repeat of it joins it instead
	// of running again (draft-ietf-httpapi-idempotency-key-header).
	IdempotencyKey = "Idempotency-Key"
)
