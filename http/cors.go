package http

import (
	"net/http"
	"slices"
	"strings"

	"github.com/capgate/capgate"
)

// exposeCapacityHeaders adds the capacity headers and Retry-After to h's
// Access-Control-Expose-Headers, keeping what the API listed there.
func exposeCapacityHeaders(h http.Header) {
	const key = "Access-Control-Expose-Headers"
	var names []string
	for _, v := range h.Values(key) {
		for n := range strings.SplitSeq(v, ",") {
			if n = strings.TrimSpace(n); n != "" {
				names = append(names, n)
			}
		}
	}
	for _, n := range capgate.ExposedHeaders() {
		if !slices.ContainsFunc(names, func(s string) bool { return strings.EqualFold(s, n) }) {
			names = append(names, n)
		}
	}
	h.Set(key, strings.Join(names, ", "))
}

// corsPolicy gives the middleware's own 429 the CORS headers the API
// would have sent for the request's origin.
type corsPolicy struct {
	origins []string // allowed origins; nil: any, echoed
	any     bool     // "*" listed: any origin, no credentials
}

func newCORSPolicy(origins []string) corsPolicy {
	var p corsPolicy
	for _, o := range origins {
		o = strings.TrimSuffix(strings.TrimSpace(o), "/")
		switch o {
		case "":
		case "*":
			p.any = true
		default:
			p.origins = append(p.origins, o)
		}
	}
	if !p.any && p.origins == nil && len(origins) > 0 {
		p.origins = []string{} // a list of blanks allows no origin
	}
	return p
}

// refusal sets the CORS headers of a 429 answered for origin.
func (p corsPolicy) refusal(h http.Header, origin string) {
	exposeCapacityHeaders(h)
	h.Add("Vary", "Origin")
	if origin == "" {
		return
	}
	switch {
	case p.origins == nil || slices.ContainsFunc(p.origins, func(s string) bool { return strings.EqualFold(s, origin) }):
		h.Set("Access-Control-Allow-Origin", origin)
		h.Set("Access-Control-Allow-Credentials", "true")
	case p.any:
		h.Set("Access-Control-Allow-Origin", "*")
	}
}
