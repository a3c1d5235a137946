package frontproxy

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/capgate/capgate/policy"
)

// Formats are the front proxies Write knows.
var Formats = []string{"nginx", "haproxy", "alb"}

// Write writes the routing of policy p for the front proxy named format
// (one of Formats). It returns an error for an unknown format, and the
// writer's.
func Write(w io.Writer, format string, p *policy.Policy, o Options) error {
	o = o.withDefaults()
	var text string
	switch format {
	case "nginx":
		text = nginx(p, o)
	case "haproxy":
		text = haproxy(p, o)
	case "alb":
		b, err := json.MarshalIndent(albRule(p), "", "  ")
		if err != nil {
			return fmt.Errorf("alb rule: %w", err)
		}
		text = string(b) + "\n"
	default:
		return fmt.Errorf("unknown front proxy %q: want %s", format, strings.Join(Formats, ", "))
	}
	if _, err := io.WriteString(w, text); err != nil {
		return fmt.Errorf("write the %s routing: %w", format, err)
	}
	return nil
}

// header is the comment every routing starts with.
func header(p *policy.Policy, format, comment string, o Options) string {
	var b strings.Builder
	line := func(s string) { b.WriteString(comment + " " + s + "\n") }
	flags := ""
	if o.PathPrefix != "" {
		flags = " --path-prefix " + o.PathPrefix
	}
	line(fmt.Sprintf("capgate policy routes --format %s%s (policy %s).", format, flags, p.Name))
	line("The heavy routes' calls go to capgate; every other call goes straight to")
	line("the API and never pays for the gateway. Paths are matched as sent, each")
	line("character also percent-encoded and in any case, so every spelling the")
	line("API decodes to a heavy path reaches capgate (a superset: capgate passes")
	line("what is not heavy untouched).")
	return b.String()
}

// nginx returns the routing as an nginx include for the http context
// (conf.d): the two upstreams, the maps that pick one — by method first (a
// hash lookup: a light method never costs a regex; nginx itself refuses a
// method in lower case), then, for a heavy route's method, by the target as
// sent ($request_uri, not decoded) — and the server that proxies.
func nginx(p *policy.Policy, o Options) string {
	var b strings.Builder
	b.WriteString(header(p, "nginx", "#", o))
	fmt.Fprintf(&b, `
upstream capgate_gateway {
    server %s;
    keepalive 32;
}

upstream capgate_api {
    server %s;
    keepalive 32;
}

# The method first: only a heavy route's method is matched by its target.
map $request_method $capgate_upstream {
    default capgate_api;
`, o.Capgate, o.API)
	rules := Rules(p, o.PathPrefix)
	methods := Methods(p)
	for _, m := range methods {
		fmt.Fprintf(&b, "    %s $capgate_%s;\n", m, strings.ToLower(m))
	}
	b.WriteString("}\n")
	for _, m := range methods {
		fmt.Fprintf(&b, "\n# %s: the target as sent (not decoded), in any case.\nmap $request_uri $capgate_%s {\n    default capgate_api;\n",
			m, strings.ToLower(m))
		for _, r := range rules {
			if r.Method == m {
				fmt.Fprintf(&b, "    # %s: %s %s\n", r.Route, r.Method, r.Path)
				fmt.Fprintf(&b, "    %q capgate_gateway;\n", "~*"+r.Regex)
			}
		}
		b.WriteString("}\n")
	}
	fmt.Fprintf(&b, `
server {
    listen %s;

    # Bodies are bounded by the API and by capgate (--max-body-bytes).
    client_max_body_size 0;

    location / {
        proxy_pass http://$capgate_upstream;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_set_header Host $host;
        proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
        proxy_set_header X-Forwarded-Proto $scheme;
        # A heavy call may wait at the gateway (wait.max_seconds) and run
        # for minutes (max_hold_seconds); its answer streams as it comes.
        proxy_read_timeout 900s;
        proxy_buffering off;
    }
}
`, o.Listen)
	return b.String()
}

// haproxy returns the routing as HAProxy sections: named defaults, a
// frontend that picks capgate's backend by method and raw path, and the
// two backends. Single quotes keep HAProxy from reading the regexes ($ and
// # included).
func haproxy(p *policy.Policy, o Options) string {
	var b strings.Builder
	b.WriteString(header(p, "haproxy", "#", o))
	fmt.Fprintf(&b, `
defaults capgate_routes
    mode http
    timeout connect 5s
    # A heavy call may wait at the gateway (wait.max_seconds) and run for
    # minutes (max_hold_seconds).
    timeout client 900s
    timeout server 900s
    option http-keep-alive

frontend capgate_front from capgate_routes
    bind %s
`, o.Listen)
	rules := Rules(p, o.PathPrefix)
	for i, r := range rules {
		fmt.Fprintf(&b, "    # %s: %s %s\n", r.Route, r.Method, r.Path)
		fmt.Fprintf(&b, "    acl capgate_method_%d method -i %s\n", i, r.Method)
		fmt.Fprintf(&b, "    acl capgate_path_%d path -i -m reg '%s'\n", i, r.Regex)
	}
	for i := range rules {
		fmt.Fprintf(&b, "    use_backend capgate_gateway if capgate_method_%d capgate_path_%d\n", i, i)
	}
	fmt.Fprintf(&b, `    default_backend capgate_api

backend capgate_gateway from capgate_routes
    server capgate %s

backend capgate_api from capgate_routes
    server api %s
`, o.Capgate, o.API)
	return b.String()
}

// albCondition and albAction are the parts of an ALB listener rule, as
// `aws elbv2 create-rule --cli-input-json` reads them.
type albCondition struct {
	Field                   string              `json:"Field"`
	HTTPRequestMethodConfig map[string][]string `json:"HttpRequestMethodConfig"`
}

type albAction struct {
	Type           string `json:"Type"`
	TargetGroupArn string `json:"TargetGroupArn"`
}

type albRuleInput struct {
	ListenerArn string         `json:"ListenerArn"`
	Priority    int            `json:"Priority"`
	Conditions  []albCondition `json:"Conditions"`
	Actions     []albAction    `json:"Actions"`
}

// albRule returns the ALB listener rule that sends the heavy routes'
// methods to capgate's target group; the listener's default action sends
// the rest to the API's. It matches by method alone: an ALB's path
// patterns compare the path as sent, with no way to say "this character or
// its percent-encoding", so a path pattern would let a heavy call spelled
// with an escape reach the API uncounted (README, *Only heavy calls
// through the gateway*).
func albRule(p *policy.Policy) albRuleInput {
	return albRuleInput{
		ListenerArn: "arn:aws:elasticloadbalancing:REGION:ACCOUNT:listener/app/API-ALB/ID/ID",
		Priority:    10,
		Conditions: []albCondition{{Field: "http-request-method",
			HTTPRequestMethodConfig: map[string][]string{"Values": Methods(p)}}},
		Actions: []albAction{{Type: "forward", TargetGroupArn: "arn:aws:elasticloadbalancing:REGION:ACCOUNT:targetgroup/capgate/ID"}},
	}
}
