package policy

// Decoding the identity, the lanes and the names.

import (
	"fmt"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

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
