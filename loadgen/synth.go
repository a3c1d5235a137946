package loadgen

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/capgate/capgate/client"
	"github.com/capgate/capgate/policy"
)

// The workloads loadgen can send (Config.Workload).
const (
	// WorkloadMapper is the OCL Mapper's: Auto Match runs (batches of
	// rows), single-row lookups and reranks. It needs the built-in
	// policy's routes.
	WorkloadMapper = "mapper"
	// WorkloadRoutes is calls synthesized from the policy's routes, any
	// policy's: each job is one call of a route picked at random, made so
	// that the route matches it (see Config.Workload).
	WorkloadRoutes = "routes"
)

// builtin reports whether p is the built-in policy (or a copy of its
// file).
func builtin(p *policy.Policy) bool {
	return p == policy.OCL() || bytes.Equal(p.Source(), policy.OCL().Source())
}

// WorkloadOf returns the workload Run sends for cfg: Config.Workload, else
// WorkloadMapper under the built-in policy (or no policy) and
// WorkloadRoutes under any other.
func WorkloadOf(cfg Config) string {
	switch {
	case cfg.Workload != "":
		return cfg.Workload
	case cfg.Policy == nil || builtin(cfg.Policy):
		return WorkloadMapper
	}
	return WorkloadRoutes
}

// Kinds returns the kinds of call the workload of cfg sends, in the order
// its report lists their latencies: the Mapper's KindBulk, KindSingle and
// KindRerank, or each route's log name.
func Kinds(cfg Config) []string {
	if WorkloadOf(cfg) == WorkloadMapper {
		return []string{KindBulk, KindSingle, KindRerank}
	}
	p := cfg.Policy
	if p == nil {
		p = policy.OCL()
	}
	kinds := make([]string, len(p.Routes))
	for i, r := range p.Routes {
		kinds[i] = r.LogName
	}
	return kinds
}

// DefaultValues returns the values a synthesized string field named name
// takes when Config.Values has none: "small" and "large" for a model (the
// models simapi.Inference lists), else name-1, name-2 and name-3.
func DefaultValues(name string) []string {
	if name == "model" {
		return []string{"small", "large"}
	}
	return []string{name + "-1", name + "-2", name + "-3"}
}

// DefaultInts returns the values a synthesized body_int field named name
// takes when Config.Values has none: 256, 512, 1024 and 2048 tokens for
// max_tokens, else 1, 8 and 64.
func DefaultInts(name string) []string {
	if name == "max_tokens" {
		return []string{"256", "512", "1024", "2048"}
	}
	return []string{"1", "8", "64"}
}

// callSpec is one call to send: the request after the user's base URL,
// and what the report and the client know of it.
type callSpec struct {
	kind   string // the report's kind of call
	method string
	target string      // the path and query
	header http.Header // the route's own headers; nil: none
	body   []byte
	units  int         // the rows (units of work) it counts for in the report
	call   client.Call // Class and Lanes; User, Tier and Result are send's
	// aware makes ClientRetryAfter declare the call capacity-aware (the
	// Mapper does for its bulk semantic $match).
	aware bool
}

// synth makes calls of a policy's routes: a concrete path (a pattern's
// {name} filled from values), the query parameters that make the route's
// query_truthy predicates hold, the headers of its header_present
// predicates and header fields, and a JSON body whose keys make its body
// predicates hold and fill its body fields. Each call is read back through
// the policy (policy.Evaluator), as the gateway reads it, for its route,
// lanes, class and units. It is safe for concurrent use.
type synth struct {
	p      *policy.Policy
	ev     *policy.Evaluator
	values map[string][]string // Config.Values
	lens   [2]int              // the lengths of a body array (Config.BulkRows)
}

// newSynth returns a synth of p's routes and checks that it makes a call
// each route matches: an error names a route it can't make one of.
func newSynth(p *policy.Policy, values map[string][]string, lens [2]int) (*synth, error) {
	s := &synth{p: p, ev: policy.NewEvaluator(p, ""), values: values, lens: lens}
	rng := rand.New(rand.NewPCG(1, 2))
	var errs []error
	for _, r := range p.Routes {
		for _, fixed := range []bool{true, false} {
			req := s.request(r, rng, fixed)
			var f policy.Fields
			if got := s.ev.Evaluate(&req, &f); got == nil {
				errs = append(errs, fmt.Errorf("loadgen: a call made for route %s (%s %s) matches no route of policy %s",
					r.Name, req.Method, req.Path, p.Name))
				break
			}
		}
	}
	return s, errors.Join(errs...)
}

// value returns a value of the string field (or pattern segment) name:
// the first of its values most often, each next one half as often.
func (s *synth) value(name string, rng *rand.Rand, fixed bool) string {
	return s.pick(name, DefaultValues(name), rng, fixed)
}

// intValue returns a value of the int field name, as value does: its
// Config.Values (each a number), else DefaultInts.
func (s *synth) intValue(name string, rng *rand.Rand, fixed bool) int {
	n, _ := strconv.Atoi(s.pick(name, DefaultInts(name), rng, fixed))
	return n
}

// pick returns one of the values of name (Config.Values, else def), the
// first most often, each next one half as often.
func (s *synth) pick(name string, def []string, rng *rand.Rand, fixed bool) string {
	vs := s.values[name]
	if len(vs) == 0 {
		vs = def
	}
	if fixed {
		return vs[0]
	}
	// Weights 2^(n-1), ..., 2, 1 over 2^n - 1.
	n := min(len(vs), 30)
	x := rng.IntN(1<<n - 1)
	for i := range n {
		if x < 1<<(n-1-i) {
			return vs[i]
		}
		x -= 1 << (n - 1 - i)
	}
	return vs[n-1]
}

// arrayLen returns the length of a body array.
func (s *synth) arrayLen(rng *rand.Rand, fixed bool) int {
	lo, hi := s.lens[0], s.lens[1]
	if fixed || hi <= lo {
		return max(lo, 1)
	}
	return max(lo+rng.IntN(hi-lo+1), 1)
}

// bodyValue is one top-level key of a synthesized body.
type bodyValue struct {
	key string
	val any
}

// request makes a request route r matches. fixed makes the same call
// every time (Config.Calls): each string field its first value, each body
// array BulkRows[0] long, each query flag set, the first alternative of
// each any; otherwise values are drawn from rng, and each query flag no
// predicate needs is set half the time.
func (s *synth) request(r *policy.Route, rng *rand.Rand, fixed bool) policy.Request {
	q := url.Values{}
	h := http.Header{}
	var body []bodyValue
	setBody := func(key string, v any) {
		for i := range body {
			if body[i].key == key {
				body[i].val = v
				return
			}
		}
		body = append(body, bodyValue{key, v})
	}
	array := func() []string {
		a := make([]string, s.arrayLen(rng, fixed))
		for i := range a {
			a[i] = fmt.Sprintf("item %d", i)
		}
		return a
	}
	// The fields first, so a predicate on the same key keeps the field's
	// value (a body_string field's value is a non-empty string, a
	// body_array_len field's a non-empty array: every predicate on the key
	// holds).
	fieldKeys := map[string]bool{}
	for _, f := range r.Fields {
		switch f.Kind {
		case policy.FieldQueryTruthy:
			if fixed || rng.IntN(2) == 0 {
				q.Set(f.Source, "true")
			}
		case policy.FieldBodyArrayLen, policy.FieldBodyTexts:
			setBody(f.Source, array())
			fieldKeys[f.Source] = true
		case policy.FieldBodyInt:
			setBody(f.Source, s.intValue(f.Name, rng, fixed))
			fieldKeys[f.Source] = true
		case policy.FieldBodyString:
			setBody(f.Source, s.value(f.Name, rng, fixed))
			fieldKeys[f.Source] = true
		case policy.FieldHeader:
			h.Set(f.Source, s.value(f.Name, rng, fixed))
		}
	}
	var hold func(p policy.Predicate)
	hold = func(p policy.Predicate) {
		switch p.Kind {
		case policy.QueryTruthy:
			q.Set(p.Name, "true")
		case policy.HeaderPresent:
			if h.Get(p.Name) == "" {
				h.Set(p.Name, "1")
			}
		case policy.BodyNonEmptyArray:
			if !fieldKeys[p.Name] {
				setBody(p.Name, array())
			}
		case policy.BodyNonEmptyString:
			if !fieldKeys[p.Name] {
				setBody(p.Name, s.value(p.Name, rng, fixed))
			}
		case policy.BodyTruthy:
			if !fieldKeys[p.Name] {
				setBody(p.Name, "loadgen")
			}
		case policy.AnyOf:
			if len(p.Any) == 0 {
				return
			}
			i := 0
			if !fixed {
				i = rng.IntN(len(p.Any))
			}
			hold(p.Any[i])
		}
	}
	for _, p := range r.When {
		hold(p)
	}
	req := policy.Request{Method: r.Method, Path: s.path(r, rng, fixed), RawQuery: q.Encode(), Header: h}
	if len(body) > 0 || r.Method != http.MethodGet {
		var b bytes.Buffer
		b.WriteByte('{')
		for i, kv := range body {
			if i > 0 {
				b.WriteByte(',')
			}
			k, _ := json.Marshal(kv.key)
			v, _ := json.Marshal(kv.val)
			b.Write(k)
			b.WriteByte(':')
			b.Write(v)
		}
		b.WriteByte('}')
		req.Body = b.Bytes()
	}
	return req
}

// path returns a concrete path of r: an exact path as it is, a prefix
// followed by "loadgen", a pattern with each {name} filled by a value of
// the path_segment field that reads it (or of name).
func (s *synth) path(r *policy.Route, rng *rand.Rand, fixed bool) string {
	v := r.Path.Value
	switch r.Path.Kind {
	case policy.PathPrefix:
		if !strings.HasSuffix(v, "/") {
			v += "/"
		}
		return v + "loadgen"
	case policy.PathPattern:
		segs := strings.Split(v, "/")
		for i, seg := range segs {
			name, ok := strings.CutPrefix(seg, "{")
			if !ok {
				continue
			}
			name = strings.TrimSuffix(name, "}")
			for _, f := range r.Fields {
				if f.Kind == policy.FieldPathSegment && f.Source == name {
					name = f.Name
					break
				}
			}
			segs[i] = url.PathEscape(s.value(name, rng, fixed))
		}
		return strings.Join(segs, "/")
	}
	return v
}

// call makes a call of route r: its request, read back through the
// policy for the route the gateway will see (r, or an earlier route that
// also takes it), the lanes it takes, its class (Interactive when it is of
// a class a lane keeps room for) and its units.
func (s *synth) call(r *policy.Route, rng *rand.Rand, fixed bool) callSpec {
	req := s.request(r, rng, fixed)
	spec := callSpec{kind: r.LogName, method: req.Method, target: req.Path, body: req.Body, units: 1, aware: true}
	if req.RawQuery != "" {
		spec.target += "?" + req.RawQuery
	}
	if len(req.Header) > 0 {
		spec.header = req.Header
	}
	var f policy.Fields
	got := s.ev.Evaluate(&req, &f)
	if got == nil {
		return spec // newSynth checked every route: not reached
	}
	spec.kind = got.LogName
	spec.units = max(got.UnitsOf(&f), 1)
	for _, l := range s.p.Lanes {
		if !l.TakesCall(got, &f) {
			continue
		}
		spec.call.Lanes = append(spec.call.Lanes, l.Name)
		if l.Reserve != nil {
			if c := s.p.Class(l.Reserve.Class); c != nil && c.Has(got, &f) {
				spec.call.Class = client.Interactive
			}
		}
	}
	return spec
}
