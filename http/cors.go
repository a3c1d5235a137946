package http

import (
	"net/http"
	"slices"
	"strings"
)

// exposeCapacityHeaders adds the capacity headers of names n, Retry-After
// and (when the policy sends them) the standard RateLimit-Policy and
// RateLimit fields to h's Access-Control-Expose-Headers, keeping what the
// API listed there.
func exposeCapacityHeaders(h http.Header, n *wire) {
	h[exposeHeadersKey] = []string{exposeValue(h, n)}
}

const exposeHeadersKey = "Access-Control-Expose-Headers"

// exposeValue returns h's Access-Control-Expose-Headers with the capacity
// headers of names n, Retry-After and the RateLimit fields added.
func exposeValue(h http.Header, n *wire) string {
	listed := h.Values(exposeHeadersKey)
	if len(listed) == 0 {
		return n.exposeAll
	}
	var names []string
	for _, v := range listed {
		for n := range strings.SplitSeq(v, ",") {
			if n = strings.TrimSpace(n); n != "" {
				names = append(names, n)
			}
		}
	}
	add := func(k string) {
		if !slices.ContainsFunc(names, func(s string) bool { return strings.EqualFold(s, k) }) {
			names = append(names, k)
		}
	}
	for _, k := range n.exposed {
		add(k)
	}
	if n.rateLimit {
		for _, k := range rateLimitFields {
			add(k)
		}
	}
	return strings.Join(names, ", ")
}

// corsPolicy gives the middleware's own 429 the CORS headers the API
// would have sent for the request's origin. The zero value echoes any
// origin without credentials: only an origin listed allows credentials.
type corsPolicy struct {
	origins []string // allowed origins, echoed with credentials
	any     bool     // "*" listed: any other origin, without credentials
	listed  bool     // a list was given; else every origin is echoed, without credentials
}

func newCORSPolicy(origins []string) corsPolicy {
	var p corsPolicy
	for _, o := range origins {
		switch o = strings.TrimSuffix(strings.TrimSpace(o), "/"); o {
		case "":
		case "*":
			p.any, p.listed = true, true
		default:
			p.origins, p.listed = append(p.origins, o), true
		}
	}
	return p
}

// refusal sets the CORS headers of a 429 (or 503) answered for origin,
// exposing the capacity headers of names n.
func (p corsPolicy) refusal(h http.Header, origin string, n *wire) {
	exposeCapacityHeaders(h, n)
	h.Add("Vary", "Origin")
	if origin == "" {
		return
	}
	switch {
	case slices.ContainsFunc(p.origins, func(s string) bool { return strings.EqualFold(s, origin) }):
		h.Set("Access-Control-Allow-Origin", origin)
		h.Set("Access-Control-Allow-Credentials", "true")
	case !p.listed:
		// No list: readable from any origin, but never with the
		// browser's credentials for an origin nobody named.
		h.Set("Access-Control-Allow-Origin", origin)
	case p.any:
		h.Set("Access-Control-Allow-Origin", "*")
	}
}
