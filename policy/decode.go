package policy

import (
	"errors"
	"fmt"
	"net/textproto"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Load reads and parses the policy file at path.
func Load(path string) (*Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read policy: %w", err)
	}
	return Parse(path, data)
}

// Parse parses and checks a policy; file names it in messages. On any error
// it returns no policy and an Errors holding every error found.
func Parse(file string, data []byte) (*Policy, error) {
	d := &decoder{file: file}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, Errors{yamlError(file, err)}
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil, Errors{{File: file, Msg: "empty policy"}}
	}
	p := d.policy(doc.Content[0])
	if len(d.errs) == 0 {
		d.check(p)
	}
	if len(d.errs) > 0 {
		slices.SortStableFunc(d.errs, func(a, b *Error) int { return a.Line - b.Line })
		return nil, d.errs
	}
	p.File = file
	p.source = append([]byte(nil), data...)
	return p, nil
}

var yamlLine = regexp.MustCompile(`^yaml: (?:line (\d+): )?(.*)$`)

// yamlError turns a YAML syntax error into an Error with its line.
func yamlError(file string, err error) *Error {
	msg := err.Error()
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg = te.Errors[0]
	}
	e := &Error{File: file, Msg: msg}
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		e.Line, _ = strconv.Atoi(m[1])
		e.Msg = m[2]
	}
	return e
}

type decoder struct {
	file string
	errs Errors
}

func (d *decoder) errorf(n *yaml.Node, field, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	d.errs = append(d.errs, &Error{File: d.file, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// entry is one key of a mapping and its value.
type entry struct {
	key, val *yaml.Node
}

// mapping checks that n is a mapping of only the known keys (each once)
// and returns its entries by key. An unknown key is reported with the
// nearest known one.
func (d *decoder) mapping(n *yaml.Node, field string, known ...string) map[string]entry {
	out := map[string]entry{}
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		d.errorf(n, field, "want a mapping, got %s", kindName(n))
		return out
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		name := k.Value
		sub := join(field, name)
		if k.Kind != yaml.ScalarNode {
			d.errorf(k, field, "a key must be a plain name")
			continue
		}
		if known != nil && !contains(known, name) {
			d.errorf(k, sub, "%s", suggest("field", name, known))
			continue
		}
		if _, dup := out[name]; dup {
			d.errorf(k, sub, "given twice")
			continue
		}
		out[name] = entry{k, v}
	}
	return out
}

// lines returns the line of each entry.
func lines(m map[string]entry) map[string]int {
	out := make(map[string]int, len(m))
	for k, e := range m {
		out[k] = e.key.Line
	}
	return out
}

// pairs returns the entries of mapping n in order (keys are names the
// caller checks).
func (d *decoder) pairs(n *yaml.Node, field string) []entry {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		d.errorf(n, field, "want a mapping, got %s", kindName(n))
		return nil
	}
	var out []entry
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if seen[k.Value] {
			d.errorf(k, join(field, k.Value), "given twice")
			continue
		}
		seen[k.Value] = true
		out = append(out, entry{k, n.Content[i+1]})
	}
	return out
}

func (d *decoder) seq(n *yaml.Node, field string) []*yaml.Node {
	n = resolve(n)
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, field, "want a list, got %s", kindName(n))
		return nil
	}
	return n.Content
}

func (d *decoder) str(n *yaml.Node, field string) string {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		d.errorf(n, field, "want a string, got %s", kindName(n))
		return ""
	}
	return n.Value
}

func (d *decoder) int(n *yaml.Node, field string) int {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		d.errorf(n, field, "want a whole number, got %s", kindName(n))
		return 0
	}
	v, err := strconv.Atoi(n.Value)
	if err != nil || v < 0 || v > 1_000_000 {
		d.errorf(n, field, "want a whole number from 0 to 1000000, got %s", n.Value)
		return 0
	}
	return v
}

func (d *decoder) bool(n *yaml.Node, field string) bool {
	n = resolve(n)
	var v bool
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" || n.Decode(&v) != nil {
		d.errorf(n, field, "want true or false, got %s", kindName(n))
		return false
	}
	return v
}

func (d *decoder) strs(n *yaml.Node, field string) []string {
	var out []string
	for i, e := range d.seq(n, field) {
		out = append(out, d.str(e, fmt.Sprintf("%s[%d]", field, i)))
	}
	return out
}

// resolve follows an alias.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 16; i++ {
		n = n.Alias
	}
	return n
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "nothing"
		}
		return strconv.Quote(n.Value)
	}
	return "an alias"
}

func join(field, name string) string {
	if field == "" {
		return name
	}
	return field + "." + name
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

var topKeys = []string{"version", "name", "routes", "classes", "identity", "lanes", "names"}

func (d *decoder) policy(n *yaml.Node) *Policy {
	p := &Policy{}
	m := d.mapping(n, "", topKeys...)
	for _, k := range []string{"version", "name", "routes", "identity", "lanes", "names"} {
		if _, ok := m[k]; !ok && n.Kind == yaml.MappingNode {
			d.errorf(n, k, "missing")
		}
	}
	if e, ok := m["version"]; ok {
		if v := d.int(e.val, "version"); v != Version && len(d.errs) == 0 {
			d.errorf(e.val, "version", "this capgate reads version %d, not %d", Version, v)
		}
	}
	if e, ok := m["name"]; ok {
		p.Name = d.str(e.val, "name")
	}
	if e, ok := m["routes"]; ok {
		for i, rn := range d.seq(e.val, "routes") {
			r := d.route(rn, fmt.Sprintf("routes[%d]", i))
			r.index = i
			p.Routes = append(p.Routes, r)
		}
	}
	if e, ok := m["classes"]; ok {
		for i, cn := range d.seq(e.val, "classes") {
			p.Classes = append(p.Classes, d.class(cn, fmt.Sprintf("classes[%d]", i)))
		}
	}
	if e, ok := m["identity"]; ok {
		p.Identity = d.identity(e.val, "identity")
	}
	if e, ok := m["lanes"]; ok {
		for i, ln := range d.seq(e.val, "lanes") {
			p.Lanes = append(p.Lanes, d.lane(ln, fmt.Sprintf("lanes[%d]", i)))
		}
	}
	if e, ok := m["names"]; ok {
		p.Names = d.names(e.val, "names")
	}
	return p
}

var methodRE = regexp.MustCompile(`^[A-Z]+$`)

func (d *decoder) route(n *yaml.Node, field string) *Route {
	r := &Route{line: n.Line, Seats: map[string]Seats{}}
	m := d.mapping(n, field, "name", "method", "path", "when", "fields", "seats")
	r.lines = lines(m)
	d.required(n, field, m, "name", "method", "path")
	if e, ok := m["name"]; ok {
		r.Name = d.str(e.val, field+".name")
	}
	if e, ok := m["method"]; ok {
		r.Method = d.str(e.val, field+".method")
		if r.Method != "" && !methodRE.MatchString(r.Method) {
			d.errorf(e.val, field+".method", "%q is not an HTTP method in upper case: the route can never match", r.Method)
		}
	}
	if e, ok := m["path"]; ok {
		r.Path = d.path(e.val, field+".path")
	}
	if e, ok := m["when"]; ok {
		for i, pn := range d.seq(e.val, field+".when") {
			r.When = append(r.When, d.predicate(pn, fmt.Sprintf("%s.when[%d]", field, i), 0))
		}
	}
	if e, ok := m["fields"]; ok {
		for _, fe := range d.pairs(e.val, field+".fields") {
			r.Fields = append(r.Fields, d.field(fe, field+".fields."+fe.key.Value))
		}
		if len(r.Fields) > MaxFields {
			d.errorf(e.val, field+".fields", "at most %d fields, got %d", MaxFields, len(r.Fields))
		}
	}
	if e, ok := m["seats"]; ok {
		for _, se := range d.pairs(e.val, field+".seats") {
			r.Seats[se.key.Value] = d.seats(se.val, field+".seats."+se.key.Value)
		}
	}
	return r
}

func (d *decoder) required(n *yaml.Node, field string, m map[string]entry, keys ...string) {
	if resolve(n).Kind != yaml.MappingNode {
		return
	}
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			d.errorf(n, join(field, k), "missing")
		}
	}
}

func (d *decoder) path(n *yaml.Node, field string) Path {
	var p Path
	m := d.mapping(n, field, "exact", "prefix", "pattern", "trailing_slash")
	kinds := 0
	for _, k := range []struct {
		name string
		kind PathKind
	}{{"exact", PathExact}, {"prefix", PathPrefix}, {"pattern", PathPattern}} {
		if e, ok := m[k.name]; ok {
			kinds++
			p.Kind, p.Value = k.kind, d.str(e.val, field+"."+k.name)
			if p.Value != "" && !strings.HasPrefix(p.Value, "/") {
				d.errorf(e.val, field+"."+k.name, "%q does not start with \"/\": the route can never match", p.Value)
			}
			if i := strings.IndexByte(p.Value, '%'); i >= 0 {
				d.errorf(e.val, field+"."+k.name, "%q: paths are matched decoded, so write them decoded (\"$\", not \"%%24\"); a %%-escape can never match", p.Value)
			}
			if strings.ContainsAny(p.Value, "?#") {
				d.errorf(e.val, field+"."+k.name, "%q holds a query or fragment: paths are matched without them, so the route can never match", p.Value)
			}
		}
	}
	if kinds != 1 && resolve(n).Kind == yaml.MappingNode {
		d.errorf(n, field, "want exactly one of exact, prefix or pattern")
	}
	if e, ok := m["trailing_slash"]; ok {
		switch v := d.str(e.val, field+".trailing_slash"); v {
		case "optional":
			p.OptionalSlash = true
		case "exact":
		default:
			d.errorf(e.val, field+".trailing_slash", "%s", suggest("value", v, []string{"exact", "optional"}))
		}
	}
	if p.Kind == PathPattern {
		for _, s := range strings.Split(strings.TrimPrefix(p.Value, "/"), "/") {
			switch {
			case strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}") && len(s) > 2:
				p.segments = append(p.segments, wildcard)
			case strings.ContainsAny(s, "{}"):
				d.errorf(n, field+".pattern", "segment %q: a wildcard is a whole segment {name}", s)
			default:
				p.segments = append(p.segments, s)
			}
		}
	}
	return p
}

// segmentNames returns the wildcard names of a pattern, "" for literal
// segments.
func (p Path) segmentNames() []string {
	if p.Kind != PathPattern {
		return nil
	}
	var out []string
	for _, s := range strings.Split(strings.TrimPrefix(p.Value, "/"), "/") {
		if strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}") {
			out = append(out, s[1:len(s)-1])
		} else {
			out = append(out, "")
		}
	}
	return out
}

func predicateKeys() []string {
	return []string{"any", "body_non_empty_array", "body_non_empty_string", "body_truthy", "header_present", "query_truthy"}
}

func (d *decoder) predicate(n *yaml.Node, field string, depth int) Predicate {
	var p Predicate
	m := d.mapping(n, field, predicateKeys()...)
	if len(m) != 1 {
		if rn := resolve(n); rn.Kind == yaml.MappingNode && len(rn.Content) != 2 {
			d.errorf(n, field, "want exactly one predicate (%s)", strings.Join(predicateKeys(), ", "))
		}
		return p
	}
	for name, e := range m {
		p.Kind = predicateNames[name]
		sub := field + "." + name
		if p.Kind == AnyOf {
			if depth > 0 {
				d.errorf(e.key, sub, "any cannot nest")
				return p
			}
			for i, an := range d.seq(e.val, sub) {
				p.Any = append(p.Any, d.predicate(an, fmt.Sprintf("%s[%d]", sub, i), depth+1))
			}
			if len(p.Any) == 0 {
				d.errorf(e.val, sub, "an empty any never holds: the route can never match")
			}
			continue
		}
		p.Name = d.str(e.val, sub)
		if p.Name == "" {
			d.errorf(e.val, sub, "empty name")
		}
		if p.Kind == HeaderPresent {
			p.Name = textproto.CanonicalMIMEHeaderKey(p.Name)
		}
	}
	return p
}

func fieldKeys() []string {
	return []string{"body_array_len", "body_string", "header", "path_segment", "query_truthy"}
}

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

func (d *decoder) field(e entry, field string) Field {
	f := Field{Name: e.key.Value}
	if !nameRE.MatchString(f.Name) {
		d.errorf(e.key, field, "a field name is lower case letters, digits and _")
	}
	m := d.mapping(e.val, field, fieldKeys()...)
	if len(m) != 1 {
		if rn := resolve(e.val); rn.Kind == yaml.MappingNode && len(rn.Content) != 2 {
			d.errorf(e.val, field, "want exactly one of %s", strings.Join(fieldKeys(), ", "))
		}
		return f
	}
	for name, v := range m {
		f.Kind = fieldKindNames[name]
		f.Source = d.str(v.val, field+"."+name)
		if f.Source == "" {
			d.errorf(v.val, field+"."+name, "empty name")
		}
		if f.Kind == FieldHeader {
			f.Source = textproto.CanonicalMIMEHeaderKey(f.Source)
		}
	}
	return f
}

func (d *decoder) seats(n *yaml.Node, field string) Seats {
	var s Seats
	if rn := resolve(n); rn.Kind == yaml.ScalarNode {
		s.Const = d.int(n, field)
		if s.Const < 1 {
			d.errorf(n, field, "a call takes at least 1 seat")
		}
		return s
	}
	m := d.mapping(n, field, "field", "per", "max")
	d.required(n, field, m, "field", "per", "max")
	if e, ok := m["field"]; ok {
		s.Field = d.str(e.val, field+".field")
	}
	if e, ok := m["per"]; ok {
		if s.Per = d.int(e.val, field+".per"); s.Per < 1 {
			d.errorf(e.val, field+".per", "want at least 1")
		}
	}
	if e, ok := m["max"]; ok {
		if s.Max = d.int(e.val, field+".max"); s.Max < 1 {
			d.errorf(e.val, field+".max", "want at least 1")
		}
	}
	return s
}

func (d *decoder) class(n *yaml.Node, field string) *Class {
	c := &Class{line: n.Line}
	m := d.mapping(n, field, "name", "routes", "field", "equals")
	d.required(n, field, m, "name", "routes")
	if e, ok := m["name"]; ok {
		c.Name = d.str(e.val, field+".name")
	}
	if e, ok := m["routes"]; ok {
		c.Routes = d.strs(e.val, field+".routes")
	}
	fe, hasField := m["field"]
	ee, hasEquals := m["equals"]
	if hasField != hasEquals {
		d.errorf(n, field, "field and equals go together")
	}
	if hasField {
		c.Field = d.str(fe.val, field+".field")
	}
	if hasEquals {
		v := resolve(ee.val)
		switch v.Tag {
		case "!!int":
			c.Equals = d.int(v, field+".equals")
		case "!!bool":
			c.Equals = d.bool(v, field+".equals")
		case "!!str":
			c.Equals = v.Value
		default:
			d.errorf(v, field+".equals", "want a number, true/false or a string, got %s", kindName(v))
		}
	}
	return c
}

func (d *decoder) identity(n *yaml.Node, field string) Identity {
	var id Identity
	m := d.mapping(n, field, "resolver", "scheme", "tiers", "default_tier")
	d.required(n, field, m, "resolver", "scheme", "default_tier")
	if e, ok := m["resolver"]; ok {
		id.Resolver = d.str(e.val, field+".resolver")
		if id.Resolver == "jwt" {
			d.errorf(e.val, field+".resolver", "the jwt resolver is not in this release (valid: %s)", strings.Join(Resolvers, ", "))
		} else if id.Resolver != "" && !contains(Resolvers, id.Resolver) {
			d.errorf(e.val, field+".resolver", "%s", suggest("resolver", id.Resolver, Resolvers))
		}
	}
	if e, ok := m["scheme"]; ok {
		id.Scheme = d.str(e.val, field+".scheme")
		if id.Scheme != "" && id.Scheme != "Token" && id.Scheme != "Bearer" {
			d.errorf(e.val, field+".scheme", "%s", suggest("scheme", id.Scheme, []string{"Token", "Bearer"}))
		}
	}
	if e, ok := m["tiers"]; ok {
		for i, tn := range d.seq(e.val, field+".tiers") {
			sub := fmt.Sprintf("%s.tiers[%d]", field, i)
			tm := d.mapping(tn, sub, "tier", "staff", "groups")
			d.required(tn, sub, tm, "tier")
			var r TierRule
			if te, ok := tm["tier"]; ok {
				r.Tier = d.tier(te.val, sub+".tier")
			}
			if se, ok := tm["staff"]; ok {
				r.Staff = d.bool(se.val, sub+".staff")
			}
			if ge, ok := tm["groups"]; ok {
				r.Groups = d.strs(ge.val, sub+".groups")
			}
			if !r.Staff && len(r.Groups) == 0 && resolve(tn).Kind == yaml.MappingNode {
				d.errorf(tn, sub, "a rule that names no group and not staff never holds")
			}
			id.Tiers = append(id.Tiers, r)
		}
	}
	if e, ok := m["default_tier"]; ok {
		id.Default = d.tier(e.val, field+".default_tier")
	}
	return id
}

func (d *decoder) tier(n *yaml.Node, field string) string {
	t := d.str(n, field)
	if t != "" && !nameRE.MatchString(t) {
		d.errorf(n, field, "a tier name is lower case letters, digits and _")
	}
	return t
}

func (d *decoder) lane(n *yaml.Node, field string) *Lane {
	l := &Lane{line: n.Line}
	m := d.mapping(n, field, "name", "scope", "key", "routes", "only_if", "limit", "config", "reserve", "headers")
	l.lines = lines(m)
	d.required(n, field, m, "name", "scope", "routes", "limit")
	if e, ok := m["name"]; ok {
		l.Name = d.str(e.val, field+".name")
		if l.Name != "" && !nameRE.MatchString(l.Name) {
			d.errorf(e.val, field+".name", "a lane name is lower case letters, digits and _")
		}
	}
	if e, ok := m["scope"]; ok {
		switch s := d.str(e.val, field+".scope"); s {
		case "cluster":
			l.Scope = ScopeCluster
		case "task":
			l.Scope = ScopeTask
		case "key":
			l.Scope = ScopeKey
		default:
			d.errorf(e.val, field+".scope", "%s", suggest("scope", s, []string{"cluster", "task", "key"}))
		}
	}
	if e, ok := m["key"]; ok {
		l.Key = d.str(e.val, field+".key")
		if l.Scope != ScopeKey && l.Scope != 0 {
			d.errorf(e.val, field+".key", "only a lane of scope key has a key")
		}
	} else if l.Scope == ScopeKey {
		d.errorf(n, field+".key", "missing: a lane of scope key names its key (user, tier or a call field)")
	}
	if e, ok := m["routes"]; ok {
		l.Routes = d.strs(e.val, field+".routes")
		if len(l.Routes) == 0 {
			d.errorf(e.val, field+".routes", "no route takes the lane")
		}
	}
	if e, ok := m["only_if"]; ok {
		l.OnlyIf = d.str(e.val, field+".only_if")
	}
	if e, ok := m["limit"]; ok {
		if resolve(e.val).Kind == yaml.MappingNode {
			l.Limit.PerTier = map[string]int{}
			for _, te := range d.pairs(e.val, field+".limit") {
				l.Limit.PerTier[te.key.Value] = d.int(te.val, field+".limit."+te.key.Value)
			}
		} else {
			l.Limit.Value = d.int(e.val, field+".limit")
		}
	}
	if e, ok := m["config"]; ok {
		l.Limit.Config = d.configKey(e.val, field+".config")
	} else {
		l.Limit.Config = "lanes." + l.Name
	}
	if e, ok := m["reserve"]; ok {
		sub := field + ".reserve"
		rm := d.mapping(e.val, sub, "class", "value", "config")
		d.required(e.val, sub, rm, "class", "value")
		r := &Reserve{Config: "lanes." + l.Name + ".reserve"}
		if ce, ok := rm["class"]; ok {
			r.Class = d.str(ce.val, sub+".class")
		}
		if ve, ok := rm["value"]; ok {
			r.Value = d.int(ve.val, sub+".value")
		}
		if ke, ok := rm["config"]; ok {
			r.Config = d.configKey(ke.val, sub+".config")
		}
		l.Reserve = r
	}
	if e, ok := m["headers"]; ok {
		sub := field + ".headers"
		hm := d.mapping(e.val, sub, "limit", "in_flight")
		d.required(e.val, sub, hm, "limit", "in_flight")
		h := &LaneHeaders{}
		if he, ok := hm["limit"]; ok {
			h.Limit = d.token(he.val, sub+".limit")
		}
		if he, ok := hm["in_flight"]; ok {
			h.InFlight = d.token(he.val, sub+".in_flight")
		}
		l.Headers = h
	}
	return l
}

var configRE = regexp.MustCompile(`^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$`)

func (d *decoder) configKey(n *yaml.Node, field string) string {
	k := d.str(n, field)
	if k != "" && !configRE.MatchString(k) {
		d.errorf(n, field, "%q is not a config key (dotted lower-case names)", k)
	}
	return k
}

// token checks a header name (or part of one).
func (d *decoder) token(n *yaml.Node, field string) string {
	s := d.str(n, field)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			d.errorf(n, field, "%q: a header name is letters, digits and -", s)
			break
		}
	}
	return s
}

func (d *decoder) names(n *yaml.Node, field string) Names {
	var nm Names
	m := d.mapping(n, field, "header_prefix", "ratelimit", "refusal", "log_event", "client_metadata", "request_source_header")
	d.required(n, field, m, "header_prefix", "refusal", "log_event")
	if e, ok := m["header_prefix"]; ok {
		nm.HeaderPrefix = d.token(e.val, field+".header_prefix")
		if nm.HeaderPrefix == "" {
			d.errorf(e.val, field+".header_prefix", "empty")
		}
	}
	if e, ok := m["ratelimit"]; ok {
		nm.RateLimit = d.bool(e.val, field+".ratelimit")
	}
	if e, ok := m["refusal"]; ok {
		sub := field + ".refusal"
		rm := d.mapping(e.val, sub, "detail", "error_code")
		d.required(e.val, sub, rm, "detail", "error_code")
		if de, ok := rm["detail"]; ok {
			nm.RefusalDetail = d.str(de.val, sub+".detail")
			if rest := strings.ReplaceAll(nm.RefusalDetail, "{retry_after}", ""); strings.ContainsAny(rest, "{}") {
				d.errorf(de.val, sub+".detail", "the only placeholder is {retry_after}")
			}
		}
		if ce, ok := rm["error_code"]; ok {
			nm.RefusalCode = d.str(ce.val, sub+".error_code")
		}
	}
	if e, ok := m["log_event"]; ok {
		nm.LogEvent = d.str(e.val, field+".log_event")
		if nm.LogEvent != "" && !nameRE.MatchString(nm.LogEvent) {
			d.errorf(e.val, field+".log_event", "an event name is lower case letters, digits and _")
		}
	}
	if e, ok := m["client_metadata"]; ok {
		sub := field + ".client_metadata"
		cm := d.mapping(e.val, sub, "header", "aware_field")
		d.required(e.val, sub, cm, "header", "aware_field")
		if he, ok := cm["header"]; ok {
			nm.MetadataHeader = d.token(he.val, sub+".header")
		}
		if ae, ok := cm["aware_field"]; ok {
			nm.AwareField = d.str(ae.val, sub+".aware_field")
		}
	}
	if e, ok := m["request_source_header"]; ok {
		nm.RequestSourceHeader = d.token(e.val, field+".request_source_header")
	}
	return nm
}
