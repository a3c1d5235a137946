package http

import (
	"context"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/policy"
)

// A call whose cost is in its body (a lane keyed by the body's model,
// seats from its max_tokens: policy.Route.CostFromBody) and whose body
// capgate can't read as the API would — NaN or Infinity, which Python's
// JSON reader takes; UTF-16 or UTF-32 without a charset, which it
// detects; a cost field it can't read; a body larger than
// --max-body-bytes or compressed — is never the cheap call. The evaluator
// counts it at its most (its seats the route's most in every lane, its
// model "(unreadable)"); where the call is enforced and the route does not
// say unreadable_body: max, the gateway refuses it with 400 instead. In
// shadow, or for a call not enforced, capgate refuses nothing: it goes
// ahead, counted at its most.

// detailBodyUnreadable is the detail of the 400 of a body capgate can't
// read (its error code: policy.AnswerBodyUnreadable's name).
const detailBodyUnreadable = "The request body can't be read as JSON: send JSON in UTF-8, without NaN or Infinity, within the size the gateway reads."

// refuseUnreadable reports whether call is refused for a body capgate
// can't read: its cost is in the body, the body was not read, its route
// refuses such calls, and the config in force enforces the call.
func (m *Middleware) refuseUnreadable(ctx context.Context, call capgate.Call) bool {
	r := call.Route
	if r == nil || call.Fields.Route() != r || !r.CostFromBody() || call.Fields.BodyKnown() || r.UnreadableBody != policy.UnreadableRefuse {
		return false
	}
	if m.gate.Source == nil {
		return false
	}
	return m.gate.Source.Config(ctx).Enforces(call.Aware)
}
