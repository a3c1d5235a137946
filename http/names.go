package http

import (
	"net/http"
	"sync"

	"github.com/capgate/capgate/header"
	"github.com/capgate/capgate/policy"
)

// wire is what the gateway reads of a request by a policy's names: the
// client-metadata and request-source headers, the metadata keys the log
// line keeps, and the request headers the policy's routes read. Made once
// per policy (wireOf). The answer's names (the capacity headers, the 429)
// are package answer's.
type wire struct {
	header.Names
	metaKeys []policy.MetadataKey
	reads    map[string]bool // request headers the routes read (canonical)
}

var wires sync.Map // *policy.Policy → *wire; a cache of values made from immutable policies

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
		Names:    n.Header(),
		metaKeys: n.MetadataLog,
		reads:    map[string]bool{},
	}
	// The headers a route reads: the API acts on the request by them too.
	// (The client-metadata and request-source headers are capgate's own,
	// which the API does not read: a proxy dropping them changes nothing
	// the API does.)
	for _, h := range p.HeadersRead() {
		w.reads[http.CanonicalHeaderKey(h)] = true
	}
	return w
}
