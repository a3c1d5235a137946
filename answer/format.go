// Package answer writes the answers capgate gives an API's callers itself,
// in a policy's names and shape: the capacity headers of a gated call's
// response (SetHeaders, SetGated: the decision, each lane's limit and
// count, the hints, Retry-After and the retry headers a policy asks for,
// the RateLimit fields, the CORS expose list), the 429 of a refused call
// (Refusal, WriteRefusal), and capgate's own errors (KeyError,
// WriteKeyError, WriteError, WriteText), each kind (policy.AnswerKind) in
// the policy's JSON template when it gives one (names.answers), else in
// capgate's own shape, the bytes the built-in policy has always sent. The
// gateway (capgatehttp) and the decision service (decide) both write
// through it, so an app's answer is the gateway's byte for byte.
//
// Every body capgate writes to a caller is made in this package and
// nowhere else: a change of their shape is a change here alone.
package answer

import (
	"cmp"
	"strings"
	"sync"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/header"
	"github.com/capgate/capgate/internal/jsontmpl"
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
	// The 429 body: its template, its {detail} (the policy's refusal
	// detail, a text template) and {error_code}.
	refused    *policy.Template
	refusalCap int // the bytes Refusal makes room for
	detail     jsontmpl.Value
	code       string
	// templates are the policy's templates of its answers, by kind (nil:
	// capgate's own shape); the retry headers it sends.
	templates    [policy.NumAnswerKinds]*policy.Template
	retryAfterMS bool
	shouldRetry  bool
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
	a := &n.Answers
	f.retryAfterMS, f.shouldRetry = a.RetryAfterMS, a.ShouldRetry
	if f.retryAfterMS {
		f.exposed = append(f.exposed, RetryAfterMSKey)
	}
	if f.shouldRetry {
		f.exposed = append(f.exposed, ShouldRetryKey)
	}
	all := f.exposed
	if f.rateLimit {
		all = append(append([]string(nil), all...), rateLimitFields...)
	}
	f.exposeAll = strings.Join(all, ", ")
	for k := range policy.NumAnswerKinds {
		f.templates[k] = a.Template(k)
	}
	f.refused = cmp.Or(f.templates[policy.AnswerRefused], builtinRefusal)
	f.refusalCap = 160 // capgate's own shape, the built-in detail
	if f.refused != builtinRefusal || len(n.RefusalDetail) > 60 {
		// Room for the template with its detail and numbers filled in.
		f.refusalCap = len(f.refused.Source()) + len(n.RefusalDetail) + 64
	}
	f.code = n.RefusalCode
	f.detail = jsontmpl.Str(n.RefusalDetail)
	if t := refusalDetail(p); t != nil {
		f.detail = jsontmpl.Text(t)
	}
	return f
}

// refusalDetail returns p's refusal detail as a text template: the
// policy's, or for a policy not parsed compiled here (nil if it can't
// be: the detail is then written as it is).
func refusalDetail(p *policy.Policy) *policy.Template {
	if t := p.Names.Answers.RefusalDetail(); t != nil {
		return t
	}
	fields := append([]jsontmpl.Field(nil), policy.AnswerFields...)
	fields[policy.PlaceDetail].Name = ""
	t, _ := jsontmpl.CompileText(p.Names.RefusalDetail, fields)
	return t
}

// policyOf returns the policy o was decided under (the built-in one for a
// nil o, or one without a policy: an ungated call).
func policyOf(o *capgate.Outcome) *policy.Policy {
	if o == nil || o.Policy == nil {
		return policy.OCL()
	}
	return o.Policy
}
