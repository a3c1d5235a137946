package policy

// Decoding a route and what it names: the path, the predicates, the
// fields, the seats, and the classes of calls.

import (
	"fmt"
	"net/textproto"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

var methodRE = regexp.MustCompile(`^[A-Z]+$`)

func (d *decoder) route(n *yaml.Node, field string) *Route {
	r := &Route{line: n.Line, Seats: map[string]Seats{}}
	m := d.mapping(n, field, "name", "log_name", "method", "path", "when", "fields", "seats", "units",
		"unreadable_body", "on_client_gone", "usage")
	r.lines = lines(m)
	d.required(n, field, m, "name", "method", "path")
	if e, ok := m["name"]; ok {
		r.Name = d.str(e.val, field+".name")
	}
	r.LogName = r.Name
	if e, ok := m["log_name"]; ok {
		r.LogName = d.str(e.val, field+".log_name")
		if r.LogName == "" {
			d.errorf(e.val, field+".log_name", "empty")
		}
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
	if e, ok := m["units"]; ok {
		r.Units = d.str(e.val, field+".units")
	}
	if e, ok := m["seats"]; ok {
		for _, se := range d.pairs(e.val, field+".seats") {
			r.Seats[se.key.Value] = d.seats(se.val, field+".seats."+se.key.Value)
		}
	}
	if e, ok := m["unreadable_body"]; ok {
		switch v := d.str(e.val, field+".unreadable_body"); v {
		case "refuse":
		case "max":
			r.UnreadableBody = UnreadableMax
		default:
			d.errorf(e.val, field+".unreadable_body", "%s", suggest("value", v, []string{"refuse", "max"}))
		}
	}
	if e, ok := m["on_client_gone"]; ok {
		switch v := d.str(e.val, field+".on_client_gone"); v {
		case "hold":
		case "cancel":
			r.OnClientGone = ClientGoneCancel
		default:
			d.errorf(e.val, field+".on_client_gone", "%s", suggest("value", v, []string{"hold", "cancel"}))
		}
	}
	if e, ok := m["usage"]; ok {
		r.Usage = d.usage(e.val, field+".usage")
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
	return []string{"body_array_len", "body_int", "body_string", "body_texts", "header", "path_segment", "query_truthy"}
}

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

func (d *decoder) field(e entry, field string) Field {
	f := Field{Name: e.key.Value}
	if !nameRE.MatchString(f.Name) {
		d.errorf(e.key, field, "a field name is lower case letters, digits and _")
	}
	m := d.mapping(e.val, field, append(fieldKeys(), "default")...)
	de, hasDefault := m["default"]
	delete(m, "default")
	if len(m) != 1 {
		if rn := resolve(e.val); rn.Kind == yaml.MappingNode && len(rn.Content) != 2 && !(hasDefault && len(rn.Content) == 4) {
			d.errorf(e.val, field, "want exactly one of %s", strings.Join(fieldKeys(), ", "))
		}
		return f
	}
	if hasDefault {
		f.Default = d.int(de.val, field+".default")
		if _, ok := m["body_int"]; !ok {
			d.errorf(de.key, field+".default", "only a body_int field has a default")
		}
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

// Idempotency is the policy's optional "idempotency": what the gateway's
// idempotency (the runtime config's idempotency.mode) reads of a request.
type Idempotency struct {
	// RetryHeader, if set, is the request header by which a client marks
	// a retry (the OpenAI clients' X-Stainless-Retry-Count): a value of 1
	// or more. With it, mode auto joins only retries (and calls with an
	// Idempotency-Key), never two first attempts: a sampling API answers
	// two identical requests differently. Without it, mode auto takes any
	// identical request as a repeat (the built-in policy: OCL's Mapper
	// retries without marking them).
	RetryHeader string
	// FingerprintHeaders are request headers that make two requests
	// different (an OpenAI-Organization): they are part of a request's
	// fingerprint, beside the method, path, query, body and the headers
	// that change what an API answers.
	FingerprintHeaders []string
}

// MaxFingerprintHeaders is the most headers a policy adds to a request's
// fingerprint.
const MaxFingerprintHeaders = 8

func (d *decoder) idempotency(n *yaml.Node, field string) Idempotency {
	var id Idempotency
	m := d.mapping(n, field, "retry_header", "fingerprint_headers")
	if e, ok := m["retry_header"]; ok {
		id.RetryHeader = textproto.CanonicalMIMEHeaderKey(d.token(e.val, field+".retry_header"))
		if id.RetryHeader == "" {
			d.errorf(e.val, field+".retry_header", "empty")
		}
	}
	if e, ok := m["fingerprint_headers"]; ok {
		for i, hn := range d.seq(e.val, field+".fingerprint_headers") {
			h := textproto.CanonicalMIMEHeaderKey(d.token(hn, fmt.Sprintf("%s.fingerprint_headers[%d]", field, i)))
			if h == "" {
				d.errorf(hn, fmt.Sprintf("%s.fingerprint_headers[%d]", field, i), "empty")
			}
			id.FingerprintHeaders = append(id.FingerprintHeaders, h)
		}
		if len(id.FingerprintHeaders) > MaxFingerprintHeaders {
			d.errorf(e.val, field+".fingerprint_headers", "at most %d headers, got %d", MaxFingerprintHeaders, len(id.FingerprintHeaders))
		}
	}
	return id
}
