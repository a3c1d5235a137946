package frontproxy_test

import (
	"fmt"
	"math/rand/v2"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/capgate/capgate/frontproxy"
	"github.com/capgate/capgate/policy"
)

// patterns is a policy of every path kind, for the superset check.
const patterns = `version: 1
name: kinds
routes:
  - name: exact
    method: POST
    path: {exact: /v1/chat/completions}
  - name: slash
    method: PUT
    path: {exact: /jobs/$run/, trailing_slash: optional}
  - name: prefix
    method: POST
    path: {prefix: /bulk/}
  - name: pattern
    method: POST
    path: {pattern: "/orgs/{org}/search/{index}", trailing_slash: optional}
identity: {resolver: tokens, scheme: Bearer, default_tier: free}
lanes:
  - {name: cluster, scope: cluster, routes: [exact, slash, prefix, pattern], limit: 4}
names:
  header_prefix: Capgate-
  refusal: {detail: "Busy: retry in {retry_after} s.", error_code: busy}
  log_event: capgate_call
`

func policies(t *testing.T) map[string]*policy.Policy {
	t.Helper()
	kinds, err := policy.Parse("kinds.yaml", []byte(patterns))
	if err != nil {
		t.Fatal(err)
	}
	inference, err := policy.Load(filepath.Join("..", "examples", "inference", "policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return map[string]*policy.Policy{"ocl": policy.OCL(), "kinds": kinds, "inference": inference}
}

// heavyPaths are decoded paths each route of the policies takes.
var heavyPaths = map[string][]string{
	"ocl":       {"/concepts/$match/", "/concepts/$match", "/concepts/$rerank/", "/concepts/$rerank"},
	"kinds":     {"/v1/chat/completions", "/jobs/$run/", "/jobs/$run", "/bulk/", "/bulk/a/b?c", "/orgs/x/search/y", "/orgs/a b/search/%/"},
	"inference": {"/v1/chat/completions", "/v1/completions", "/v1/embeddings"},
}

// spell writes a decoded path as a client may send it: some bytes
// percent-encoded (hex in either case), the rest as they are; the leading
// "/" as it is (a request target starts with one).
func spell(r *rand.Rand, path string) string {
	var b strings.Builder
	b.WriteByte('/')
	for i := 1; i < len(path); i++ {
		c := path[i]
		if c == '?' || c == '#' || c == '%' || c == ' ' || r.IntN(3) == 0 {
			hex := fmt.Sprintf("%%%02X", c)
			if r.IntN(2) == 0 {
				hex = strings.ToLower(hex)
			}
			b.WriteString(hex)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// The routing is a superset of what capgate classifies: every request
// target that decodes (as net/http and gunicorn decode it) to a path one of
// the policy's routes takes goes to capgate, under a mount prefix or not,
// with a query, a fragment or an absolute form; paths no route takes go to
// the API.
func TestRoutesAreASuperset(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for name, p := range policies(t) {
		for _, prefix := range []string{"", "/api"} {
			var res []*regexp.Regexp
			rules := frontproxy.Rules(p, prefix)
			for _, rule := range rules {
				res = append(res, regexp.MustCompile("(?i)"+rule.Regex))
			}
			ev := policy.NewEvaluator(p, prefix)
			routed := func(method, target string) bool {
				for i, re := range res {
					if strings.EqualFold(rules[i].Method, method) && re.MatchString(target) {
						return true
					}
				}
				return false
			}
			for _, path := range heavyPaths[name] {
				for range 200 {
					target := spell(r, prefix+path)
					switch r.IntN(4) {
					case 0:
						target += "?semantic=true"
					case 1:
						target += "#x"
					case 2:
						target = "http://api.example" + target
					}
					u, err := url.ParseRequestURI(strings.SplitN(target, "#", 2)[0])
					if err != nil {
						t.Fatalf("%s: %q: %v", name, target, err)
					}
					for _, rt := range p.Routes {
						req := policy.Request{Method: rt.Method, Path: u.Path, RawQuery: "semantic=true&reranker=true"}
						if ev.MayMatch(&req) && !routed(rt.Method, target) {
							t.Errorf("%s (prefix %q): %s %q decodes to %q, a heavy path, but the routing sends it to the API",
								name, prefix, rt.Method, target, u.Path)
						}
					}
				}
			}
			for _, light := range []string{prefix + "/concepts/", prefix + "/users/me/", prefix + "/v1/models", prefix + "/"} {
				if routed("POST", light) || routed("GET", light) {
					t.Errorf("%s (prefix %q): the light path %q goes to capgate", name, prefix, light)
				}
			}
		}
	}
}

// Only the routes' methods go to capgate: a GET of a heavy path is light.
func TestRoutesMatchTheMethod(t *testing.T) {
	rules := frontproxy.Rules(policy.OCL(), "")
	if len(rules) != 2 || rules[0].Method != "POST" || rules[1].Method != "POST" {
		t.Fatalf("rules = %+v; want the two POST routes", rules)
	}
	if got := frontproxy.Methods(policy.OCL()); strings.Join(got, ",") != "POST" {
		t.Errorf("Methods = %v; want POST", got)
	}
}
