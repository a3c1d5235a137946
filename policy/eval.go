package policy

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/capgate/capgate/internal/jsonscan"
)

// Request is a request as the gateway forwards it, read as the API reads
// it: the gateway normalizes it first (the method in upper case, the target
// cut at "#", the body decoded from its charset to UTF-8). Nothing in it is
// changed by evaluation.
type Request struct {
	Method   string      // upper case
	Path     string      // decoded (so "%24" is "$"), without the query
	RawQuery string      // as sent; read as Python's parse_qsl reads it, the last value of a name winning
	Header   http.Header // canonical keys
	Body     []byte      // the JSON body in UTF-8; nil when there is none
	// QueryUnreadable says the gateway cannot read the query as the API
	// does (OCL: a request charset that is not ASCII-compatible, in which
	// Django decodes the query too). Every query predicate then holds and
	// every query flag is true: the call is counted in the most lanes.
	QueryUnreadable bool
	// BodyUnreadable says the gateway cannot read the body as the API does
	// (compressed, larger than it reads, a charset it does not decode).
	// Every body predicate then holds and every body field is zero: a call
	// of unknown size, never one that passes uncounted.
	BodyUnreadable bool
}

// Evaluator finds the route of a request. It is safe for concurrent use.
// The zero value, like an Evaluator of a nil policy, has no routes:
// nothing is a heavy call.
type Evaluator struct {
	p      *Policy
	prefix string
}

// NewEvaluator returns an Evaluator for p with the API mounted at
// pathPrefix (such as "/api"; "" is the root): a path outside it matches no
// route, and routes match what follows it. A nil p matches nothing.
func NewEvaluator(p *Policy, pathPrefix string) *Evaluator {
	return &Evaluator{p: p, prefix: strings.TrimSuffix(pathPrefix, "/")}
}

// Policy returns the evaluator's policy (nil for the zero Evaluator).
func (e *Evaluator) Policy() *Policy { return e.p }

// routes returns the policy's routes; none without a policy.
func (e *Evaluator) routes() []*Route {
	if e.p == nil {
		return nil
	}
	return e.p.Routes
}

// Evaluate returns the first route that matches req and fills f with the
// call's fields; nil, and f reset, when no route matches (the request is
// not a heavy call). f must not outlive req.Body.
func (e *Evaluator) Evaluate(req *Request, f *Fields) *Route {
	f.reset()
	path, ok := strings.CutPrefix(req.Path, e.prefix)
	if !ok {
		return nil
	}
	var bodyValid, bodyChecked bool
	for _, r := range e.routes() {
		if r.Method != req.Method || !matchPath(&r.Path, path) {
			continue
		}
		// The query and headers first: a request they rule out costs no
		// body scan.
		if len(r.bodyKeys) > 0 && !r.holds(req, &bodyView{any: true}) {
			continue
		}
		var bv bodyView
		unread := req.BodyUnreadable
		if len(r.bodyKeys) > 0 && !unread {
			if !bodyChecked {
				bodyChecked = true
				bodyValid = req.Body != nil && json.Valid(req.Body)
			}
			switch {
			case bodyValid:
				bv.scan(req.Body, r.bodyKeys)
				// A cost field the API reads and capgate can't (a
				// max_tokens of "x") makes the body unread too.
				unread = r.bodyCost && !r.costReadable(&bv)
			case r.bodyCost && !blank(req.Body):
				// Not JSON as Go reads it, but maybe as the API does
				// (NaN, Infinity, UTF-16 without a charset): never the
				// cheap call.
				unread = true
			}
		}
		if unread {
			bv.any = true // every body predicate holds
		}
		if !r.holds(req, &bv) {
			continue
		}
		r.extract(req, path, &bv, f, unread)
		return r
	}
	return nil
}

// blank reports whether a body holds nothing but JSON whitespace: no body
// to read (its fields take their defaults).
func blank(b []byte) bool {
	return jsonscan.SkipWS(b, 0) >= len(b)
}

// costReadable reports whether each int body field of r that its seats
// count reads as a number (bodyInt ok).
func (r *Route) costReadable(bv *bodyView) bool {
	for _, s := range r.Seats {
		if !s.body {
			continue
		}
		fd := &r.Fields[s.field-1] // s.body: set by Parse with the field
		if fd.Kind == FieldBodyInt {
			if _, ok := bodyInt(bv.vals[fd.body], fd.Default); !ok {
				return false
			}
		}
	}
	return true
}

// MayMatch reports whether some route matches req by its method, path and
// query and header predicates, the body aside: whether the gateway must
// read the body to know. A request it says no to is not a heavy call, and
// its body can go to the API unread.
func (e *Evaluator) MayMatch(req *Request) bool {
	path, ok := strings.CutPrefix(req.Path, e.prefix)
	if !ok {
		return false
	}
	bv := bodyView{any: true}
	for _, r := range e.routes() {
		if r.Method == req.Method && matchPath(&r.Path, path) && r.holds(req, &bv) {
			return true
		}
	}
	return false
}

// bodyView is what evaluation read of a body for one route: the raw JSON
// value of each of the route's body keys. any makes every body predicate
// hold (an unreadable body, or MayMatch).
type bodyView struct {
	object bool
	any    bool
	vals   [maxBodyKeys][]byte
}

func (bv *bodyView) scan(body []byte, keys []string) {
	bv.object = topLevel(body, keys, &bv.vals)
}

func (r *Route) holds(req *Request, bv *bodyView) bool {
	for i := range r.When {
		if !r.When[i].holds(req, bv) {
			return false
		}
	}
	return true
}

func (p *Predicate) holds(req *Request, bv *bodyView) bool {
	switch p.Kind {
	case QueryTruthy:
		return req.QueryUnreadable || queryTruthy(req.RawQuery, p.Name)
	case HeaderPresent:
		return len(req.Header[p.Name]) > 0
	case AnyOf:
		for i := range p.Any {
			if p.Any[i].holds(req, bv) {
				return true
			}
		}
		return false
	}
	if bv.any || req.BodyUnreadable {
		return true
	}
	if !bv.object {
		return false
	}
	v := bv.vals[p.body]
	switch p.Kind {
	case BodyNonEmptyArray:
		return jsonscan.ArrayLen(v) > 0
	case BodyNonEmptyString:
		return len(v) > 2 && v[0] == '"'
	case BodyTruthy:
		return jsonscan.PyTruthy(v)
	}
	return false
}

// extract fills f with the fields of a call of r. unread: the body could
// not be read (its fields are zero; on a route whose cost is in its body,
// its string fields are UnreadableValue, its seats its most).
func (r *Route) extract(req *Request, path string, bv *bodyView, f *Fields, unread bool) {
	f.route, f.body = r, req.Body
	f.bodyKnown = !unread
	for i := range r.Fields {
		fd := &r.Fields[i]
		v := &f.vals[i]
		switch fd.Kind {
		case FieldQueryTruthy:
			v.b = req.QueryUnreadable || queryTruthy(req.RawQuery, fd.Source)
		case FieldBodyArrayLen:
			if bv.object {
				v.n = jsonscan.ArrayLen(bv.vals[fd.body])
			}
		case FieldBodyInt:
			switch {
			case bv.object:
				v.n, _ = bodyInt(bv.vals[fd.body], fd.Default)
			case !unread:
				v.n = fd.Default // no body, or not an object
			}
		case FieldBodyTexts:
			if bv.object {
				v.n = bodyTexts(bv.vals[fd.body])
			}
		case FieldBodyString:
			if raw := bv.vals[fd.body]; bv.object && len(raw) >= 2 && raw[0] == '"' {
				v.lit = raw
			} else if unread && r.bodyCost {
				v.s = UnreadableValue
			}
		case FieldHeader:
			v.s = headerValue(req.Header, fd.Source)
		case FieldPathSegment:
			if r.Path.OptionalSlash {
				path = strings.TrimSuffix(path, "/")
			}
			v.s = segmentAt(path, fd.seg)
		}
	}
}

// Fields are the fields of one call, by the index of the field in its
// route (Route.Field). Body strings are held as offsets into the request's
// body, so Fields must not outlive it. The zero value is empty; reuse one
// across calls to allocate nothing.
type Fields struct {
	route     *Route
	body      []byte
	bodyKnown bool
	vals      [MaxFields]fieldValue
}

type fieldValue struct {
	b   bool
	n   int
	s   string // header or path segment
	lit []byte // a body string's JSON literal, quotes included
}

func (f *Fields) reset() { *f = Fields{} }

// Route returns the route the fields are of, nil if none matched.
func (f *Fields) Route() *Route { return f.route }

// BodyKnown reports whether the body was read: false for an unreadable
// body, whose body fields are all zero.
func (f *Fields) BodyKnown() bool { return f.bodyKnown }

// Bool returns field i as a bool (false if it is not one).
func (f *Fields) Bool(i int) bool {
	if i < 0 || i >= MaxFields {
		return false
	}
	return f.vals[i].b
}

// Int returns field i as an int (0 if it is not one).
func (f *Fields) Int(i int) int {
	if i < 0 || i >= MaxFields {
		return 0
	}
	return f.vals[i].n
}

// String returns field i as a string: a string field's value, an int
// field's digits, a bool's "true"/"false". A body string is decoded here,
// and that allocates.
func (f *Fields) String(i int) string {
	if f.route == nil || i < 0 || i >= len(f.route.Fields) {
		return ""
	}
	v := &f.vals[i]
	switch f.route.Fields[i].Kind.Type() {
	case TypeBool:
		if v.b {
			return "true"
		}
		return "false"
	case TypeInt:
		return itoa(v.n)
	}
	if v.lit != nil {
		return decodeString(v.lit)
	}
	return v.s
}

// Equal reports whether string field i equals s, allocating nothing.
func (f *Fields) Equal(i int, s string) bool {
	if f.route == nil || i < 0 || i >= len(f.route.Fields) {
		return false
	}
	v := &f.vals[i]
	if v.lit != nil {
		return keyEqual(v.lit, s)
	}
	return v.s == s
}

// ByName returns the value of the field called name as String does, and
// whether the route has it.
func (f *Fields) ByName(name string) (string, bool) {
	if f.route == nil {
		return "", false
	}
	i := f.route.Field(name)
	if i < 0 {
		return "", false
	}
	return f.String(i), true
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	neg := n < 0
	if neg {
		n = -n
	}
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	if neg {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}

// headerValue reads header k as the API's server hands it to the app
// (gunicorn): the values of a repeated header joined with ",", except
// Content-Type and Content-Length, of which it keeps the last. Only a
// repeated header costs an allocation.
func headerValue(h http.Header, k string) string {
	vs := h[k]
	switch {
	case len(vs) == 0:
		return ""
	case len(vs) == 1 || k == "Content-Type" || k == "Content-Length":
		return vs[len(vs)-1]
	}
	return strings.Join(vs, ",")
}

// matchPath reports whether path (the mount prefix cut) matches p.
func matchPath(p *Path, path string) bool {
	switch p.Kind {
	case PathExact:
		if p.OptionalSlash {
			return strings.TrimSuffix(path, "/") == strings.TrimSuffix(p.Value, "/")
		}
		return path == p.Value
	case PathPrefix:
		if strings.HasPrefix(path, p.Value) {
			return true
		}
		return p.OptionalSlash && strings.HasSuffix(p.Value, "/") && path == strings.TrimSuffix(p.Value, "/")
	case PathPattern:
		if p.OptionalSlash {
			path = strings.TrimSuffix(path, "/")
		}
		rest, ok := strings.CutPrefix(path, "/")
		if !ok {
			return false
		}
		for i, seg := range p.segments {
			var s string
			s, rest, ok = strings.Cut(rest, "/")
			if ok != (i < len(p.segments)-1) {
				return false // fewer or more segments
			}
			if seg == wildcard {
				if s == "" {
					return false
				}
			} else if s != seg {
				return false
			}
		}
		return true
	}
	return false
}

// wildcard is a pattern segment "{name}": any one non-empty segment. No
// literal segment holds "{".
const wildcard = "{"

// segmentAt returns the i-th segment of path (after its leading "/").
func segmentAt(path string, i int) string {
	rest := strings.TrimPrefix(path, "/")
	for ; i > 0; i-- {
		_, rest, _ = strings.Cut(rest, "/")
	}
	s, _, _ := strings.Cut(rest, "/")
	return s
}

// Detach makes f independent of the request's body: each body string is
// decoded now (that allocates), so f can be kept once the request is gone
// (in a call's log line).
func (f *Fields) Detach() {
	f.body = nil
	for i := range f.vals {
		if v := &f.vals[i]; v.lit != nil {
			v.s, v.lit = decodeString(v.lit), nil
		}
	}
}

// NewFields returns empty fields of a call of r, to be set one by one
// (SetBool, SetInt, SetString): a call the decision service is told of
// rather than one the gateway read. Every field starts at its zero value,
// a body_int field at its default (a call that names no max_tokens costs
// what the policy says such a call costs).
func NewFields(r *Route) Fields {
	f := Fields{route: r, bodyKnown: true}
	if r != nil {
		for i, fd := range r.Fields {
			if fd.Kind == FieldBodyInt {
				f.vals[i].n = fd.Default
			}
		}
	}
	return f
}

// SetBool sets bool field i; false if it is no bool field of the route.
func (f *Fields) SetBool(i int, b bool) bool {
	if !f.is(i, TypeBool) {
		return false
	}
	f.vals[i].b = b
	return true
}

// SetInt sets int field i; false if it is no int field of the route.
func (f *Fields) SetInt(i, n int) bool {
	if !f.is(i, TypeInt) {
		return false
	}
	f.vals[i].n = n
	return true
}

// SetString sets string field i; false if it is no string field of the
// route.
func (f *Fields) SetString(i int, s string) bool {
	if !f.is(i, TypeString) {
		return false
	}
	f.vals[i].s, f.vals[i].lit = s, nil
	return true
}

func (f *Fields) is(i int, t Type) bool {
	return f.route != nil && i >= 0 && i < len(f.route.Fields) && f.route.Fields[i].Kind.Type() == t
}

// ReadsBody reports whether a route that may match req by its method,
// path, query and headers (MayMatch) reads the body: whether the gateway
// must buffer it to evaluate req.
func (e *Evaluator) ReadsBody(req *Request) bool {
	path, ok := strings.CutPrefix(req.Path, e.prefix)
	if !ok {
		return false
	}
	bv := bodyView{any: true}
	for _, r := range e.routes() {
		if len(r.bodyKeys) > 0 && r.Method == req.Method && matchPath(&r.Path, path) && r.holds(req, &bv) {
			return true
		}
	}
	return false
}

// RoutePath reports whether path (decoded) is a route's path, whatever
// the method, query, headers and body: where the gateway never lets a
// request upgrade its connection.
func (e *Evaluator) RoutePath(path string) bool {
	path, ok := strings.CutPrefix(path, e.prefix)
	if !ok {
		return false
	}
	for _, r := range e.routes() {
		if matchPath(&r.Path, path) {
			return true
		}
	}
	return false
}
