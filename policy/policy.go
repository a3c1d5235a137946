package policy

import "fmt"

// Version is the policy format version this package reads.
const Version = 1

// Policy is a parsed, checked policy. Parse returns one; nothing changes it
// afterwards, so it is safe for concurrent use.
type Policy struct {
	File     string // the file it was read from, for messages
	Name     string
	Routes   []*Route
	Classes  []*Class
	Identity Identity
	Lanes    []*Lane
	Names    Names
	// Idempotency says how the gateway tells a retry from a first attempt
	// and which headers make two requests different (optional).
	Idempotency Idempotency

	source []byte
	fields []FieldInfo // Fields
	tiers  []string    // Tiers
}

// Source returns the YAML the policy was parsed from.
func (p *Policy) Source() []byte { return p.source }

// Route returns the route named name, or nil.
func (p *Policy) Route(name string) *Route {
	for _, r := range p.Routes {
		if r.Name == name {
			return r
		}
	}
	return nil
}

// Lane returns the lane named name, or nil.
func (p *Policy) Lane(name string) *Lane {
	for _, l := range p.Lanes {
		if l.Name == name {
			return l
		}
	}
	return nil
}

// HeadersRead returns the canonical names of the request headers the
// routes read (predicates and fields), each once: the gateway must refuse a
// Connection header that names one, as it does for the headers it reads
// itself, so the API never acts on a request capgate read otherwise.
func (p *Policy) HeadersRead() []string {
	var out []string
	add := func(h string) {
		if !contains(out, h) {
			out = append(out, h)
		}
	}
	for _, r := range p.Routes {
		for _, pr := range r.When {
			if pr.Kind == HeaderPresent {
				add(pr.Name)
			}
			for _, a := range pr.Any {
				if a.Kind == HeaderPresent {
					add(a.Name)
				}
			}
		}
		for _, f := range r.Fields {
			if f.Kind == FieldHeader {
				add(f.Source)
			}
		}
	}
	return out
}

// Tiers returns the policy's tiers in rule order, the default last.
func (p *Policy) Tiers() []string { return p.tiers }

// LanesOf returns the lanes route r takes, in lane order.
func (p *Policy) LanesOf(r *Route) []*Lane {
	var out []*Lane
	for _, l := range p.Lanes {
		if l.Takes(r) {
			out = append(out, l)
		}
	}
	return out
}

// Route is one kind of heavy call.
type Route struct {
	Name string
	// LogName is what the log line, the decision service and the metrics
	// call the route: the policy's log_name, else Name.
	LogName string
	Method  string // upper case
	Path    Path
	When    []Predicate // all must hold
	Fields  []Field     // at most MaxFields
	// Seats is the route's cost per lane name; a lane not in it costs 1.
	Seats map[string]Seats
	// Units, if set, is an int field: the call's units of work, of which
	// the adaptive limits measure the service time (OCL: rows). Unset:
	// each call is one unit.
	Units string
	// UnreadableBody says what a call whose cost depends on its body
	// (CostFromBody) gets when the gateway can't read the body as the API
	// would: UnreadableRefuse (the default) or UnreadableMax.
	UnreadableBody Unreadable
	// OnClientGone says what the API does with a call whose client went
	// away: ClientGoneHold (the default: it runs the call to its end) or
	// ClientGoneCancel (it stops when its connection closes).
	OnClientGone ClientGone
	// Usage says where the answer reports what the call used (optional).
	Usage Usage

	index    int
	units    int      // the index of the Units field; -1 none
	fieldOf  []int    // by the policy's field index (Policy.Fields): the route's, -1 none
	lanes    uint64   // bit i: lane i of the policy takes the route (before only_if)
	bodyKeys []string // the top-level body keys When and Fields read
	bodyCost bool     // a lane's key or a seats field is a body field (CostFromBody)
	line     int
	lines    map[string]int // the line of each of its fields, for messages
}

// lineOf returns the line of the route's field key, else the route's.
func (r *Route) lineOf(key string) int {
	if n, ok := r.lines[key]; ok {
		return n
	}
	return r.line
}

// CostFromBody reports whether what a call of r costs depends on its body:
// a lane it takes is keyed by a body field (a model), or its seats count
// one (max_tokens, inputs). Such a call whose body can't be read as the
// API reads it (Fields.BodyKnown false) is never the cheap call: refused
// with 400 where enforced, else counted at its most (UnreadableBody).
func (r *Route) CostFromBody() bool { return r.bodyCost }

// Unreadable is what a route does with a call whose body it can't read.
type Unreadable int

const (
	// UnreadableRefuse: an enforced call gets 400; any other is counted
	// as UnreadableMax counts it.
	UnreadableRefuse Unreadable = iota
	// UnreadableMax: the call is counted at the route's most seats in
	// every lane, its body string fields (a model) all UnreadableValue.
	UnreadableMax
)

// UnreadableValue is the value of the body string fields of a call whose
// body could not be read, on a route whose cost depends on its body: the
// key of the one lane such calls share in a lane keyed by that field.
const UnreadableValue = "(unreadable)"

// ClientGone is what a route's API does with a call whose client left.
type ClientGone int

const (
	// ClientGoneHold: the API runs the call to its end (a Django worker
	// does), so the gateway keeps the upstream request and the call's
	// place until it ends.
	ClientGoneHold ClientGone = iota
	// ClientGoneCancel: the API stops the call when its connection closes
	// (vLLM, TGI, llama.cpp's server), so the gateway cancels the upstream
	// request at once and frees the place once the connection is closed.
	ClientGoneCancel
)

// Index returns the route's position in the policy.
func (r *Route) Index() int { return r.index }

// RouteLogName returns what the log line and the metrics call route (its
// LogName); "" for no route (a call the gate could not place).
func RouteLogName(r *Route) string {
	if r == nil {
		return ""
	}
	return r.LogName
}

// PolicyField returns the index in r.Fields of the policy's field i (of
// Policy.Fields); -1 when r has no such field.
func (r *Route) PolicyField(i int) int {
	if i < 0 || i >= len(r.fieldOf) {
		return -1
	}
	return r.fieldOf[i]
}

// UnitsOf returns the units of work of a call of r with fields f: its
// Units field (less than 1 counts as 1 where it is used), else 1.
func (r *Route) UnitsOf(f *Fields) int {
	if r.units < 0 || f == nil {
		return 1
	}
	return f.Int(r.units)
}

// TakesLane reports whether lane i of the policy takes calls of r (its
// only_if aside), allocating nothing.
func (r *Route) TakesLane(i int) bool { return i >= 0 && i < 64 && r.lanes&(1<<i) != 0 }

// Field returns the index of the field named name in r.Fields, or -1.
func (r *Route) Field(name string) int {
	for i, f := range r.Fields {
		if f.Name == name {
			return i
		}
	}
	return -1
}

// SeatsIn returns the seats a call of r with fields f takes in lane,
// before the lane's cap (issue 33: a call's seats are capped at the lane's
// limit by the gate, which knows the limit). At least 1.
func (r *Route) SeatsIn(lane string, f *Fields) int {
	s, ok := r.Seats[lane]
	if !ok {
		return 1
	}
	return s.Of(f)
}

// PathKind says how a Path matches.
type PathKind int

const (
	PathExact   PathKind = iota // the whole path
	PathPrefix                  // the path starts with it
	PathPattern                 // segment by segment; "{name}" matches one non-empty segment
)

func (k PathKind) String() string {
	switch k {
	case PathPrefix:
		return "prefix"
	case PathPattern:
		return "pattern"
	}
	return "exact"
}

// Path is a route's path rule. It is matched against the decoded path (so
// "$" in a policy matches a "$" or a "%24" on the wire), after the mount
// prefix is cut.
type Path struct {
	Kind  PathKind
	Value string
	// TrailingSlash optional: one trailing "/" more or less still matches
	// (Django's APPEND_SLASH routes both).
	OptionalSlash bool

	segments []string // PathPattern: the pattern's segments; "" is a wildcard
}

// PredicateKind is one of the fixed predicates.
type PredicateKind int

const (
	QueryTruthy        PredicateKind = iota + 1 // the last value of a query parameter is 1 or true (any case)
	HeaderPresent                               // a header is present (any value)
	BodyNonEmptyArray                           // a top-level body key holds a non-empty array
	BodyNonEmptyString                          // a top-level body key holds a non-empty string
	BodyTruthy                                  // a top-level body key is truthy as Python reads JSON
	AnyOf                                       // one of Any holds
)

var predicateNames = map[string]PredicateKind{
	"query_truthy":          QueryTruthy,
	"header_present":        HeaderPresent,
	"body_non_empty_array":  BodyNonEmptyArray,
	"body_non_empty_string": BodyNonEmptyString,
	"body_truthy":           BodyTruthy,
	"any":                   AnyOf,
}

func (k PredicateKind) String() string {
	for n, v := range predicateNames {
		if v == k {
			return n
		}
	}
	return fmt.Sprintf("PredicateKind(%d)", int(k))
}

// Predicate is one condition of a route.
type Predicate struct {
	Kind PredicateKind
	Name string      // the query parameter, header (canonical) or body key
	Any  []Predicate // AnyOf

	body int // index into the route's body keys
}

// FieldKind is what a field extracts.
type FieldKind int

const (
	FieldQueryTruthy  FieldKind = iota + 1 // bool: a query parameter is truthy
	FieldBodyArrayLen                      // int: the length of a top-level body array (0 if not an array)
	FieldBodyString                        // string: a top-level body string ("" if not a string)
	FieldHeader                            // string: the last value of a header
	FieldPathSegment                       // string: the segment a pattern's {name} matched
	FieldBodyInt                           // int: a top-level body integer (Field.Default when absent or null)
	FieldBodyTexts                         // int: the texts of an embeddings-style input (a string: 1; token ids: 1; an array of texts: its length)
)

var fieldKindNames = map[string]FieldKind{
	"query_truthy":   FieldQueryTruthy,
	"body_array_len": FieldBodyArrayLen,
	"body_string":    FieldBodyString,
	"header":         FieldHeader,
	"path_segment":   FieldPathSegment,
	"body_int":       FieldBodyInt,
	"body_texts":     FieldBodyTexts,
}

func (k FieldKind) String() string {
	for n, v := range fieldKindNames {
		if v == k {
			return n
		}
	}
	return fmt.Sprintf("FieldKind(%d)", int(k))
}

// Type is a field's value type.
type Type int

const (
	TypeBool Type = iota + 1
	TypeInt
	TypeString
)

func (t Type) String() string {
	switch t {
	case TypeBool:
		return "bool"
	case TypeInt:
		return "int"
	case TypeString:
		return "string"
	}
	return "unknown"
}

// Type returns the type of the value a field of kind k holds.
func (k FieldKind) Type() Type {
	switch k {
	case FieldQueryTruthy:
		return TypeBool
	case FieldBodyArrayLen, FieldBodyInt, FieldBodyTexts:
		return TypeInt
	}
	return TypeString
}

// body reports whether a field of kind k is read from the body.
func (k FieldKind) body() bool {
	switch k {
	case FieldBodyArrayLen, FieldBodyString, FieldBodyInt, FieldBodyTexts:
		return true
	}
	return false
}

// MaxBodyInt is the largest value a body_int field takes: a larger one
// (or one past int64) reads as MaxBodyInt, so no seats arithmetic on it
// overflows.
const MaxBodyInt = 1 << 40

// Field is one value a route extracts from a call.
type Field struct {
	Name   string
	Kind   FieldKind
	Source string // the query parameter, body key, header (canonical) or pattern segment name
	// Default is a body_int field's value when the body lacks the key or
	// holds null (default 0).
	Default int

	body int // index into the route's body keys, for body kinds
	seg  int // index into the pattern's segments, for FieldPathSegment
}

// MaxFields is the most fields a route extracts: Fields is a fixed array,
// so evaluation allocates nothing.
const MaxFields = 8

// maxBodyKeys is the most distinct top-level body keys a route reads.
const maxBodyKeys = 8

// Seats is a route's cost in one lane: Const, or ceil(Field / Per) capped
// at Max. Never below 1; the arithmetic saturates, so a field near 2^63
// costs the most seats, never wraps to few.
//
// Parse fills it in from the policy. The zero value costs 1 seat, and
// each field's zero value is useful in one built by hand: Field is looked
// up by name in the call's route (a route without it costs 1 seat), Per
// below 1 counts each unit a seat, and Max below 1 sets no cap of its own
// (the gate still caps a call's seats at the lane's limit).
type Seats struct {
	Const int    // when Field is ""
	Field string // an int field of the route
	Per   int    // ≥ 1 (Parse); below 1: 1
	Max   int    // ≥ 1 (Parse); below 1: no cap

	field int  // 1 + the index of Field in its route, set by Parse; 0: by name
	body  bool // Field is read from the body
}

// Of returns the seats for a call with fields f: Max for a body field of
// a body that could not be read (never the cheap call).
func (s Seats) Of(f *Fields) int {
	if s.Field == "" {
		return max(s.Const, 1)
	}
	if s.body && f != nil && f.route != nil && !f.bodyKnown {
		return s.Max
	}
	n := 0
	if f != nil {
		i := s.field - 1
		if i < 0 && f.route != nil {
			i = f.route.Field(s.Field)
		}
		n = f.Int(i)
	}
	per := max(s.Per, 1)
	seats := n / per // ceil(n / per) without the overflow of n + per - 1
	if n%per > 0 {
		seats++
	}
	seats = max(seats, 1)
	if s.Max >= 1 {
		seats = min(seats, s.Max)
	}
	return seats
}

// Class is a class of calls a lane may reserve part of its limit for:
// calls of the routes it names whose field equals a value (OCL's
// single_row: a match of exactly one row).
type Class struct {
	Name   string
	Routes []string
	Field  string // optional: an int or bool field of every route named
	Equals any    // int, bool or string, when Field is set

	routes uint64 // bit i: route i is one of Routes
	line   int
}

// Has reports whether a call of route r with fields f is of the class.
func (c *Class) Has(r *Route, f *Fields) bool {
	if r == nil || r.index >= 64 || c.routes&(1<<r.index) == 0 {
		return false
	}
	if c.Field == "" {
		return true
	}
	i := r.Field(c.Field)
	if i < 0 || f == nil {
		return false
	}
	switch want := c.Equals.(type) {
	case int:
		return f.Int(i) == want
	case bool:
		return f.Bool(i) == want
	case string:
		return f.Equal(i, want)
	}
	return false
}

// FieldInfo is a field name of the policy and its type.
type FieldInfo struct {
	Name string
	Type Type
}

// Fields returns every field name of the routes, each once, in the order
// they first appear, with its type (a name has one type in every route):
// the fields the log line writes, in its order.
func (p *Policy) Fields() []FieldInfo { return p.fields }

// Class returns the class named name, or nil.
func (p *Policy) Class(name string) *Class {
	for _, c := range p.Classes {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// RouteByLogName returns the route whose LogName is name, or nil.
func (p *Policy) RouteByLogName(name string) *Route {
	for _, r := range p.Routes {
		if r.LogName == name {
			return r
		}
	}
	return nil
}

// UserLane returns the index of the first lane keyed by the caller (the
// caller's own lane), or -1.
func (p *Policy) UserLane() int {
	for i, l := range p.Lanes {
		if l.ByUser() {
			return i
		}
	}
	return -1
}

// TaskLane returns the index of the first lane of scope task, or -1.
func (p *Policy) TaskLane() int {
	for i, l := range p.Lanes {
		if l.Scope == ScopeTask {
			return i
		}
	}
	return -1
}

// TierIndex returns the index of tier t in Tiers, or -1.
func (p *Policy) TierIndex(t string) int {
	for i, name := range p.tiers {
		if name == t {
			return i
		}
	}
	return -1
}

// WithTierGroups returns a copy of p in which the tier rule of tier grants
// it to groups (the gateway's --core-group and --early-access-group,
// which rename an auth group of the built-in policy without a policy file
// of one's own). It returns an error when p has no rule of groups for tier.
func (p *Policy) WithTierGroups(tier string, groups []string) (*Policy, error) {
	for i, r := range p.Identity.Tiers {
		if r.Tier != tier || len(r.Groups) == 0 {
			continue
		}
		q := *p
		q.Identity.Tiers = append([]TierRule(nil), p.Identity.Tiers...)
		q.Identity.Tiers[i].Groups = append([]string(nil), groups...)
		return &q, nil
	}
	return nil, fmt.Errorf("policy %s has no tier %q granted by groups", p.Name, tier)
}
