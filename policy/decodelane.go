package policy

// Decoding the identity, the lanes and the names.

import (
	"fmt"
	"regexp"

	"go.yaml.in/yaml/v3"
)

func (d *decoder) identity(n *yaml.Node, field string) Identity {
	var id Identity
	m := d.mapping(n, field, "resolver", "scheme", "tiers", "default_tier", "jwt", "unverified")
	d.required(n, field, m, "resolver", "scheme", "default_tier")
	if e, ok := m["resolver"]; ok {
		id.Resolver = d.str(e.val, field+".resolver")
		if id.Resolver != "" && !contains(Resolvers, id.Resolver) {
			d.errorf(e.val, field+".resolver", "%s", suggest("resolver", id.Resolver, Resolvers))
		}
	}
	if e, ok := m["jwt"]; ok {
		id.JWT = d.jwt(e.val, field+".jwt")
		if id.Resolver != "" && id.Resolver != "jwt" {
			d.errorf(e.key, field+".jwt", "only the jwt resolver reads it (the resolver is %q)", id.Resolver)
		}
	} else if id.Resolver == "jwt" {
		d.errorf(n, field+".jwt", "missing: the jwt resolver needs the issuer and audience")
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
	if e, ok := m["unverified"]; ok {
		switch v := d.str(e.val, field+".unverified"); v {
		case "refuse":
			id.RefuseUnverified = true
		case "anonymous":
		default:
			d.errorf(e.val, field+".unverified", "%s", suggest("value", v, []string{"anonymous", "refuse"}))
		}
	}
	return id
}

func (d *decoder) jwt(n *yaml.Node, field string) *JWT {
	j := &JWT{UserClaim: "sub", GroupsClaim: "groups"}
	m := d.mapping(n, field, "issuer", "audience", "user_claim", "groups_claim", "staff_claim")
	d.required(n, field, m, "issuer", "audience")
	for _, f := range []struct {
		key string
		dst *string
	}{{"issuer", &j.Issuer}, {"audience", &j.Audience}, {"user_claim", &j.UserClaim},
		{"groups_claim", &j.GroupsClaim}, {"staff_claim", &j.StaffClaim}} {
		if e, ok := m[f.key]; ok {
			*f.dst = d.str(e.val, field+"."+f.key)
			if *f.dst == "" {
				d.errorf(e.val, field+"."+f.key, "empty")
			}
		}
	}
	return j
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
	m := d.mapping(n, field, "name", "scope", "key", "routes", "only_if", "limit", "key_limits", "config", "reserve", "headers", "log", "status")
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
	if e, ok := m["key_limits"]; ok {
		l.KeyLimits = d.keyLimits(e.val, field+".key_limits")
	}
	if e, ok := m["config"]; ok {
		l.Limit.Config = d.configKey(e.val, field+".config")
	} else {
		l.Limit.Config = "lanes." + l.Name
	}
	if e, ok := m["reserve"]; ok {
		sub := field + ".reserve"
		rm := d.mapping(e.val, sub, "class", "value", "config", "lend")
		d.required(e.val, sub, rm, "class", "value")
		r := &Reserve{Config: "reserves." + l.Name}
		if ce, ok := rm["class"]; ok {
			r.Class = d.str(ce.val, sub+".class")
		}
		if ve, ok := rm["value"]; ok {
			r.Value = d.int(ve.val, sub+".value")
		}
		if ke, ok := rm["config"]; ok {
			r.Config = d.configKey(ke.val, sub+".config")
		}
		if le, ok := rm["lend"]; ok {
			if r.Lend = d.int(le.val, sub+".lend"); r.Lend > r.Value {
				d.errorf(le.val, sub+".lend", "lend %d is more than the reserve %d: a lane lends only the seats it reserves", r.Lend, r.Value)
			}
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
	l.Log = LaneLog{InFlight: l.Name + "_in_flight", Limit: l.Name + "_limit"}
	if e, ok := m["log"]; ok {
		sub := field + ".log"
		lm := d.mapping(e.val, sub, "in_flight", "limit")
		d.required(e.val, sub, lm, "in_flight", "limit")
		if le, ok := lm["in_flight"]; ok {
			l.Log.InFlight = d.logKey(le.val, sub+".in_flight")
		}
		if le, ok := lm["limit"]; ok {
			l.Log.Limit = d.logKey(le.val, sub+".limit")
		}
	}
	l.Status = l.Name
	if e, ok := m["status"]; ok {
		l.Status = d.logKey(e.val, field+".status")
	}
	return l
}

// keyLimits decodes a lane's key_limits: a mapping of key values (a model's
// name, as calls send it) to limits.
func (d *decoder) keyLimits(n *yaml.Node, field string) map[string]int {
	out := map[string]int{}
	pairs := d.pairs(n, field)
	for _, e := range pairs {
		k := e.key.Value
		if msg := KeyLimitValueProblem(k); msg != "" {
			d.errorf(e.key, field, "%q: %s", k, msg)
			continue
		}
		out[k] = d.int(e.val, field+"."+k)
	}
	if len(pairs) > MaxKeyLimits {
		d.errorf(n, field, "at most %d key values, got %d", MaxKeyLimits, len(pairs))
	}
	return out
}

// KeyLimitValueProblem says what is wrong with v as a key value a key
// limit names (the policy's or the runtime config's), or "".
func KeyLimitValueProblem(v string) string {
	switch {
	case v == "":
		return "a key value is not empty (calls without one count under (none))"
	case len(v) > MaxKeyLimitValue:
		return fmt.Sprintf("a key value is at most %d bytes", MaxKeyLimitValue)
	}
	for _, r := range v {
		if r < 0x20 || r == 0x7f {
			return "a key value has no control characters"
		}
	}
	return ""
}

// logKey checks a key of the log line or of the status JSON.
func (d *decoder) logKey(n *yaml.Node, field string) string {
	s := d.str(n, field)
	if s != "" && !nameRE.MatchString(s) {
		d.errorf(n, field, "%q: a key is lower case letters, digits and _", s)
	}
	return s
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

var keyPrefixRE = regexp.MustCompile(`^[A-Za-z0-9_.-]+(:[A-Za-z0-9_.-]+)*$`)

func (d *decoder) names(n *yaml.Node, field string) Names {
	nm := Names{LogRouteKey: DefaultLogRouteKey} // KeyPrefix: set by policy when not given
	var refusal *Template
	m := d.mapping(n, field, "header_prefix", "ratelimit", "refusal", "log_event", "client_metadata",
		"request_source_header", "key_prefix", "log_route_key", "answers")
	d.required(n, field, m, "header_prefix", "refusal", "log_event")
	if e, ok := m["key_prefix"]; ok {
		nm.KeyPrefix = d.str(e.val, field+".key_prefix")
		if !keyPrefixRE.MatchString(nm.KeyPrefix) {
			d.errorf(e.val, field+".key_prefix", "%q: a key prefix is letters, digits and _ . -, parts joined by \":\"", nm.KeyPrefix)
		}
	}
	if e, ok := m["log_route_key"]; ok {
		nm.LogRouteKey = d.logKey(e.val, field+".log_route_key")
	}
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
			refusal = d.refusalText(de.val, sub+".detail", nm.RefusalDetail)
		}
		if ce, ok := rm["error_code"]; ok {
			nm.RefusalCode = d.str(ce.val, sub+".error_code")
		}
	}
	if e, ok := m["answers"]; ok {
		nm.Answers = d.answers(e.val, field+".answers")
	}
	nm.Answers.refusal = refusal
	if e, ok := m["log_event"]; ok {
		nm.LogEvent = d.str(e.val, field+".log_event")
		if nm.LogEvent != "" && !nameRE.MatchString(nm.LogEvent) {
			d.errorf(e.val, field+".log_event", "an event name is lower case letters, digits and _")
		}
	}
	if e, ok := m["client_metadata"]; ok {
		sub := field + ".client_metadata"
		cm := d.mapping(e.val, sub, "header", "aware_field", "log")
		d.required(e.val, sub, cm, "header", "aware_field")
		if le, ok := cm["log"]; ok {
			for i, kn := range d.seq(le.val, sub+".log") {
				ks := fmt.Sprintf("%s.log[%d]", sub, i)
				km := d.mapping(kn, ks, "key", "max_chars")
				d.required(kn, ks, km, "key", "max_chars")
				var k MetadataKey
				if ke, ok := km["key"]; ok {
					k.Key = d.logKey(ke.val, ks+".key")
				}
				if ke, ok := km["max_chars"]; ok {
					if k.MaxChars = d.int(ke.val, ks+".max_chars"); k.MaxChars < 1 || k.MaxChars > 1000 {
						d.errorf(ke.val, ks+".max_chars", "want 1 to 1000, got %d", k.MaxChars)
					}
				}
				nm.MetadataLog = append(nm.MetadataLog, k)
			}
			if len(nm.MetadataLog) > MaxMetadataLog {
				d.errorf(le.val, sub+".log", "at most %d keys, got %d", MaxMetadataLog, len(nm.MetadataLog))
			}
		}
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
