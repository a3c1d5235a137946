package http_test

import (
	"testing"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
)

// ocl is the OCL policy's names as a client reads them: the capacity
// headers the gateway sends under the built-in policy.
var ocl = policy.OCL().Names.Header()

// setNumber sets the lane number at the runtime-config key (OCL:
// "api_heavy.cluster", "tiers.preview", "per_user.core", ...) of c; it
// panics for a key c's policy has not.
func setNumber(c *settings.Config, key string, n int) {
	if err := c.SetNumber(key, n); err != nil {
		panic(err)
	}
}

// oclView is what an OCL call carries, in the terms of the classifier
// before the policy: the endpoint (the route's log name), the rows and the
// $match flags.
type oclView struct {
	Endpoint           string
	Rows               int
	Semantic, Reranker bool
}

// viewOf returns call as an oclView (the zero one when not heavy); it
// fails the test when a heavy call's route is not the OCL policy's, or a
// call that is not heavy has one.
func viewOf(tb testing.TB, call capgate.Call, heavy bool) oclView {
	tb.Helper()
	r := call.Route
	switch {
	case !heavy && r != nil:
		tb.Errorf("a call that is not heavy has route %q", r.Name)
		return oclView{}
	case !heavy:
		return oclView{}
	case r == nil || policy.OCL().Route(r.Name) != r:
		tb.Fatalf("heavy call with route %v, not one of the OCL policy's", r)
	}
	f := &call.Fields
	return oclView{Endpoint: r.LogName, Rows: f.Int(r.Field("rows")),
		Semantic: f.Bool(r.Field("semantic")), Reranker: f.Bool(r.Field("reranker"))}
}
