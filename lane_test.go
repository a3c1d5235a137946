package capgate_test

import (
	"reflect"
	"testing"

	"github.com/capgate/capgate"
)

func TestPlan(t *testing.T) {
	cfg := capgate.DefaultConfig(capgate.ModeShadow)
	k := capgate.Keys{TaskID: "task-a"}
	bulk := capgate.Call{Endpoint: capgate.EndpointMatch, Rows: 10, Semantic: true, UserID: "42", Tier: capgate.TierEarlyAccess}
	want := []capgate.Lane{
		{Name: "api_heavy", Key: "ocl:capacity:api_heavy", Limit: 3},
		{Name: "api_heavy_task", Key: "ocl:capacity:api_heavy_task:task-a", Limit: 4},
		{Name: "es2_knn", Key: "ocl:capacity:es2_knn", Limit: 3},
		{Name: "tier", Key: "ocl:capacity:tier:early_access", Limit: 3},
		{Name: "user", Key: "ocl:capacity:user:42", Limit: 2},
	}
	if got := k.AppendPlan(nil, cfg, bulk); !reflect.DeepEqual(got, want) {
		t.Fatalf("plan = %+v\nwant %+v", got, want)
	}

	single := bulk
	single.Rows, single.Semantic = 1, false
	got := k.AppendPlan(nil, cfg, single)
	if len(got) != 4 || got[0].Limit != 4 || got[2].Name != capgate.LaneTier {
		t.Fatalf("single-row lexical plan = %+v, want 4 lanes, api_heavy limit 4, no es2_knn", got)
	}
	rerank := capgate.Call{Endpoint: capgate.EndpointRerank, Rows: 1, UserID: "42", Tier: capgate.TierCore}
	if rerank.SingleRow() {
		t.Fatal("a one-row $rerank is single-row")
	}
	if got := k.AppendPlan(nil, cfg, rerank)[0].Limit; got != 3 {
		t.Fatalf("one-row $rerank api_heavy limit = %d, want the bulk limit 3", got)
	}
	cfg.ReserveSingleRow = 5 // more than the cluster: the bulk limit stops at 0
	if got := k.AppendPlan(nil, cfg, bulk)[0].Limit; got != 0 {
		t.Fatalf("bulk limit = %d, want 0", got)
	}
}

func TestTierOf(t *testing.T) {
	var g capgate.TierGroups
	cases := []struct {
		staff  bool
		groups []string
		want   capgate.Tier
	}{
		{true, nil, capgate.TierStaff},
		{false, []string{"core_user"}, capgate.TierCore},
		{false, []string{"early_access"}, capgate.TierEarlyAccess},
		{false, []string{"preview"}, capgate.TierPreview},
		{false, nil, capgate.TierPreview},
		{false, []string{"preview", "early_access", "core_user"}, capgate.TierCore},
		{false, []string{"core_user", "early_access"}, capgate.TierCore},
	}
	for _, c := range cases {
		if got := g.TierOf(c.staff, c.groups); got != c.want {
			t.Errorf("TierOf(%v, %v) = %q, want %q", c.staff, c.groups, got, c.want)
		}
	}
	custom := capgate.TierGroups{Core: "gold"}
	if got := custom.TierOf(false, []string{"gold"}); got != capgate.TierCore {
		t.Errorf("custom core group: %q", got)
	}
}

func TestParseMode(t *testing.T) {
	for _, s := range []string{"off", "shadow", "enforce"} {
		if m, ok := capgate.ParseMode(s); !ok || string(m) != s {
			t.Errorf("ParseMode(%q) = %q %v", s, m, ok)
		}
	}
	if _, ok := capgate.ParseMode("loud"); ok {
		t.Error("ParseMode accepted loud")
	}
	if got := capgate.DefaultConfig("loud").Mode; got != capgate.ModeShadow {
		t.Errorf("default mode for an invalid boot mode = %q, want shadow", got)
	}
	if got := capgate.DefaultConfig(capgate.ModeOff).Mode; got != capgate.ModeOff {
		t.Errorf("boot mode off = %q", got)
	}
}
