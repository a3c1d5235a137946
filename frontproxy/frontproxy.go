// Package frontproxy writes the routing of the proxy in front of capgate
// (nginx, HAProxy, an AWS ALB) for a policy: the calls of the policy's
// heavy routes — by method and path — go to capgate, every other call
// straight to the API, so light calls never pay for the gateway
// (`capgate policy routes`).
//
// The routing is a superset, never a subset: capgate passes what is not
// heavy untouched, but a heavy call the front proxy sends straight to the
// API is never counted. So the paths are matched as the request target is
// sent, before any decoding, each character of a route's path also in its
// percent-encoded form (%24 for $, %2F for /) and in any case; the method
// in any case too. A request the API decodes to a heavy path — the path
// capgate classifies — therefore goes to capgate however it is spelled.
package frontproxy

import (
	"fmt"
	"strings"

	"github.com/capgate/capgate/policy"
)

// Defaults of Options.
const (
	DefaultListen  = "127.0.0.1:8081"
	DefaultCapgate = "127.0.0.1:8080"
	DefaultAPI     = "127.0.0.1:8000"
)

// Options are where the front proxy listens and what it routes to.
type Options struct {
	// Listen is the front proxy's address. Default DefaultListen.
	Listen string
	// Capgate is capgate's address (host:port). Default DefaultCapgate.
	Capgate string
	// API is the API's address (host:port). Default DefaultAPI.
	API string
	// PathPrefix is where the API is mounted (capgate's --path-prefix),
	// such as "/api"; the routes' paths follow it. Default: none.
	PathPrefix string
}

func (o Options) withDefaults() Options {
	if o.Listen == "" {
		o.Listen = DefaultListen
	}
	if o.Capgate == "" {
		o.Capgate = DefaultCapgate
	}
	if o.API == "" {
		o.API = DefaultAPI
	}
	return o
}

// Rule is one heavy route as the front proxy matches it.
type Rule struct {
	Route  string // the route's name
	Method string // upper case; matched in any case
	// Path is the route's path rule as the policy writes it (for the
	// comment above the rule), with the mount prefix.
	Path string
	// Regex matches the raw request target (path, then an optional query
	// or fragment) of every spelling of the route's paths: POSIX extended
	// syntax with (?:) groups (PCRE, as nginx and HAProxy read it), to be
	// matched without regard to case.
	Regex string
}

// Rules returns p's routes as the front proxy matches them, in the
// policy's order, under the mount prefix.
func Rules(p *policy.Policy, pathPrefix string) []Rule {
	rules := make([]Rule, 0, len(p.Routes))
	for _, r := range p.Routes {
		rules = append(rules, Rule{Route: r.Name, Method: r.Method, Path: describe(r.Path, pathPrefix),
			Regex: pathRegex(r.Path, pathPrefix)})
	}
	return rules
}

// describe says what a path rule matches, in a comment's words.
func describe(p policy.Path, prefix string) string {
	s := p.Kind.String() + " " + prefix + p.Value
	if p.OptionalSlash {
		s += " (trailing slash optional)"
	}
	return s
}

// target is what may come before the path in a request target: an
// absolute form's scheme and authority (nginx's $request_uri and
// HAProxy's path hold the path only; the group costs nothing there).
const target = `^(?:[a-z][a-z0-9+.-]*://[^/]*)?`

// rest is what may follow the path: a query or a fragment (gunicorn cuts
// the target at the first "#"), then the end.
const rest = `(?:[?#].*)?$`

// pathRegex returns the regex of a path rule under prefix; see Rule.Regex.
func pathRegex(p policy.Path, prefix string) string {
	var b strings.Builder
	b.WriteString(target)
	switch p.Kind {
	case policy.PathExact:
		v := prefix + p.Value
		if p.OptionalSlash {
			literal(&b, strings.TrimSuffix(v, "/"))
			b.WriteString(slash + "?")
		} else {
			literal(&b, v)
		}
		b.WriteString(rest)
	case policy.PathPrefix:
		// No end: anything may follow. With the slash optional the
		// prefix without it matches too (a superset: "/apix" as well).
		v := prefix + p.Value
		if p.OptionalSlash {
			v = strings.TrimSuffix(v, "/")
		}
		literal(&b, v)
	case policy.PathPattern:
		literal(&b, prefix)
		segs := strings.Split(strings.TrimPrefix(strings.TrimSuffix(p.Value, "/"), "/"), "/")
		for _, seg := range segs {
			b.WriteString(slash)
			if strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") {
				// One non-empty segment: raw, it holds no "/" (a "%2F" in
				// it is matched as the separator it decodes to).
				b.WriteString(`[^/?#]+?`)
				continue
			}
			literal(&b, seg)
		}
		if p.OptionalSlash || strings.HasSuffix(p.Value, "/") {
			b.WriteString(slash + "?")
		}
		b.WriteString(rest)
	}
	return b.String()
}

// slash is a "/" or its escape (gunicorn decodes %2F in PATH_INFO).
const slash = `(?:/|%2f)`

// literal writes s as a regex matching each byte of it or its
// percent-encoding (hex digits in any case: the match ignores case).
func literal(b *strings.Builder, s string) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '/' {
			b.WriteString(slash)
			continue
		}
		fmt.Fprintf(b, "(?:%s|%%%02x)", quoteByte(c), c)
	}
}

// quoteByte returns c as a regex matching it alone: a letter or digit as
// itself, anything else as a \xNN escape, which neither nginx's nor
// HAProxy's quoting reads.
func quoteByte(c byte) string {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return string(c)
	}
	return fmt.Sprintf(`\x%02x`, c)
}

// Methods returns the methods of the policy's routes, each once, in order.
func Methods(p *policy.Policy) []string {
	var out []string
	for _, r := range p.Routes {
		if !contains(out, r.Method) {
			out = append(out, r.Method)
		}
	}
	return out
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
