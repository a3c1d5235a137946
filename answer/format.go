// Package answer writes the answers capgate gives an API's callers itself,
// in a policy's names: the capacity headers of a gated call's response
// (SetHeaders, SetGated: the decision, each lane's limit and count, the
// hints, Retry-After, the RateLimit fields, the CORS expose list), the 429
// of a refused call (Refusal), and the bodies of capgate's own errors
// (Error, KeyError, Text). The gateway (capgatehttp) and the decision
// service (decide) both write through it, so an app's answer is the
// gateway's byte for byte.
//
// Every body capgate writes to a caller is made in this package and
// nowhere else: a change of their shape (a policy's template, say) is a
// change here alone.
package answer

import (
	"strings"
	"sync"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/header"
	"github.com/capgate/capgate/internal/jsonenc"
	"github.com/capgate/capgate/policy"
)

// format is a policy's answer: the capacity headers (canonical), each
// lane's limit and count headers, the CORS expose list and the 429 body's
// parts. Made once per policy (formatOf).
type format struct {
	header.Names
	lanes     []laneHeaders // by the policy's lane index
	exposed   []string      // the expose list's names, in order
	exposeAll string        // exposed and the RateLimit fields, joined
	rateLimit bool          // send the RateLimit fields
	// The 429 body's detail, split at each {retry_after}, and its
	// error_code (each JSON-quoted already, without the quotes).
	detail []string
	code   string
}

// laneHeaders are one lane's limit and count headers ("" for a lane that
// sends none).
type laneHeaders struct {
	limit, inFlight string
}

var formats sync.Map // *policy.Policy → *format; a cache of values made from immutable policies

// formatOf returns p's answer format (nil: the built-in policy's).
func formatOf(p *policy.Policy) *format {
	if p == nil {
		p = policy.OCL()
	}
	if f, ok := formats.Load(p); ok {
		return f.(*format)
	}
	actual, _ := formats.LoadOrStore(p, newFormat(p))
	return actual.(*format)
}

func newFormat(p *policy.Policy) *format {
	n := p.Names
	f := &format{
		Names:     n.Header(),
		lanes:     make([]laneHeaders, len(p.Lanes)),
		rateLimit: n.RateLimit,
	}
	// The expose list: the decision, each lane's headers in lane order
	// with the caller's tier before the first tier lane's (after them all
	// without one), the suggestions, the time waited and Retry-After.
	f.exposed = append(f.exposed, f.Decision)
	tierListed := false
	for i, l := range p.Lanes {
		if l.Headers == nil {
			continue
		}
		if l.ByTier() && !tierListed {
			f.exposed, tierListed = append(f.exposed, f.Tier), true
		}
		f.lanes[i] = laneHeaders{limit: f.Lane(l.Headers.Limit), inFlight: f.Lane(l.Headers.InFlight)}
		f.exposed = append(f.exposed, f.lanes[i].limit, f.lanes[i].inFlight)
	}
	if !tierListed {
		f.exposed = append(f.exposed, f.Tier)
	}
	f.exposed = append(f.exposed, f.SuggestedConcurrency, f.SuggestedSpacing, f.Waited, header.RetryAfter)
	all := f.exposed
	if f.rateLimit {
		all = append(append([]string(nil), all...), rateLimitFields...)
	}
	f.exposeAll = strings.Join(all, ", ")
	for _, part := range strings.Split(n.RefusalDetail, "{retry_after}") {
		f.detail = append(f.detail, jsonInner(part))
	}
	f.code = jsonInner(n.RefusalCode)
	return f
}

// jsonInner returns s as a JSON string's inside (quoted, without the
// quotes).
func jsonInner(s string) string {
	b := jsonenc.AppendString(nil, s)
	return string(b[1 : len(b)-1])
}

// policyOf returns the policy adm was decided under (the built-in one for
// a nil adm).
func policyOf(adm *capgate.Admission) *policy.Policy {
	if adm == nil {
		return policy.OCL()
	}
	return adm.Policy()
}
