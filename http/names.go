package http

import (
	"net/http"
	"strings"
	"sync"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/header"
	"github.com/capgate/capgate/internal/jsonenc"
	"github.com/capgate/capgate/policy"
)

// wire is a policy's names as the gateway writes and reads them: the
// capacity headers (canonical), each lane's limit and count headers, the
// CORS expose list, the 429 body's parts, the client-metadata and
// request-source headers, and the request headers the policy reads. Made
// once per policy (wireOf).
type wire struct {
	header.Names
	lanes     []laneWire // by the policy's lane index
	exposed   []string   // the expose list's names, in order
	exposeAll string     // exposed and the RateLimit fields, joined
	rateLimit bool       // send the RateLimit fields
	// The 429 body's detail, split at each {retry_after}, and its
	// error_code (each JSON-quoted already, without the quotes).
	detail   []string
	code     string
	metaKeys []policy.MetadataKey
	reads    map[string]bool // request headers the routes read (canonical)
}

// laneWire are one lane's limit and count headers ("" for a lane that
// sends none).
type laneWire struct {
	limit, inFlight string
}

var wires sync.Map // *policy.Policy → *wire

// wireOf returns p's names (nil: the built-in policy's).
func wireOf(p *policy.Policy) *wire {
	if p == nil {
		p = policy.OCL()
	}
	if w, ok := wires.Load(p); ok {
		return w.(*wire)
	}
	w := newWire(p)
	actual, _ := wires.LoadOrStore(p, w)
	return actual.(*wire)
}

func newWire(p *policy.Policy) *wire {
	n := p.Names
	w := &wire{
		Names:     header.NewNames(n.HeaderPrefix, n.MetadataHeader, n.AwareField, n.RequestSourceHeader),
		lanes:     make([]laneWire, len(p.Lanes)),
		rateLimit: n.RateLimit,
		metaKeys:  n.MetadataLog,
		reads:     map[string]bool{},
	}
	// The expose list: the decision, each lane's headers in lane order
	// with the caller's tier before the first tier lane's (after them all
	// without one), the suggestions, the time waited and Retry-After.
	w.exposed = append(w.exposed, w.Decision)
	tierListed := false
	for i, l := range p.Lanes {
		if l.Headers == nil {
			continue
		}
		if l.ByTier() && !tierListed {
			w.exposed, tierListed = append(w.exposed, w.Tier), true
		}
		w.lanes[i] = laneWire{limit: w.Lane(l.Headers.Limit), inFlight: w.Lane(l.Headers.InFlight)}
		w.exposed = append(w.exposed, w.lanes[i].limit, w.lanes[i].inFlight)
	}
	if !tierListed {
		w.exposed = append(w.exposed, w.Tier)
	}
	w.exposed = append(w.exposed, w.SuggestedConcurrency, w.SuggestedSpacing, w.Waited, header.RetryAfter)
	all := w.exposed
	if w.rateLimit {
		all = append(append([]string(nil), all...), rateLimitFields...)
	}
	w.exposeAll = strings.Join(all, ", ")
	for _, part := range strings.Split(n.RefusalDetail, "{retry_after}") {
		w.detail = append(w.detail, jsonInner(part))
	}
	w.code = jsonInner(n.RefusalCode)
	// The headers a route reads: the API acts on the request by them too.
	// (The client-metadata and request-source headers are capgate's own,
	// which the API does not read: a proxy dropping them changes nothing
	// the API does.)
	for _, h := range p.HeadersRead() {
		w.reads[http.CanonicalHeaderKey(h)] = true
	}
	return w
}

// jsonInner returns s as a JSON string's inside (quoted, without the
// quotes).
func jsonInner(s string) string {
	b := jsonenc.AppendString(nil, s)
	return string(b[1 : len(b)-1])
}

// admissionPolicy returns the policy adm was decided under.
func admissionPolicy(adm *capgate.Admission) *policy.Policy {
	if adm == nil {
		return policy.OCL()
	}
	return adm.Policy()
}
