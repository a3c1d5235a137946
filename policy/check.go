package policy

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// check validates the cross references of a decoded policy and fills in
// the indexes evaluation uses. Every error it finds is recorded.
func (d *decoder) check(p *Policy) {
	routeNames := d.checkRoutes(p)
	tiers := p.Identity.tierNames()
	p.tiers = tiers
	d.checkClasses(p, routeNames)
	d.checkLanes(p, routeNames, tiers)
	if len(p.Lanes) > MaxLanes {
		d.at(p.Lanes[MaxLanes].line, fmt.Sprintf("lanes[%d]", MaxLanes), "at most %d lanes, got %d", MaxLanes, len(p.Lanes))
	}
	taken := map[string]bool{}
	for i, l := range p.Lanes {
		l.index = i
		for _, rn := range l.Routes {
			taken[rn] = true
			r := p.Route(rn)
			if r != nil && i < 64 {
				r.lanes |= 1 << i
			}
			// A lane keyed by a body field: the call's cost is in its body.
			if r != nil && l.ByField() {
				if j := r.Field(l.Key); j >= 0 && r.Fields[j].Kind.body() {
					r.bodyCost = true
				}
			}
		}
	}
	for _, c := range p.Classes {
		for _, rn := range c.Routes {
			if r := p.Route(rn); r != nil && r.index < 64 {
				c.routes |= 1 << r.index
			}
		}
	}
	d.checkNames(p)
	for i, r := range p.Routes {
		if r.Name != "" && !taken[r.Name] {
			d.errs = append(d.errs, &Error{File: d.file, Line: r.line, Field: fmt.Sprintf("routes[%d]", i),
				Msg: fmt.Sprintf("route %q takes no lane: its calls would be counted nowhere", r.Name)})
			continue
		}
		always := false
		for _, l := range p.Lanes {
			if l.Takes(r) && l.OnlyIf == "" {
				always = true
			}
		}
		if r.Name != "" && !always {
			d.errs = append(d.errs, &Error{File: d.file, Line: r.line, Field: fmt.Sprintf("routes[%d]", i),
				Msg: fmt.Sprintf("every lane of route %q has only_if: a call none of them takes would be counted nowhere", r.Name)})
		}
	}
}

func (d *decoder) at(line int, field, format string, args ...any) {
	d.errs = append(d.errs, &Error{File: d.file, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)})
}

func (d *decoder) checkRoutes(p *Policy) []string {
	var names []string
	for i, r := range p.Routes {
		field := fmt.Sprintf("routes[%d]", i)
		if r.Name != "" {
			if contains(names, r.Name) {
				d.at(r.lineOf("name"), field+".name", "route %q is given twice", r.Name)
			}
			if !nameRE.MatchString(r.Name) {
				d.at(r.lineOf("name"), field+".name", "a route name is lower case letters, digits and _")
			}
			names = append(names, r.Name)
		}
		// The body keys When and Fields read, each once.
		addKey := func(k string) int {
			if j := slices.Index(r.bodyKeys, k); j >= 0 {
				return j
			}
			r.bodyKeys = append(r.bodyKeys, k)
			return len(r.bodyKeys) - 1
		}
		kinds := map[string]PredicateKind{}
		for j := range r.When {
			pr := &r.When[j]
			if isBody(pr.Kind) {
				pr.body = addKey(pr.Name)
				if k, ok := kinds[pr.Name]; ok && k != pr.Kind && k != BodyTruthy && pr.Kind != BodyTruthy {
					d.at(r.lineOf("when"), fmt.Sprintf("%s.when[%d]", field, j), "body key %q cannot be both %s and %s: the route can never match", pr.Name, k, pr.Kind)
				}
				kinds[pr.Name] = pr.Kind
			}
			for k := range pr.Any {
				if isBody(pr.Any[k].Kind) {
					pr.Any[k].body = addKey(pr.Any[k].Name)
				}
			}
		}
		segs := r.Path.segmentNames()
		var fieldNames []string
		for j := range r.Fields {
			f := &r.Fields[j]
			sub := fmt.Sprintf("%s.fields.%s", field, f.Name)
			if f.Name == KeyUser || f.Name == KeyTier {
				d.at(r.lineOf("fields"), sub, "%q is the caller's, not a call field: name it otherwise", f.Name)
			}
			fieldNames = append(fieldNames, f.Name)
			switch f.Kind {
			case FieldBodyArrayLen, FieldBodyString, FieldBodyInt, FieldBodyTexts:
				f.body = addKey(f.Source)
			case FieldPathSegment:
				f.seg = slices.Index(segs, f.Source)
				if f.seg < 0 || f.Source == "" {
					d.at(r.lineOf("fields"), sub, "the path has no segment {%s}", f.Source)
				}
			}
		}
		r.units = -1
		if r.Units != "" {
			switch j := r.Field(r.Units); {
			case j < 0:
				d.at(r.lineOf("units"), field+".units", "%s", suggest("field", r.Units, fieldNames))
			case r.Fields[j].Kind.Type() != TypeInt:
				d.at(r.lineOf("units"), field+".units", "field %q is %s; units count an int field", r.Units, r.Fields[j].Kind.Type().article())
			default:
				r.units = j
			}
		}
		if len(r.bodyKeys) > maxBodyKeys {
			d.at(r.lineOf("fields"), field, "reads %d body keys, at most %d", len(r.bodyKeys), maxBodyKeys)
		}
		for _, lane := range slices.Sorted(maps.Keys(r.Seats)) {
			s := r.Seats[lane]
			if s.Field == "" {
				continue
			}
			j := r.Field(s.Field)
			switch {
			case j < 0:
				d.at(r.lineOf("seats"), field+".seats."+lane+".field", "%s", suggest("field", s.Field, fieldNames))
			case r.Fields[j].Kind.Type() != TypeInt:
				d.at(r.lineOf("seats"), field+".seats."+lane+".field", "field %q is %s; seats count an int field", s.Field, r.Fields[j].Kind.Type().article())
			}
			s.field = j + 1
			s.body = j >= 0 && r.Fields[j].Kind.body()
			r.bodyCost = r.bodyCost || s.body
			r.Seats[lane] = s
		}
		// A route after one that matches every request it would is dead.
		for _, q := range p.Routes[:i] {
			if q.Method == r.Method && len(q.When) == 0 && shadows(q.Path, r.Path) {
				d.at(r.lineOf("path"), field+".path", "route %q before it takes every request it would: the route can never match", q.Name)
				break
			}
		}
	}
	return names
}

func isBody(k PredicateKind) bool {
	return k == BodyNonEmptyArray || k == BodyNonEmptyString || k == BodyTruthy
}

// shadows reports whether every path b matches is matched by a.
func shadows(a, b Path) bool {
	if a.Kind == b.Kind && a.Value == b.Value && (a.OptionalSlash || !b.OptionalSlash) {
		return true
	}
	if b.Kind == PathExact {
		if b.OptionalSlash {
			v := strings.TrimSuffix(b.Value, "/")
			return matchPath(&a, v) && matchPath(&a, v+"/")
		}
		return matchPath(&a, b.Value)
	}
	if b.Kind == PathPrefix && a.Kind == PathPrefix {
		return strings.HasPrefix(b.Value, a.Value)
	}
	return false
}

// runtimeKeys are the runtime config's keys that are not a lane's limit:
// no lane's config key may start with one.
var runtimeKeys = []string{"mode", "enforce_for", "lease_seconds", "renew_seconds", "max_hold_seconds",
	"retry_after", "wait", "unidentified", "idempotency", "adaptive", "lending", KeyLimitsKey}

func (d *decoder) checkClasses(p *Policy, routes []string) {
	var names []string
	for i, c := range p.Classes {
		field := fmt.Sprintf("classes[%d]", i)
		if contains(names, c.Name) {
			d.at(c.line, field+".name", "class %q is given twice", c.Name)
		}
		if !nameRE.MatchString(c.Name) {
			d.at(c.line, field+".name", "a class name is lower case letters, digits and _")
		}
		names = append(names, c.Name)
		for j, rn := range c.Routes {
			r := p.Route(rn)
			if r == nil {
				d.at(c.line, fmt.Sprintf("%s.routes[%d]", field, j), "%s", suggest("route", rn, routes))
				continue
			}
			if c.Field == "" {
				continue
			}
			k := r.Field(c.Field)
			if k < 0 {
				d.at(c.line, field+".field", "route %q has no field %q", rn, c.Field)
				continue
			}
			want := r.Fields[k].Kind.Type().String()
			got := fmt.Sprintf("%T", c.Equals)
			if got != want {
				d.at(c.line, field+".equals", "field %q of route %q is %s, equals is %s", c.Field, rn, article(want), article(got))
			}
		}
	}
}

func (d *decoder) checkLanes(p *Policy, routes, tiers []string) {
	var names []string
	configs := map[string]string{}
	claim := func(line int, field, key, lane string) {
		if top, _, _ := strings.Cut(key, "."); contains(runtimeKeys, top) {
			d.at(line, field, "config key %q is the runtime config's own %q", key, top)
			return
		}
		if other, ok := configs[key]; ok {
			d.at(line, field, "config key %q is already lane %q's", key, other)
			return
		}
		// One key can't be a number and hold others: "lanes.x" and
		// "lanes.x.reserve" would make lanes.x both.
		for k, other := range configs {
			if strings.HasPrefix(key, k+".") || strings.HasPrefix(k, key+".") {
				d.at(line, field, "config key %q and lane %q's %q can't both be numbers: one is inside the other", key, other, k)
				return
			}
		}
		configs[key] = lane
	}
	var classes []string
	for _, c := range p.Classes {
		classes = append(classes, c.Name)
	}
	for i, l := range p.Lanes {
		field := fmt.Sprintf("lanes[%d]", i)
		if contains(names, l.Name) {
			d.at(l.lineOf("name"), field+".name", "lane %q is given twice", l.Name)
		}
		names = append(names, l.Name)
		var rs []*Route
		for j, rn := range l.Routes {
			r := p.Route(rn)
			if r == nil {
				d.at(l.lineOf("routes"), fmt.Sprintf("%s.routes[%d]", field, j), "%s", suggest("route", rn, routes))
				continue
			}
			rs = append(rs, r)
		}
		// A lane keyed or filtered by a call field needs it on every route.
		needField := func(key, name string, want Type) {
			sub := field + "." + key
			for _, r := range rs {
				k := r.Field(name)
				if k < 0 {
					d.at(l.lineOf(key), sub, "route %q has no field %q", r.Name, name)
				} else if got := r.Fields[k].Kind.Type(); got != want {
					d.at(l.lineOf(key), sub, "field %q of route %q is %s, want %s", name, r.Name, got.article(), want.article())
				}
			}
		}
		if l.Scope == ScopeKey && l.Key != "" && l.Key != KeyUser && l.Key != KeyTier {
			needField("key", l.Key, TypeString)
		}
		if l.OnlyIf != "" {
			needField("only_if", l.OnlyIf, TypeBool)
		}
		if l.Limit.PerTier != nil {
			for _, t := range slices.Sorted(maps.Keys(l.Limit.PerTier)) {
				if !contains(tiers, t) {
					d.at(l.lineOf("limit"), field+".limit."+t, "%s", suggest("tier", t, tiers))
				}
			}
			for _, t := range tiers {
				if _, ok := l.Limit.PerTier[t]; !ok {
					d.at(l.lineOf("limit"), field+".limit", "no limit for tier %q", t)
				}
			}
		}
		for _, k := range l.Limit.ConfigKeys(tiers) {
			claim(l.lineOf("config"), field+".config", k, l.Name)
		}
		if r := l.Reserve; r != nil {
			if r.Class != "" && !contains(classes, r.Class) {
				d.at(l.lineOf("reserve"), field+".reserve.class", "%s", suggest("class", r.Class, classes))
			}
			if l.Limit.PerTier == nil && r.Value > l.Limit.Value {
				d.at(l.lineOf("reserve"), field+".reserve.value", "reserve %d is more than the limit %d", r.Value, l.Limit.Value)
			}
			claim(l.lineOf("reserve"), field+".reserve.config", r.Config, l.Name)
		}
		if len(l.KeyLimits) > 0 {
			if !l.ByField() {
				d.at(l.lineOf("key_limits"), field+".key_limits", "only a lane keyed by a call field (a model, a tenant) has limits per key value")
			}
			for _, k := range slices.Sorted(maps.Keys(l.KeyLimits)) {
				if r := l.Reserve; r != nil && l.KeyLimits[k] < r.Value {
					d.at(l.lineOf("key_limits"), field+".key_limits."+k, "limit %d is less than the reserve %d", l.KeyLimits[k], r.Value)
				}
			}
		}
	}
	for i, r := range p.Routes {
		for _, lane := range slices.Sorted(maps.Keys(r.Seats)) {
			l := p.Lane(lane)
			switch {
			case l == nil:
				d.at(r.lineOf("seats"), fmt.Sprintf("routes[%d].seats.%s", i, lane), "%s", suggest("lane", lane, names))
			case !l.Takes(r):
				d.at(r.lineOf("seats"), fmt.Sprintf("routes[%d].seats.%s", i, lane), "lane %q does not take route %q", lane, r.Name)
			}
		}
	}
}

// MaxLanes is the most lanes a policy has: a call's lanes are a small set.
const MaxLanes = 16

// fixedLogKeys are the log line's own keys, which no name of the policy
// may take.
var fixedLogKeys = []string{"event", "decision", "mode", "enforced", "tier", "user_id", "scope", "full",
	"suggested", "retry_after", "held_ms", "queue_ms", "wait_ms", "usage", "lease_lost", "error", "degraded",
	"dedup_of", "dedup_error", "resumed", "task", "request_source", "cid", "ts", "seats", "log_dropped"}

// fixedStatusKeys are the status JSON's own keys.
var fixedStatusKeys = []string{"mode", "enforce_for", "redis", "lanes", "idempotency", "binding",
	"decisions", "adaptive", "lanes_health"}

// checkNames checks that the names the log line and the status JSON are
// written with are each used once, and that a field two routes share has
// one type (the log line, the decision service and the lanes read it by
// name).
func (d *decoder) checkNames(p *Policy) {
	used := map[string]string{}
	for _, k := range fixedLogKeys {
		used[k] = "the log line's own"
	}
	take := func(line int, field, key, what string) {
		if key == "" {
			return
		}
		if other, ok := used[key]; ok {
			d.at(line, field, "log key %q is %s", key, other)
			return
		}
		used[key] = what
	}
	take(0, "names.log_route_key", p.Names.LogRouteKey, "the route's")
	types := map[string]Type{}
	for i, r := range p.Routes {
		for _, f := range r.Fields {
			t := f.Kind.Type()
			if have, ok := types[f.Name]; ok {
				if have != t {
					d.at(r.lineOf("fields"), fmt.Sprintf("routes[%d].fields.%s", i, f.Name), "field %q is %s in another route: a field name has one type", f.Name, have.article())
				}
				continue
			}
			types[f.Name] = t
			p.fields = append(p.fields, FieldInfo{Name: f.Name, Type: t})
			take(r.lineOf("fields"), fmt.Sprintf("routes[%d].fields.%s", i, f.Name), f.Name, fmt.Sprintf("field %q", f.Name))
		}
	}
	for _, r := range p.Routes {
		r.fieldOf = make([]int, len(p.fields))
		for i, fi := range p.fields {
			r.fieldOf[i] = r.Field(fi.Name)
		}
	}
	for i, c := range p.Classes {
		take(c.line, fmt.Sprintf("classes[%d].name", i), c.Name, fmt.Sprintf("class %q", c.Name))
	}
	for i, l := range p.Lanes {
		f := fmt.Sprintf("lanes[%d].log", i)
		take(l.lineOf("log"), f+".in_flight", l.Log.InFlight, fmt.Sprintf("lane %q's", l.Name))
		take(l.lineOf("log"), f+".limit", l.Log.Limit, fmt.Sprintf("lane %q's", l.Name))
	}
	for i, k := range p.Names.MetadataLog {
		take(0, fmt.Sprintf("names.client_metadata.log[%d].key", i), k.Key, "a metadata key's")
	}
	status := map[string]string{}
	for _, k := range fixedStatusKeys {
		status[k] = "the status's own"
	}
	for i, l := range p.Lanes {
		if other, ok := status[l.Status]; ok {
			d.at(l.lineOf("status"), fmt.Sprintf("lanes[%d].status", i), "status key %q is %s", l.Status, other)
			continue
		}
		status[l.Status] = fmt.Sprintf("lane %q's", l.Name)
	}
}

// article returns a type name with its article: "a bool", "an int".
func article(t string) string {
	if t == "int" {
		return "an int"
	}
	return "a " + t
}

func (t Type) article() string { return article(t.String()) }
