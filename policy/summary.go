package policy

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// WriteSummary writes what capgate reads in p, for `capgate policy show`:
// each route with its conditions, fields and lanes, each lane with its
// scope, limit and runtime-config keys, the identity and the names.
func (p *Policy) WriteSummary(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "policy %s (%s)\n\nroutes (a request no route matches passes untouched):\n", p.Name, p.File)
	for _, r := range p.Routes {
		slash := ""
		if r.Path.OptionalSlash {
			slash = ", trailing slash optional"
		}
		fmt.Fprintf(&b, "  %s: %s %s (%s%s)\n", r.Name, r.Method, r.Path.Value, r.Path.Kind, slash)
		if len(r.When) > 0 {
			var conds []string
			for _, pr := range r.When {
				conds = append(conds, pr.describe())
			}
			fmt.Fprintf(&b, "    when   %s\n", strings.Join(conds, " and "))
		}
		if len(r.Fields) > 0 {
			var fs []string
			for _, f := range r.Fields {
				fs = append(fs, fmt.Sprintf("%s = %s(%s)", f.Name, f.Kind, f.Source))
			}
			fmt.Fprintf(&b, "    fields %s\n", strings.Join(fs, ", "))
		}
		var lanes []string
		for _, l := range p.LanesOf(r) {
			s := l.Name
			if l.OnlyIf != "" {
				s += " (if " + l.OnlyIf + ")"
			}
			if st, ok := r.Seats[l.Name]; ok {
				s += " " + st.describe()
			}
			lanes = append(lanes, s)
		}
		fmt.Fprintf(&b, "    lanes  %s\n", strings.Join(lanes, ", "))
		if r.CostFromBody() {
			what := "refused with 400 where enforced, else counted at its most"
			if r.UnreadableBody == UnreadableMax {
				what = "counted at its most"
			}
			fmt.Fprintf(&b, "    a body capgate can't read: %s, under %s\n", what, UnreadableValue)
		}
		if r.OnClientGone == ClientGoneCancel {
			b.WriteString("    client gone: the upstream request is cancelled\n")
		}
		if r.Usage.JSON != "" {
			fmt.Fprintf(&b, "    usage  %s of the JSON answer, or of a stream's last event that has it\n", r.Usage.JSON)
		}
	}
	if len(p.Classes) > 0 {
		b.WriteString("\nclasses:\n")
		for _, c := range p.Classes {
			fmt.Fprintf(&b, "  %s: calls of %s", c.Name, strings.Join(c.Routes, ", "))
			if c.Field != "" {
				fmt.Fprintf(&b, " with %s = %v", c.Field, c.Equals)
			}
			b.WriteString("\n")
		}
	}
	tiers := p.Tiers()
	b.WriteString("\nlanes (limits are the defaults; the runtime config holds the numbers in force):\n")
	for _, l := range p.Lanes {
		scope := l.Scope.String()
		if l.Scope == ScopeKey {
			scope = "one per " + l.Key
		}
		fmt.Fprintf(&b, "  %s: %s, taken by %s\n", l.Name, scope, strings.Join(l.Routes, ", "))
		if l.Limit.PerTier == nil {
			fmt.Fprintf(&b, "    limit %d at %s\n", l.Limit.Value, l.Limit.Config)
		} else {
			var ts []string
			for _, t := range tiers {
				ts = append(ts, fmt.Sprintf("%s %d", t, l.Limit.PerTier[t]))
			}
			fmt.Fprintf(&b, "    limit per tier: %s at %s.<tier>\n", strings.Join(ts, ", "), l.Limit.Config)
		}
		if len(l.KeyLimits) > 0 {
			var ks []string
			for _, k := range slices.Sorted(maps.Keys(l.KeyLimits)) {
				ks = append(ks, fmt.Sprintf("%s %d", k, l.KeyLimits[k]))
			}
			fmt.Fprintf(&b, "    limit per %s: %s at %s.%s.<%s>\n", l.Key, strings.Join(ks, ", "), KeyLimitsKey, l.Name, l.Key)
		}
		if r := l.Reserve; r != nil {
			fmt.Fprintf(&b, "    reserve %d for %s at %s (other calls see limit − reserve)\n", r.Value, r.Class, r.Config)
		}
		if h := l.Headers; h != nil {
			fmt.Fprintf(&b, "    headers %s%s, %s%s\n", p.Names.HeaderPrefix, h.Limit, p.Names.HeaderPrefix, h.InFlight)
		}
	}
	id := p.Identity
	fmt.Fprintf(&b, "\nidentity: resolver %s, Authorization: %s <credential>\n  tiers: ", id.Resolver, id.Scheme)
	for _, r := range id.Tiers {
		var who []string
		if r.Staff {
			who = append(who, "staff")
		}
		if len(r.Groups) > 0 {
			who = append(who, "in "+strings.Join(r.Groups, " or "))
		}
		fmt.Fprintf(&b, "%s if %s; ", r.Tier, strings.Join(who, " or "))
	}
	fmt.Fprintf(&b, "else %s\n", id.Default)
	n := p.Names
	fmt.Fprintf(&b, "\nnames:\n  headers %s*", n.HeaderPrefix)
	if n.RateLimit {
		b.WriteString(" and the IETF RateLimit, RateLimit-Policy fields")
	}
	fmt.Fprintf(&b, "\n  refusal %q, error_code %q\n  log event %q\n", n.RefusalDetail, n.RefusalCode, n.LogEvent)
	if n.MetadataHeader != "" {
		fmt.Fprintf(&b, "  client metadata %s, capacity aware when %q is true or 1\n", n.MetadataHeader, n.AwareField)
	}
	if n.RequestSourceHeader != "" {
		fmt.Fprintf(&b, "  request source %s\n", n.RequestSourceHeader)
	}
	n.Answers.describe(&b)
	_, err := io.WriteString(w, b.String())
	return err
}

func (pr Predicate) describe() string {
	if pr.Kind == AnyOf {
		var any []string
		for _, a := range pr.Any {
			any = append(any, a.describe())
		}
		return "(" + strings.Join(any, " or ") + ")"
	}
	return pr.Kind.String() + " " + pr.Name
}

func (s Seats) describe() string {
	if s.Field == "" {
		return fmt.Sprintf("[%d seats]", max(s.Const, 1))
	}
	return fmt.Sprintf("[ceil(%s/%d) seats, at most %d]", s.Field, s.Per, s.Max)
}
