package genlog

import (
	"bytes"
	"fmt"
	"math/rand/v2"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/policy"
)

// callMix makes the calls of a generated log from a skewed mix of users:
// user k is picked with a probability falling with k, and its tier
// follows k.
type callMix struct {
	users int
	aware float64
	// tiers holds tier i of the policy i+1 times, and user k has tier
	// tiers[k % len]: fewer users of the first tiers (OCL: 1 staff, 2 core,
	// 3 early_access, 4 preview in 10).
	tiers  []string
	routes []*policy.Route
	ocl    *oclRoutes // the built-in OCL policy's routes, nil for another
}

// oclRoutes are the OCL policy's routes and the indexes of their fields.
type oclRoutes struct {
	match, rerank                        *policy.Route
	semantic, reranker, matchRows, rRows int
}

func newCallMix(o Options) *callMix {
	p := o.Policy
	m := &callMix{users: o.Users, aware: o.Aware, routes: p.Routes}
	for i, t := range p.Tiers() {
		for range i + 1 {
			m.tiers = append(m.tiers, t)
		}
	}
	if isOCL(p) {
		match, rerank := p.Route("match"), p.Route("rerank")
		m.ocl = &oclRoutes{match: match, rerank: rerank,
			semantic: match.Field("semantic"), reranker: match.Field("reranker"),
			matchRows: match.Field("rows"), rRows: rerank.Field("rows")}
	}
	return m
}

// isOCL reports whether p is the built-in OCL policy (or a copy of its
// file), whose call mix keeps the logs of a seed what they have always
// been.
func isOCL(p *policy.Policy) bool {
	ocl := policy.OCL()
	return p == ocl || bytes.Equal(p.Source(), ocl.Source())
}

// call returns a random heavy call.
func (m *callMix) call(rng *rand.Rand) capgate.Call {
	u := rng.Float64()
	k := int(float64(m.users) * u * u)
	c := capgate.Call{
		UserID: fmt.Sprintf("user%d", k),
		Tier:   m.tiers[k%len(m.tiers)],
		Aware:  rng.Float64() < m.aware,
		CID:    fmt.Sprintf("c%x", rng.Uint64()),
	}
	if m.ocl != nil {
		m.ocl.route(rng, &c)
	} else {
		m.route(rng, &c)
	}
	if rng.IntN(2) == 0 {
		c.QueueMS, c.HasQueueMS = int64(rng.IntN(2000)), true
	}
	return c
}

// route gives c one of the OCL routes: 7 in 10 a $match (6 in 10 of them
// semantic, the others reranked; 3 in 10 single-row, else 2 to 51 rows),
// else a $rerank of 1 to 20 rows.
func (o *oclRoutes) route(rng *rand.Rand, c *capgate.Call) {
	if rng.IntN(10) < 7 {
		c.Route = o.match
		c.Fields = policy.NewFields(o.match)
		semantic := rng.IntN(10) < 6
		c.Fields.SetBool(o.semantic, semantic)
		c.Fields.SetBool(o.reranker, !semantic || rng.IntN(2) == 0)
		rows := 1
		if rng.IntN(10) >= 3 {
			rows = 2 + rng.IntN(50)
		}
		c.Fields.SetInt(o.matchRows, rows)
		return
	}
	c.Route = o.rerank
	c.Fields = policy.NewFields(o.rerank)
	c.Fields.SetInt(o.rRows, 1+rng.IntN(20))
}

// keyValues is how many values a string field takes: few, so that a lane
// keyed by one (a model) fills.
const keyValues = 4

// route gives c one of the policy's routes, each as likely, with random
// fields: a bool field true one time in two, an int field from 1 to 20,
// a string field one of keyValues values "<field>-<n>", the first the
// most common. (The routes' predicates are not consulted: the gate is
// handed the call as the decision service would be.)
func (m *callMix) route(rng *rand.Rand, c *capgate.Call) {
	r := m.routes[rng.IntN(len(m.routes))]
	c.Route = r
	c.Fields = policy.NewFields(r)
	for i, f := range r.Fields {
		switch f.Kind.Type() {
		case policy.TypeBool:
			c.Fields.SetBool(i, rng.IntN(2) == 0)
		case policy.TypeInt:
			c.Fields.SetInt(i, 1+rng.IntN(20))
		default:
			u := rng.Float64()
			c.Fields.SetString(i, fmt.Sprintf("%s-%d", f.Name, int(keyValues*u*u)))
		}
	}
}
