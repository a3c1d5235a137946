package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/capgate/capgate/frontproxy"
	"github.com/capgate/capgate/policy"
)

func runPolicy(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Run(t.Context(), append([]string{"policy"}, args...), strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

func TestPolicyCheck(t *testing.T) {
	example := filepath.Join("..", "..", "examples", "inference", "policy.yaml")
	code, out, errs := runPolicy(t, "check", example)
	if code != 0 || !strings.Contains(out, "ok (policy inference: 3 routes, 3 lanes)") || errs != "" {
		t.Fatalf("check example: %d %q %q", code, out, errs)
	}

	// A file with three mistakes: exit 1, one line per error, each naming
	// the file, the line and the field.
	src, err := os.ReadFile(example)
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.NewReplacer("    method: POST\n    path: {exact: /v1/completions}", "    methd: POST\n    path: {exact: /v1/completions}",
		"limit: {free: 1, pro: 3}", "limit: {free: 1, por: 3}", "key: model", "key: modl").Replace(string(src))
	file := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(file, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs = runPolicy(t, "check", file)
	if code != 1 || out != "" {
		t.Fatalf("check bad: exit %d, stdout %q; want 1 and nothing", code, out)
	}
	lines := strings.Split(strings.TrimSuffix(errs, "\n"), "\n")
	line := regexp.MustCompile(`^` + regexp.QuoteMeta(file) + `:\d+: [a-z_\[\]0-9.]+: .+$`)
	for _, l := range lines {
		if !line.MatchString(l) {
			t.Errorf("error line %q does not read file:line: field: message", l)
		}
	}
	for _, want := range []string{`routes[1].methd: unknown field "methd" (did you mean "method"?)`,
		`routes[1].method: missing`} {
		if !strings.Contains(errs, want) {
			t.Errorf("no %q in\n%s", want, errs)
		}
	}
	// Structural errors come first; once fixed, the references are checked.
	bad = strings.Replace(bad, "methd:", "method:", 1)
	if err := os.WriteFile(file, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, errs = runPolicy(t, "check", file)
	for _, want := range []string{`lanes[1].key: route "chat" has no field "modl"`, `lanes[2].limit.por: unknown tier "por" (did you mean "pro"?)`,
		`lanes[2].limit: no limit for tier "pro"`} {
		if !strings.Contains(errs, want) {
			t.Errorf("no %q in\n%s", want, errs)
		}
	}

	if code, _, errs := runPolicy(t, "check"); code != 2 || !strings.Contains(errs, "needs a FILE") {
		t.Errorf("check with no file: %d %q", code, errs)
	}
	if code, _, errs := runPolicy(t, "check", filepath.Join(t.TempDir(), "none.yaml")); code != 1 || !strings.Contains(errs, "no such file") {
		t.Errorf("check a missing file: %d %q", code, errs)
	}
}

func TestPolicyShow(t *testing.T) {
	code, out, errs := runPolicy(t, "show")
	if code != 0 || errs != "" {
		t.Fatalf("show: %d %q", code, errs)
	}
	for _, want := range []string{"policy ocl (policy/ocl.yaml)", "match: POST /concepts/$match (exact, trailing slash optional)",
		"es2_knn (if semantic)", "reserve 1 for single_row at reserve_single_row", "limit per tier: staff 4, core 3, early_access 2, preview 1 at per_user.<tier>",
		"headers X-OCL-Capacity-Tier-Limit, X-OCL-Capacity-Tier-In-Flight", `log event "ocl_capacity"`} {
		if !strings.Contains(out, want) {
			t.Errorf("show has no %q:\n%s", want, out)
		}
	}
	if _, out2, _ := runPolicy(t, "show", "ocl"); out2 != out {
		t.Error("show ocl differs from show")
	}
	if code, out, _ := runPolicy(t, "show", "--yaml", "ocl"); code != 0 || out != string(policy.OCL().Source()) {
		t.Errorf("show --yaml ocl: %d, not the embedded file", code)
	}
	example := filepath.Join("..", "..", "examples", "inference", "policy.yaml")
	if code, out, _ := runPolicy(t, "show", example); code != 0 || !strings.Contains(out, "model: one per model, taken by chat, completions, embeddings") ||
		!strings.Contains(out, "limit per tier: pro 3, free 1 at lanes.user.<tier>") {
		t.Errorf("show example: %d\n%s", code, out)
	}
	if code, _, _ := runPolicy(t, "show", "a", "b"); code != 2 {
		t.Errorf("show a b: exit %d; want 2", code)
	}
	if code, _, _ := runPolicy(t, "frob"); code != 2 {
		t.Errorf("policy frob: exit %d; want 2", code)
	}
}

// capgate policy routes prints frontproxy's routing for the policy and
// the addresses given; deploy/frontproxy holds the built-in policy's.
func TestPolicyRoutes(t *testing.T) {
	code, out, errs := runPolicy(t, "routes", "--format", "nginx", "--capgate", "10.0.0.5:8080", "--api", "10.0.0.6:8000", "--path-prefix", "/api")
	var want strings.Builder
	if err := frontproxy.Write(&want, "nginx", policy.OCL(), frontproxy.Options{Capgate: "10.0.0.5:8080", API: "10.0.0.6:8000", PathPrefix: "/api"}); err != nil {
		t.Fatal(err)
	}
	if code != 0 || errs != "" || out != want.String() || !strings.Contains(out, "server 10.0.0.5:8080;") {
		t.Errorf("routes --format nginx: %d %q\n%s", code, errs, out)
	}
	example := filepath.Join("..", "..", "examples", "inference", "policy.yaml")
	if code, out, _ := runPolicy(t, "routes", "--format", "haproxy", example); code != 0 || !strings.Contains(out, "# chat: POST exact /v1/chat/completions") {
		t.Errorf("routes --format haproxy of the example: %d\n%s", code, out)
	}
	if code, _, _ := runPolicy(t, "routes"); code != 2 {
		t.Errorf("routes without --format: exit %d; want 2", code)
	}
	if code, _, errs := runPolicy(t, "routes", "--format", "caddy"); code != 1 || !strings.Contains(errs, `unknown front proxy "caddy"`) {
		t.Errorf("routes --format caddy: exit %d %q; want 1", code, errs)
	}
}
