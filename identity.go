package capgate

import (
	"context"
	"net/http"
)

// Identifier tells who makes a request: the gateway's identity resolvers
// (upstream lookup, trusted headers, a tokens file) implement it, and the
// staff API uses the same one.
type Identifier interface {
	// Identify returns the caller of r. ok is false when r carries no
	// valid credentials (anonymous, or the API answered 401). An error
	// means the lookup itself failed (timeout, upstream error): the gate
	// makes the call unavailable and never refuses it for that.
	Identify(ctx context.Context, r *http.Request) (c Caller, ok bool, err error)
}
