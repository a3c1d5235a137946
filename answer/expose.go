package answer

import (
	"net/http"
	"slices"
	"strings"

	"github.com/capgate/capgate/policy"
)

// ExposeHeadersKey is the CORS header that lets a browser read the
// capacity headers.
const ExposeHeadersKey = "Access-Control-Expose-Headers"

// Expose adds the capacity headers of policy p (nil: the built-in one),
// Retry-After and (when the policy sends them) the RateLimit fields to h's
// Access-Control-Expose-Headers, keeping what the API listed there: for
// an answer capgate writes itself (its 429, its 503).
func Expose(h http.Header, p *policy.Policy) {
	h[ExposeHeadersKey] = []string{exposeValue(h, formatOf(p))}
}

// exposeValue returns h's Access-Control-Expose-Headers with the capacity
// headers of f, Retry-After and the RateLimit fields added.
func exposeValue(h http.Header, f *format) string {
	listed := h.Values(ExposeHeadersKey)
	if len(listed) == 0 {
		return f.exposeAll
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
	for _, k := range f.exposed {
		add(k)
	}
	if f.rateLimit {
		for _, k := range rateLimitFields {
			add(k)
		}
	}
	return strings.Join(names, ", ")
}
