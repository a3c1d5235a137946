package policy_test

import (
	"net/textproto"
	"slices"
	"testing"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/header"
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
	wantLanes := []string{string(capgate.LaneAPIHeavy), string(capgate.LaneTask), string(capgate.LaneES2KNN), string(capgate.LaneTier), string(capgate.LaneUser)}
	if !slices.Equal(lanes, wantLanes) {
		t.Errorf("lanes = %v; want %v", lanes, wantLanes)
	}
	wantKeys := []string{"api_heavy.cluster", "reserve_single_row", "api_heavy.per_task", "es2_knn",
		"tiers.staff", "tiers.core", "tiers.early_access", "tiers.preview",
		"per_user.staff", "per_user.core", "per_user.early_access", "per_user.preview"}
	if !slices.Equal(keys, wantKeys) {
		t.Errorf("config keys = %v; want %v", keys, wantKeys)
	}
	var tiers []string
	for _, tr := range capgate.AllTiers() {
		tiers = append(tiers, string(tr))
	}
	if !slices.Equal(p.Tiers(), tiers) {
		t.Errorf("tiers = %v; want %v", p.Tiers(), tiers)
	}

	// The default limits are DefaultConfig's.
	cfg := capgate.DefaultConfig(capgate.ModeEnforce)
	limits := map[string]int{
		"api_heavy": cfg.APIHeavy.Cluster, "api_heavy_task": cfg.APIHeavy.PerTask, "es2_knn": cfg.ES2KNN,
	}
	for name, want := range limits {
		if got := p.Lane(name).Limit.Value; got != want {
			t.Errorf("lane %s limit = %d; want %d", name, got, want)
		}
	}
	if got := p.Lane("api_heavy").Reserve.Value; got != cfg.ReserveSingleRow {
		t.Errorf("reserve = %d; want %d", got, cfg.ReserveSingleRow)
	}
	perTier := map[string]capgate.TierLimits{"tier": cfg.Tiers, "user": cfg.PerUser}
	for name, tl := range perTier {
		want := map[string]int{"staff": tl.Staff, "core": tl.Core, "early_access": tl.EarlyAccess, "preview": tl.Preview}
		for tier, n := range want {
			if got := p.Lane(name).Limit.PerTier[tier]; got != n {
				t.Errorf("lane %s tier %s limit = %d; want %d", name, tier, got, n)
			}
		}
	}

	// The tier rules are TierGroups' defaults.
	for _, c := range []struct {
		staff  bool
		groups []string
	}{
		{false, nil}, {true, nil}, {false, []string{"core_user"}}, {false, []string{"early_access"}},
		{false, []string{"early_access", "core_user"}}, {true, []string{"early_access"}}, {false, []string{"x", "y"}},
	} {
		want := capgate.TierGroups{}.TierOf(c.staff, c.groups)
		if got := p.Identity.TierOf(c.staff, c.groups); got != string(want) {
			t.Errorf("TierOf(%v, %v) = %q; want %q", c.staff, c.groups, got, want)
		}
	}

	n := p.Names
	canon := textproto.CanonicalMIMEHeaderKey
	for _, c := range []struct{ got, want string }{
		{canon(n.HeaderPrefix + "Decision"), header.Decision},
		{canon(n.HeaderPrefix + p.Lane("api_heavy").Headers.Limit), header.Limit},
		{canon(n.HeaderPrefix + p.Lane("api_heavy").Headers.InFlight), header.InFlight},
		{canon(n.HeaderPrefix + p.Lane("tier").Headers.Limit), header.TierLimit},
		{canon(n.HeaderPrefix + p.Lane("tier").Headers.InFlight), header.TierInFlight},
		{canon(n.MetadataHeader), header.EventMetadata},
		{canon(n.RequestSourceHeader), header.RequestSource},
		{n.LogEvent, "ocl_capacity"},
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
