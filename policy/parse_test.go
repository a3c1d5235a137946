package policy_test

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/capgate/capgate/policy"
)

// base is a small valid policy the error tests change one thing of.
const base = `version: 1
name: t
routes:
  - name: a
    method: POST
    path: {exact: /a}
    fields:
      model: {body_string: model}
      n: {body_array_len: input}
      flag: {query_truthy: flag}
identity:
  resolver: tokens
  scheme: Bearer
  tiers:
    - {tier: pro, groups: [pro]}
  default_tier: free
lanes:
  - name: cluster
    scope: cluster
    routes: [a]
    limit: 8
names:
  header_prefix: Capgate-
  refusal: {detail: "busy, retry in {retry_after} s", error_code: busy}
  log_event: capgate_call
`

func TestParseBase(t *testing.T) {
	p, err := policy.Parse("base.yaml", []byte(base))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Lane("cluster").Limit.Config; got != "lanes.cluster" {
		t.Errorf("default config key = %q; want lanes.cluster", got)
	}
	if got := p.Tiers(); strings.Join(got, ",") != "pro,free" {
		t.Errorf("tiers = %v", got)
	}
	if string(p.Source()) != base {
		t.Error("Source is not the file")
	}
}

// Every refusal names the file, the line and the field, and says why.
func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name      string
		old, new  string // replace old by new in base
		line      int
		field     string
		msg       string
		appendLan string
	}{
		{"yaml syntax", "name: t\n", "name: [t\n", -1, "", "did not find", ""},
		{"unknown top field", "name: t\n", "name: t\nroute:\n  - x\n", 3, "route", `did you mean "routes"`, ""},
		{"unknown route field", "    method: POST\n", "    methd: POST\n", 5, "routes[0].methd", `did you mean "method"`, ""},
		{"missing method", "    method: POST\n", "", 4, "routes[0].method", "missing", ""},
		{"lower-case method", "method: POST", "method: post", 5, "routes[0].method", "can never match", ""},
		{"path without slash", "{exact: /a}", "{exact: a}", 6, "routes[0].path.exact", "can never match", ""},
		{"escaped path", "{exact: /a}", "{exact: /a/%24match}", 6, "routes[0].path.exact", "write them decoded", ""},
		{"two path kinds", "{exact: /a}", "{exact: /a, prefix: /a}", 6, "routes[0].path", "exactly one of", ""},
		{"bad trailing slash", "{exact: /a}", "{exact: /a, trailing_slash: maybe}", 6, "routes[0].path.trailing_slash", `unknown value "maybe"`, ""},
		{"unknown predicate", "    fields:\n", "    when:\n      - query_truthi: x\n    fields:\n", 8, "routes[0].when[0].query_truthi", `did you mean "query_truthy"`, ""},
		{"empty any", "    fields:\n", "    when:\n      - any: []\n    fields:\n", 8, "routes[0].when[0].any", "never holds", ""},
		{"contradiction", "    fields:\n", "    when:\n      - body_non_empty_array: x\n      - body_non_empty_string: x\n    fields:\n", 7, "routes[0].when[1]", "can never match", ""},
		{"unknown field kind", "{body_string: model}", "{body_str: model}", 8, "routes[0].fields.model.body_str", `did you mean "body_string"`, ""},
		{"shadowed route", "identity:\n", "  - name: b\n    method: POST\n    path: {exact: /a}\nidentity:\n", 13, "routes[1].path", "can never match", ""},
		{"route no lane takes", "identity:\n", "  - name: b\n    method: GET\n    path: {exact: /b}\nidentity:\n", 11, "routes[1]", "takes no lane", ""},
		{"unknown route in lane", "routes: [a]", "routes: [a, b]", 20, "lanes[0].routes[1]", `unknown route "b"`, ""},
		{"lane no route takes", "routes: [a]", "routes: []", 20, "lanes[0].routes", "no route takes the lane", ""},
		{"unknown tier", "limit: 8", "limit: {free: 1, por: 3}", 21, "lanes[0].limit.por", `did you mean "pro"`, ""},
		{"missing tier", "limit: 8", "limit: {free: 1}", 21, "lanes[0].limit", `no limit for tier "pro"`, ""},
		{"negative limit", "limit: 8", "limit: -1", 21, "lanes[0].limit", "from 0 to", ""},
		{"unknown key field", "    scope: cluster\n", "    scope: key\n    key: modle\n", 20, "lanes[0].key", `no field "modle"`, ""},
		{"key field not a string", "    scope: cluster\n", "    scope: key\n    key: n\n", 20, "lanes[0].key", "is an int, want a string", ""},
		{"only_if not a bool", "    routes: [a]\n", "    routes: [a]\n    only_if: model\n", 21, "lanes[0].only_if", "want a bool", ""},
		{"unknown scope", "scope: cluster", "scope: clustr", 19, "lanes[0].scope", `did you mean "cluster"`, ""},
		{"unknown reserve class", "    limit: 8\n", "    limit: 8\n    reserve: {class: single, value: 1}\n", 22, "lanes[0].reserve.class", `unknown class "single"`, ""},
		{"reserve over limit", "    limit: 8\n", "    limit: 8\n    reserve: {class: c, value: 9}\n", 22, "lanes[0].reserve.value", "more than the limit",
			"classes:\n  - {name: c, routes: [a]}\n"},
		{"unknown resolver", "resolver: tokens", "resolver: tokns", 12, "identity.resolver", `did you mean "tokens"`, ""},
		{"jwt without its settings", "resolver: tokens", "resolver: jwt", 12, "identity.jwt", "needs the issuer and audience", ""},
		{"jwt settings for another resolver", "  default_tier: free\n", "  default_tier: free\n  jwt: {issuer: i, audience: a}\n", 17, "identity.jwt", `only the jwt resolver reads it`, ""},
		{"lend more than the reserve", "    limit: 8\n", "    limit: 8\n    reserve: {class: c, value: 1, lend: 2}\nclasses:\n  - {name: c, routes: [a]}\n", 22, "lanes[0].reserve.lend", "lend 2 is more than the reserve 1", ""},
		{"reserve inside the limit's key", "    limit: 8\n", "    limit: 8\n    config: lanes.c\n  - {name: other, scope: task, routes: [a], limit: 1, config: lanes.c.x}\n", 23, "lanes[1].config", "one is inside the other", ""},
		{"log key of the line's own", "    limit: 8\n", "    limit: 8\n    log: {in_flight: tier, limit: c_limit}\n", 22, "lanes[0].log.in_flight", `log key "tier" is the log line's own`, ""},
		{"status key of the status's own", "    limit: 8\n", "    limit: 8\n    status: mode\n", 22, "lanes[0].status", `status key "mode" is the status's own`, ""},
		{"bad scheme", "scheme: Bearer", "scheme: bearer", 13, "identity.scheme", `did you mean "Bearer"`, ""},
		{"tier rule holding never", "{tier: pro, groups: [pro]}", "{tier: pro}", 15, "identity.tiers[0]", "never holds", ""},
		{"seats unknown lane", "      flag: {query_truthy: flag}\n", "      flag: {query_truthy: flag}\n    seats: {modl: 2}\n", 11, "routes[0].seats.modl", `unknown lane "modl"`, ""},
		{"seats not an int field", "      flag: {query_truthy: flag}\n", "      flag: {query_truthy: flag}\n    seats: {cluster: {field: model, per: 2, max: 3}}\n", 11, "routes[0].seats.cluster.field", "seats count an int field", ""},
		{"seats zero", "      flag: {query_truthy: flag}\n", "      flag: {query_truthy: flag}\n    seats: {cluster: 0}\n", 11, "routes[0].seats.cluster", "at least 1 seat", ""},
		{"placeholder", "{retry_after} s", "{seconds} s", 24, "names.refusal.detail", "unknown placeholder {seconds} (valid: {error_code}, {status}, {retry_after}", ""},
		{"config key of the runtime config", "    limit: 8\n", "    limit: 8\n    config: wait.max_seconds\n", 22, "lanes[0].config", `the runtime config's own "wait"`, ""},
		{"config key twice", "    limit: 8\n", "    limit: 8\n  - {name: other, scope: task, routes: [a], limit: 1, config: lanes.cluster}\n", 22, "lanes[1].config", `already lane "cluster"'s`, ""},
		{"unknown class route", "identity:\n", "classes:\n  - {name: c, routes: [b]}\nidentity:\n", 12, "classes[0].routes[0]", `unknown route "b"`, ""},
		{"class field type", "identity:\n", "classes:\n  - {name: c, routes: [a], field: n, equals: x}\nidentity:\n", 12, "classes[0].equals", "is an int, equals is a string", ""},
		{"version", "version: 1", "version: 2", 1, "version", "reads version 1", ""},
		{"duplicate key", "name: t\n", "name: t\nname: u\n", 3, "name", "given twice", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := strings.Replace(base, tc.old, tc.new, 1)
			if src == base {
				t.Fatalf("%q is not in base", tc.old)
			}
			src += tc.appendLan
			_, err := policy.Parse("p.yaml", []byte(src))
			var es policy.Errors
			if !errors.As(err, &es) {
				t.Fatalf("Parse: %v; want Errors", err)
			}
			for _, e := range es {
				if e.File == "p.yaml" && (e.Line == tc.line || tc.line < 0 && e.Line > 0) && e.Field == tc.field && strings.Contains(e.Msg, tc.msg) {
					return
				}
			}
			t.Errorf("no error at p.yaml:%d %s containing %q; got:\n%v", tc.line, tc.field, tc.msg, err)
		})
	}
}

// Errors prints one error a line, each "file:line: field: message", all
// of them, in file order.
func TestParseReportsEveryError(t *testing.T) {
	src := strings.NewReplacer("method: POST", "methd: POST", "scheme: Bearer", "scheme: Basic", "log_event: capgate_call", "log_evnt: capgate_call").Replace(base)
	_, err := policy.Parse("p.yaml", []byte(src))
	if err == nil {
		t.Fatal("Parse accepted three mistakes")
	}
	lines := strings.Split(err.Error(), "\n")
	want := []string{`p.yaml:5: routes[0].methd: unknown field "methd" (did you mean "method"?)`,
		`p.yaml:13: identity.scheme: unknown scheme "Basic"`, `p.yaml:25: names.log_evnt: unknown field "log_evnt" (did you mean "log_event"?)`}
	re := regexp.MustCompile(`^p\.yaml:\d+: \S+: .+`)
	for _, l := range lines {
		if !re.MatchString(l) {
			t.Errorf("line %q does not name file:line: field", l)
		}
	}
	for _, w := range want {
		found := false
		for _, l := range lines {
			found = found || strings.HasPrefix(l, w)
		}
		if !found {
			t.Errorf("no line %q in\n%s", w, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(base))
	f.Add(policy.OCL().Source())
	for _, s := range []string{"", "{}", "version: 1", "- a", "routes: [{name: a, path: {pattern: /a/{x}/b}}]", "&a [*a]",
		strings.Replace(base, "limit: 8", "limit: {free: 1, pro: x}", 1),
		strings.Replace(base, "{exact: /a}", "{pattern: /v1/{model}/{}/x}", 1)} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := policy.Parse("f.yaml", data)
		if err != nil {
			var es policy.Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("Parse error %v is not Errors", err)
			}
			for _, e := range es {
				if e.File != "f.yaml" || e.Msg == "" {
					t.Fatalf("error %+v names no file or says nothing", e)
				}
			}
			return
		}
		// A policy that parses is whole: every lane's routes exist, and
		// evaluating a request of each route's method does not fail.
		for _, l := range p.Lanes {
			for _, rn := range l.Routes {
				if p.Route(rn) == nil {
					t.Fatalf("lane %s takes unknown route %s", l.Name, rn)
				}
			}
		}
		ev := policy.NewEvaluator(p, "")
		var fs policy.Fields
		for _, r := range p.Routes {
			req := policy.Request{Method: r.Method, Path: r.Path.Value, Body: []byte(`{"rows":[1],"model":"m"}`)}
			if rt := ev.Evaluate(&req, &fs); rt != nil {
				for i := range rt.Fields {
					_ = fs.String(i)
				}
				for _, l := range p.LanesOf(rt) {
					if n := rt.SeatsIn(l.Name, &fs); n < 1 {
						t.Fatalf("route %s takes %d seats in %s", rt.Name, n, l.Name)
					}
				}
			}
		}
		if _, err := policy.Parse("f.yaml", p.Source()); err != nil {
			t.Fatalf("source does not parse again: %v", err)
		}
		_ = fmt.Sprint(p.Name)
	})
}

// A lane keyed by a call field takes limits per key value (key_limits);
// no other lane does, each is a limit, and there are at most MaxKeyLimits.
func TestParseKeyLimits(t *testing.T) {
	keyed := strings.Replace(base, "    scope: cluster\n", "    scope: key\n    key: model\n", 1)
	p, err := policy.Parse("p.yaml", []byte(strings.Replace(keyed, "    limit: 8\n", "    limit: 8\n    key_limits: {large: 1, llama-3.1: 16}\n", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Lane("cluster").KeyLimits; len(got) != 2 || got["large"] != 1 || got["llama-3.1"] != 16 {
		t.Errorf("KeyLimits = %v; want large 1, llama-3.1 16", got)
	}
	many := make([]string, policy.MaxKeyLimits+1)
	for i := range many {
		many[i] = fmt.Sprintf("m%d: 1", i)
	}
	for _, tc := range []struct {
		name, src, field, msg string
	}{
		{"on a cluster lane", strings.Replace(base, "    limit: 8\n", "    limit: 8\n    key_limits: {large: 1}\n", 1),
			"lanes[0].key_limits", "only a lane keyed by a call field"},
		{"on a user lane", strings.Replace(strings.Replace(base, "    scope: cluster\n", "    scope: key\n    key: user\n", 1),
			"    limit: 8\n", "    limit: 8\n    key_limits: {ann: 1}\n", 1), "lanes[0].key_limits", "only a lane keyed by a call field"},
		{"not a number", strings.Replace(keyed, "    limit: 8\n", "    limit: 8\n    key_limits: {large: x}\n", 1),
			"lanes[0].key_limits.large", "want a whole number"},
		{"too many", strings.Replace(keyed, "    limit: 8\n", "    limit: 8\n    key_limits: {"+strings.Join(many, ", ")+"}\n", 1),
			"lanes[0].key_limits", "at most 64 key values, got 65"},
		{"under the reserve", strings.Replace(keyed, "    limit: 8\n", "    limit: 8\n    reserve: {class: c, value: 2}\n    key_limits: {large: 1}\n", 1) +
			"classes:\n  - {name: c, routes: [a]}\n", "lanes[0].key_limits.large", "limit 1 is less than the reserve 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := policy.Parse("p.yaml", []byte(tc.src))
			var es policy.Errors
			if !errors.As(err, &es) {
				t.Fatalf("Parse: %v; want Errors", err)
			}
			for _, e := range es {
				if e.Field == tc.field && strings.Contains(e.Msg, tc.msg) {
					return
				}
			}
			t.Errorf("no error %s containing %q; got:\n%v", tc.field, tc.msg, err)
		})
	}
}

// A route says what a body it can't read costs and what its API does when
// the client goes; a body_int field may have a default, no other field.
func TestParseRouteBehaviour(t *testing.T) {
	src := strings.Replace(base, "      flag: {query_truthy: flag}\n",
		"      flag: {query_truthy: flag}\n      max_tokens: {body_int: max_tokens, default: 256}\n      texts: {body_texts: input}\n    unreadable_body: max\n    on_client_gone: cancel\n", 1)
	p, err := policy.Parse("p.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	r := p.Route("a")
	if r.UnreadableBody != policy.UnreadableMax || r.OnClientGone != policy.ClientGoneCancel {
		t.Errorf("route a: unreadable %v, client gone %v; want max, cancel", r.UnreadableBody, r.OnClientGone)
	}
	if f := r.Fields[r.Field("max_tokens")]; f.Kind != policy.FieldBodyInt || f.Default != 256 || f.Kind.Type() != policy.TypeInt {
		t.Errorf("max_tokens field %+v; want body_int, default 256", f)
	}
	if f := r.Fields[r.Field("texts")]; f.Kind != policy.FieldBodyTexts || f.Kind.Type() != policy.TypeInt {
		t.Errorf("texts field %+v; want body_texts, an int", f)
	}
	if d := mustParse(t, base).Route("a"); d.UnreadableBody != policy.UnreadableRefuse || d.OnClientGone != policy.ClientGoneHold {
		t.Errorf("defaults: %v, %v; want refuse, hold", d.UnreadableBody, d.OnClientGone)
	}
	for _, tc := range []struct{ old, new, field, msg string }{
		{"      flag: {query_truthy: flag}\n", "      flag: {query_truthy: flag}\n    on_client_gone: cancl\n", "routes[0].on_client_gone", `did you mean "cancel"`},
		{"      flag: {query_truthy: flag}\n", "      flag: {query_truthy: flag}\n    unreadable_body: min\n", "routes[0].unreadable_body", `unknown value "min"`},
		{"{body_string: model}", "{body_string: model, default: 3}", "routes[0].fields.model.default", "only a body_int field has a default"},
		{"{body_array_len: input}", "{body_int: input, default: x}", "routes[0].fields.n.default", "want a whole number"},
	} {
		_, err := policy.Parse("p.yaml", []byte(strings.Replace(base, tc.old, tc.new, 1)))
		var es policy.Errors
		if !errors.As(err, &es) || !slices.ContainsFunc(es, func(e *policy.Error) bool { return e.Field == tc.field && strings.Contains(e.Msg, tc.msg) }) {
			t.Errorf("%s: %v; want %s: %s", tc.new, err, tc.field, tc.msg)
		}
	}
}

// A route may say where its answer reports what the call used: a dotted
// path of object keys into the JSON answer, bounded in depth and length.
func TestParseUsage(t *testing.T) {
	withUsage := func(u string) string {
		return strings.Replace(base, "      flag: {query_truthy: flag}\n", "      flag: {query_truthy: flag}\n    usage: "+u+"\n", 1)
	}
	p := mustParse(t, withUsage("{json: usage.total_tokens}"))
	if u := p.Route("a").Usage; u.JSON != "usage.total_tokens" || !slices.Equal(u.Path(), []string{"usage", "total_tokens"}) {
		t.Errorf("usage %+v, path %q; want usage.total_tokens", u, u.Path())
	}
	if u := mustParse(t, base).Route("a").Usage; u.JSON != "" || u.Path() != nil {
		t.Errorf("no usage: %+v", u)
	}
	deep := strings.Repeat("a.", policy.MaxUsageDepth) + "a"
	long := strings.Repeat("a", policy.MaxUsagePathLen+1)
	for _, tc := range []struct{ usage, field, msg string }{
		{"{json: \"\"}", "routes[0].usage.json", "empty"},
		{"{json: usage..total}", "routes[0].usage.json", "empty key"},
		{"{json: .usage}", "routes[0].usage.json", "empty key"},
		{"{json: \"usage[0]\"}", "routes[0].usage.json", "letters, digits"},
		{"{json: " + deep + "}", "routes[0].usage.json", fmt.Sprintf("at most %d keys", policy.MaxUsageDepth)},
		{"{json: " + long + "}", "routes[0].usage.json", fmt.Sprintf("at most %d characters", policy.MaxUsagePathLen)},
		{"{jsn: usage.total_tokens}", "routes[0].usage.jsn", "json"},
		{"{}", "routes[0].usage.json", "missing"},
		{"usage.total_tokens", "routes[0].usage", "want a mapping"},
	} {
		_, err := policy.Parse("p.yaml", []byte(withUsage(tc.usage)))
		var es policy.Errors
		if !errors.As(err, &es) || !slices.ContainsFunc(es, func(e *policy.Error) bool {
			return e.Field == tc.field && strings.Contains(e.Msg, tc.msg) && e.Line == 11
		}) {
			t.Errorf("%s: %v; want p.yaml:11: %s: %s", tc.usage, err, tc.field, tc.msg)
		}
	}
}
