package policy_test

import (
	"net/textproto"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/capgate/capgate/policy"
)

// The built-in policy names what the OCL profile has always used: the
// lanes in plan order, the seed's config keys, the tiers and their groups,
// the headers and the log event.
func TestOCLPolicy(t *testing.T) {
	p := policy.OCL()
	if p != policy.OCL() {
		t.Error("OCL returns a new policy each call")
	}
	var lanes []string
	var keys []string
	for _, l := range p.Lanes {
		lanes = append(lanes, l.Name)
		keys = append(keys, l.Limit.ConfigKeys(p.Tiers())...)
		if l.Reserve != nil {
			keys = append(keys, l.Reserve.Config)
		}
	}
	wantLanes := []string{"api_heavy", "api_heavy_task", "es2_knn", "tier", "user"}
	if !slices.Equal(lanes, wantLanes) {
		t.Errorf("lanes = %v; want %v", lanes, wantLanes)
	}
	wantKeys := []string{"api_heavy.cluster", "reserve_single_row", "api_heavy.per_task", "es2_knn",
		"tiers.staff", "tiers.core", "tiers.early_access", "tiers.preview",
		"per_user.staff", "per_user.core", "per_user.early_access", "per_user.preview"}
	if !slices.Equal(keys, wantKeys) {
		t.Errorf("config keys = %v; want %v", keys, wantKeys)
	}
	tiers := []string{"staff", "core", "early_access", "preview"}
	if !slices.Equal(p.Tiers(), tiers) {
		t.Errorf("tiers = %v; want %v", p.Tiers(), tiers)
	}

	// The default limits are the pre-policy DefaultConfig's (the config's
	// JSON is checked byte for byte in package settings).
	limits := map[string]int{"api_heavy": 4, "api_heavy_task": 4, "es2_knn": 3}
	for name, want := range limits {
		if got := p.Lane(name).Limit.Value; got != want {
			t.Errorf("lane %s limit = %d; want %d", name, got, want)
		}
	}
	if got := p.Lane("api_heavy").Reserve.Value; got != 1 {
		t.Errorf("reserve = %d; want 1", got)
	}
	perTier := map[string]map[string]int{
		"tier": {"staff": 4, "core": 4, "early_access": 3, "preview": 2},
		"user": {"staff": 4, "core": 3, "early_access": 2, "preview": 1},
	}
	for name, want := range perTier {
		for tier, n := range want {
			if got := p.Lane(name).Limit.PerTier[tier]; got != n {
				t.Errorf("lane %s tier %s limit = %d; want %d", name, tier, got, n)
			}
		}
	}

	// The tier rules are the pre-policy TierGroups': staff, else core for
	// core_user, else early_access, else preview.
	for _, c := range []struct {
		staff  bool
		groups []string
		want   string
	}{
		{false, nil, "preview"}, {true, nil, "staff"}, {false, []string{"core_user"}, "core"}, {false, []string{"early_access"}, "early_access"},
		{false, []string{"early_access", "core_user"}, "core"}, {true, []string{"early_access"}, "staff"}, {false, []string{"x", "y"}, "preview"},
	} {
		want := c.want
		if got := p.Identity.TierOf(c.staff, c.groups); got != want {
			t.Errorf("TierOf(%v, %v) = %q; want %q", c.staff, c.groups, got, want)
		}
	}

	n := p.Names
	canon := textproto.CanonicalMIMEHeaderKey
	for _, c := range []struct{ got, want string }{
		{canon(n.HeaderPrefix + "Decision"), "X-Ocl-Capacity-Decision"},
		{n.Header().Decision, "X-Ocl-Capacity-Decision"},
		{n.Header().SuggestedSpacing, "X-Ocl-Capacity-Suggested-Spacing-Ms"},
		{n.Header().Waited, "X-Ocl-Capacity-Waited-Ms"},
		{canon(n.HeaderPrefix + p.Lane("api_heavy").Headers.Limit), "X-Ocl-Capacity-Limit"},
		{canon(n.HeaderPrefix + p.Lane("api_heavy").Headers.InFlight), "X-Ocl-Capacity-In-Flight"},
		{canon(n.HeaderPrefix + p.Lane("tier").Headers.Limit), "X-Ocl-Capacity-Tier-Limit"},
		{canon(n.HeaderPrefix + p.Lane("tier").Headers.InFlight), "X-Ocl-Capacity-Tier-In-Flight"},
		{canon(n.MetadataHeader), "X-Ocl-Event-Metadata"},
		{canon(n.RequestSourceHeader), "X-Ocl-Request-Source"},
		{n.LogEvent, "ocl_capacity"},
		{n.LogRouteKey, "endpoint"},
		{n.KeyPrefix, "ocl:capacity"},
		{p.Route("match").LogName, "$match"},
		{p.Route("rerank").LogName, "$rerank"},
		{p.Lane("api_heavy").Log.InFlight + " " + p.Lane("api_heavy").Log.Limit, "in_flight limit"},
		{p.Lane("api_heavy_task").Log.InFlight + " " + p.Lane("api_heavy_task").Log.Limit, "task_in_flight task_limit"},
		{p.Lane("es2_knn").Log.InFlight, "es2_knn_in_flight"},
		{p.Lane("user").Log.Limit, "user_limit"},
		{n.AwareField, "capacity_aware"},
		{n.RefusalCode, "capacity_exceeded"},
		{p.Identity.Scheme, "Token"},
	} {
		if c.got != c.want {
			t.Errorf("name %q; want %q", c.got, c.want)
		}
	}
	if !n.RateLimit {
		t.Error("OCL sends the RateLimit fields today")
	}
}

// docs/POLICY.md shows the built-in policy and the inference example as
// they are, comments and blank lines aside.
func TestPolicyDocShowsTheFiles(t *testing.T) {
	doc, err := os.ReadFile("../docs/POLICY.md")
	if err != nil {
		t.Fatal(err)
	}
	block := func(heading string) string {
		s := string(doc)
		i := strings.Index(s, heading)
		if i < 0 {
			t.Fatalf("docs/POLICY.md has no %q", heading)
		}
		s = s[i:]
		a := strings.Index(s, "```yaml\n")
		b := strings.Index(s[a+8:], "```")
		return s[a+8 : a+8+b]
	}
	strip := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, line := range strings.Split(string(b), "\n") {
			if t := strings.TrimSpace(line); t == "" || strings.HasPrefix(t, "#") {
				continue
			}
			out = append(out, strings.TrimRight(line, " "))
		}
		return strings.Join(out, "\n") + "\n"
	}
	for heading, file := range map[string]string{"## The OCL policy": "ocl.yaml", "## An inference API": "../examples/inference/policy.yaml"} {
		if got, want := block(heading), strip(file); got != want {
			t.Errorf("docs/POLICY.md under %q is not %s:\n%s\nwant\n%s", heading, file, got, want)
		}
	}
}
