package http

import (
	"github.com/capgate/capgate"
	"github.com/capgate/capgate/policy"
)

// testCall returns a call of the OCL policy's route ("match" or "rerank")
// of rows rows: what the gateway reads from such a request. semantic and
// reranker are the $match flags; a $rerank has neither. It panics for
// another route, or a flag the route lacks. (Package lanetest has its own,
// for the gate's tests.)
func testCall(route string, rows int, semantic, reranker bool) capgate.Call {
	r := policy.OCL().Route(route)
	if r == nil {
		panic("the OCL policy has no route " + route)
	}
	f := policy.NewFields(r)
	for name, b := range map[string]bool{"semantic": semantic, "reranker": reranker} {
		if i := r.Field(name); i >= 0 {
			f.SetBool(i, b)
		} else if b {
			panic("OCL route " + route + " has no field " + name)
		}
	}
	f.SetInt(r.Field("rows"), rows)
	return capgate.Call{Route: r, Fields: f}
}
