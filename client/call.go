package client

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Class is a heavy call's class. It picks the call's wait budget and which
// pauses hold it back.
type Class int

const (
	// Bulk is a batch of rows (a batch job's call):
	// nobody is watching it, so it may wait long (DefaultBulkBudget).
	Bulk Class = iota
	// Interactive is a call a person is watching, such as a single-row
	// lookup (DefaultInteractiveBudget). A refusal of a bulk call does not
	// hold it back unless the lane is paused.
	Interactive
)

func (c Class) String() string {
	if c == Interactive {
		return "interactive"
	}
	return "bulk"
}

// Call marks a request as heavy and describes it. Attach it to the
// request's context with WithCall; a request without one passes through
// the Transport untouched.
type Call struct {
	// Class is Bulk (the zero value) or Interactive.
	Class Class
	// User names whose call this is when one Transport carries calls of
	// several users (a load generator sharing one client). Pauses of scope
	// user, rate limits and the in-flight bound are kept per user. "" is
	// fine for a client that speaks for one user.
	User string
	// Tier is the user's tier, if known. When empty, the Transport uses the
	// tier the server last reported for User (the Tier header). It
	// decides which tier pauses hold the call back.
	Tier string
	// Lanes, if set, are the lanes of the server's policy the call takes
	// (a call of the built-in policy with semantic=true takes its kNN lane): a refusal of a shared lane
	// holds back only the calls that take it. nil: every call is held back
	// by such a refusal.
	Lanes []string
	// IdempotencyKey, when set, is sent in the Transport's
	// IdempotencyHeader on every attempt, unchanged, and allows the
	// Transport to retry an ambiguous failure (502, 504, a timeout or reset
	// after the request was sent). A key already set in that header on the
	// request counts too.
	IdempotencyKey string
	// Budget overrides the class's total wait budget when > 0.
	Budget time.Duration
	// Timeout, when > 0, is the longest the call itself may take at the
	// API. Each attempt is then cut off after Transport.ServerWait (the
	// gateway's wait for a slot) + Timeout; one cut off after it was sent
	// is an ambiguous failure. 0: attempts end only with the context.
	Timeout time.Duration
	// Result, when not nil, is filled in when the call ends, however it
	// ends.
	Result *Result
}

type callKey struct{}

// WithCall returns a copy of ctx that marks requests made with it as heavy
// calls described by c.
func WithCall(ctx context.Context, c Call) context.Context {
	return context.WithValue(ctx, callKey{}, c)
}

// CallFrom returns the Call attached to ctx by WithCall.
func CallFrom(ctx context.Context) (Call, bool) {
	c, ok := ctx.Value(callKey{}).(Call)
	return c, ok
}

// Result reports how a heavy call went.
type Result struct {
	Attempts     int           // requests sent (dial failures included)
	Capacity429  int           // capacity refusals received
	RateLimit429 int           // rate-limit 429s received
	Unavailable  int           // 503s received
	Retries      int           // error retries: dial failures, 503s, ambiguous failures with a key
	Waited       time.Duration // time held by pauses and backoffs (counts against the budget)
	Queued       time.Duration // time waiting for an in-flight slot (does not count)
	Decision     string        // the Decision header of the last response, "" if none
	Suggested    int           // the Suggested-Concurrency header of the last response, -1 if none
}

// Kind says which limit refused a call.
type Kind int

const (
	// Capacity is a capgate refusal: 429 with error_code capacity_exceeded.
	Capacity Kind = iota + 1
	// RateLimit is any other 429: a calls-per-period limit of the API.
	RateLimit
	// Unavailable is a 503.
	Unavailable
)

func (k Kind) String() string {
	switch k {
	case Capacity:
		return "capacity"
	case RateLimit:
		return "rate_limit"
	case Unavailable:
		return "unavailable"
	}
	return "unknown"
}

// ErrThrottled matches every *ThrottledError with errors.Is.
var ErrThrottled = errors.New("throttled")

// ErrOutcomeUnknown is wrapped in the error of a heavy call that failed
// after it was sent (a timeout or a reset connection) and was not retried,
// because it has no idempotency key or its retries ran out: the API may or
// may not have run it.
var ErrOutcomeUnknown = errors.New("outcome unknown")

// ThrottledError ends a heavy call that the server kept refusing until the
// call's wait budget ran out, or whose next wait would not fit in it. The
// call was not run; it may be tried again later (after Until).
type ThrottledError struct {
	Kind       Kind          // the limit that refused it
	Scope      string        // the lane of a capacity refusal (user, tier, api_heavy, ...); "" otherwise
	Paused     bool          // the scope's limit is 0 (staff paused it)
	RetryAfter time.Duration // how much longer the server asked to wait when the call gave up
	Until      time.Time     // when that wait ends
	Waited     time.Duration // time the call spent waiting
	Attempts   int           // requests sent
}

func (e *ThrottledError) Error() string {
	s := "throttled by " + e.Kind.String()
	if e.Scope != "" {
		s += " (" + e.Scope
		if e.Paused {
			s += ", paused"
		}
		s += ")"
	}
	return fmt.Sprintf("%s: retry in %s; waited %s over %d attempts",
		s, e.RetryAfter.Round(time.Millisecond), e.Waited.Round(time.Millisecond), e.Attempts)
}

// Is reports whether target is ErrThrottled.
func (e *ThrottledError) Is(target error) bool { return target == ErrThrottled }
