package http

import (
	"net/http"
	"slices"
	"strings"

	"github.com/capgate/capgate/answer"
	"github.com/capgate/capgate/policy"
)

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
// exposing the capacity headers of policy pol.
func (p corsPolicy) refusal(h http.Header, origin string, pol *policy.Policy) {
	answer.Expose(h, pol)
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
