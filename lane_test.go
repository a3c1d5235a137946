package capgate_test

import (
	"reflect"
	"slices"
	"testing"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/configtest"
	"github.com/capgate/capgate/lanetest"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
)

func TestPlan(t *testing.T) {
	cfg := settings.Default(nil, settings.ModeShadow)
	p := cfg.Policy()
	k := capgate.Keys{Prefix: "ocl:capacity", TaskID: "task-a"}
	plan := func(cfg settings.Config, call capgate.Call) []capgate.Lane {
		return k.AppendPlan(nil, cfg, &call, p.TierIndex(call.Tier))
	}
	bulk := lanetest.OCLCall("match", 10, true, false, "42", "early_access")
	want := []capgate.Lane{
		{Name: "api_heavy", Key: "ocl:capacity:api_heavy", Limit: 3, Seats: 1, Spec: p.Lane("api_heavy")},
		{Name: "api_heavy_task", Key: "ocl:capacity:api_heavy_task:task-a", Limit: 4, Seats: 1, Spec: p.Lane("api_heavy_task")},
		{Name: "es2_knn", Key: "ocl:capacity:es2_knn", Limit: 3, Seats: 1, Spec: p.Lane("es2_knn")},
		{Name: "tier", Key: "ocl:capacity:tier:early_access", Limit: 3, Seats: 1, Spec: p.Lane("tier")},
		{Name: "user", Key: "ocl:capacity:user:42", Limit: 2, Seats: 1, Spec: p.Lane("user")},
	}
	if got := plan(cfg, bulk); !reflect.DeepEqual(got, want) {
		t.Fatalf("plan = %+v\nwant %+v", got, want)
	}

	single := lanetest.OCLCall("match", 1, false, false, "42", "early_access") // bulk, of 1 row, not semantic
	got := plan(cfg, single)
	if len(got) != 4 || got[0].Limit != 4 || got[2].Name != capgate.LaneName("tier") {
		t.Fatalf("single-row lexical plan = %+v, want 4 lanes, api_heavy limit 4, no es2_knn", got)
	}
	rerank := lanetest.OCLCall("rerank", 1, false, false, "42", "core")
	if p.Class("single_row").Has(rerank.Route, &rerank.Fields) {
		t.Fatal("a one-row $rerank is single-row")
	}
	if got := plan(cfg, rerank)[0].Limit; got != 3 {
		t.Fatalf("one-row $rerank api_heavy limit = %d, want the bulk limit 3", got)
	}
	configtest.SetNumbers(t, &cfg, "reserve_single_row", 5) // more than the cluster: the bulk limit stops at 0
	if got := plan(cfg, bulk)[0].Limit; got != 0 {
		t.Fatalf("bulk limit = %d, want 0", got)
	}
}

func TestTierOf(t *testing.T) {
	g := policy.OCL().Identity
	cases := []struct {
		staff  bool
		groups []string
		want   string
	}{
		{true, nil, "staff"},
		{false, []string{"core_user"}, "core"},
		{false, []string{"early_access"}, "early_access"},
		{false, []string{"preview"}, "preview"},
		{false, nil, "preview"},
		{false, []string{"preview", "early_access", "core_user"}, "core"},
		{false, []string{"core_user", "early_access"}, "core"},
	}
	for _, c := range cases {
		if got := g.TierOf(c.staff, c.groups); got != c.want {
			t.Errorf("TierOf(%v, %v) = %q, want %q", c.staff, c.groups, got, c.want)
		}
	}
	// A policy whose core tier is the group gold.
	custom := g
	custom.Tiers = slices.Clone(g.Tiers)
	for i, r := range custom.Tiers {
		if r.Tier == "core" {
			custom.Tiers[i].Groups = []string{"gold"}
		}
	}
	if got := custom.TierOf(false, []string{"gold"}); got != "core" {
		t.Errorf("custom core group: %q", got)
	}
}

func TestParseMode(t *testing.T) {
	for _, s := range []string{"off", "shadow", "enforce"} {
		if m, ok := settings.ParseMode(s); !ok || string(m) != s {
			t.Errorf("ParseMode(%q) = %q %v", s, m, ok)
		}
	}
	if _, ok := settings.ParseMode("loud"); ok {
		t.Error("ParseMode accepted loud")
	}
	if got := settings.Default(nil, "loud").Mode; got != settings.ModeShadow {
		t.Errorf("default mode for an invalid boot mode = %q, want shadow", got)
	}
	if got := settings.Default(nil, settings.ModeOff).Mode; got != settings.ModeOff {
		t.Errorf("boot mode off = %q", got)
	}
}

// With lending on (lending.api_heavy 1), the cluster lane lends its
// single-row seat: a single-row $match also counts in the class's seats
// (ClassKey), a bulk call may borrow the reserve's idle seat (Borrow); off,
// as by default, neither is planned and the plan is as before lending.
func TestPlanLending(t *testing.T) {
	cfg := settings.Default(nil, settings.ModeShadow)
	p := cfg.Policy()
	k := capgate.Keys{Prefix: "ocl:capacity", TaskID: "task-a"}
	plan := func(cfg settings.Config, call capgate.Call) []capgate.Lane {
		return k.AppendPlan(nil, cfg, &call, p.TierIndex(call.Tier))
	}
	bulk := lanetest.OCLCall("match", 10, true, false, "42", "core")
	single := lanetest.OCLCall("match", 1, true, false, "42", "core")
	for _, call := range []capgate.Call{bulk, single} {
		for _, l := range plan(cfg, call) {
			if l.ClassKey != "" || l.Borrow != (capgate.Borrow{}) {
				t.Fatalf("lending off: lane %s plans %q, %+v", l.Name, l.ClassKey, l.Borrow)
			}
		}
	}

	on, _, err := cfg.Apply(settings.Patch{"lending": map[string]any{"api_heavy": 1}})
	if err != nil {
		t.Fatal(err)
	}
	const class = "ocl:capacity:api_heavy~single_row"
	b := plan(on, bulk)
	if b[0].Name != "api_heavy" || b[0].Limit != 3 || b[0].ClassKey != "" ||
		b[0].Borrow != (capgate.Borrow{Key: class, Reserve: 1, Lend: 1}) {
		t.Errorf("bulk call's api_heavy: %+v; want limit 3, borrowing 1 of the reserve of 1 from %s", b[0], class)
	}
	for _, l := range b[1:] {
		if l.ClassKey != "" || l.Borrow.Key != "" {
			t.Errorf("lane %s lends, but has no reserve", l.Name)
		}
	}
	s := plan(on, single)
	if s[0].Limit != 4 || s[0].ClassKey != class || s[0].Borrow.Key != "" {
		t.Errorf("single-row call's api_heavy: %+v; want limit 4, counting in %s", s[0], class)
	}

	// A reserve above the limit lends only what it holds of the limit; a
	// paused lane lends nothing.
	configtest.SetNumbers(t, &on, "api_heavy.cluster", 2, "reserve_single_row", 2)
	if on, _, err = on.Apply(settings.Patch{"lending": map[string]any{"api_heavy": 2}}); err != nil {
		t.Fatal(err)
	}
	if got := plan(on, bulk)[0]; got.Limit != 0 || got.Borrow != (capgate.Borrow{Key: class, Reserve: 2, Lend: 2}) {
		t.Errorf("reserve 2 of 2: %+v; want limit 0, borrowing up to 2", got)
	}
	configtest.SetNumbers(t, &on, "api_heavy.cluster", 0)
	if got := plan(on, bulk)[0]; got.Borrow.Key != "" || plan(on, single)[0].ClassKey != "" {
		t.Errorf("a paused lane lends: %+v", got)
	}
}

// A lane keyed by a call field plans a key value's own limit (key_limits)
// where it has one, else the lane's; a change at runtime applies to the
// next plan.
func TestPlanKeyLimits(t *testing.T) {
	p, err := policy.Parse("kl.yaml", []byte(keyLimitsPolicy))
	if err != nil {
		t.Fatal(err)
	}
	cfg := settings.Default(p, settings.ModeShadow)
	k := capgate.Keys{Prefix: "api:cap", TaskID: "t"}
	limit := func(cfg settings.Config, model string) (string, int) {
		call := capgate.Call{Route: p.Route("chat"), Fields: policy.NewFields(p.Route("chat")), UserID: "u", Tier: "free"}
		call.Fields.SetString(0, model)
		got := k.AppendPlan(nil, cfg, &call, 0)
		return got[0].Key, got[0].Limit
	}
	for model, want := range map[string]int{"large": 1, "small": 2, "": 2} {
		if _, got := limit(cfg, model); got != want {
			t.Errorf("model %q: limit %d; want %d", model, got, want)
		}
	}
	next, _, err := cfg.Apply(settings.Patch{"key_limits": map[string]any{"model": map[string]any{"large": nil, "small": 5, "(none)": 0}}})
	if err != nil {
		t.Fatal(err)
	}
	for model, want := range map[string]int{"large": 2, "small": 5, "": 0} {
		if key, got := limit(next, model); got != want {
			t.Errorf("after the change, model %q (key %s): limit %d; want %d", model, key, got, want)
		}
	}
}

// keyLimitsPolicy has a lane keyed by a call field, model, with a limit of
// its own for the value large.
const keyLimitsPolicy = `version: 1
name: kl
routes:
  - name: chat
    method: POST
    path: {exact: /chat}
    fields:
      model: {body_string: model}
identity: {resolver: tokens, scheme: Bearer, default_tier: free}
lanes:
  - name: model
    scope: key
    key: model
    routes: [chat]
    limit: 2
    key_limits: {large: 1}
names:
  header_prefix: Capgate-
  refusal: {detail: "busy", error_code: busy}
  log_event: capgate_call
`
