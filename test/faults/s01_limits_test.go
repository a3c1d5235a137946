//go:build faults

package faults

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"
)

// limits1 is scenario 1's config: small limits, every lane able to bind.
var limits1 = map[string]int{
	"cluster": 4, "bulk": 3, "per_task": 2, "es2_knn": 2,
	"tier.staff": 3, "tier.core": 2, "tier.early_access": 2, "tier.preview": 2,
	"user.staff": 2, "user.core": 1, "user.early_access": 1, "user.preview": 1,
}

func limitsConfig(mode string) []string {
	return []string{"mode=" + mode, "enforce_for=all", "api_heavy.cluster=4", "api_heavy.per_task=2",
		"reserve_single_row=1", "es2_knn=2",
		"tiers.staff=3", "tiers.core=2", "tiers.early_access=2", "tiers.preview=2",
		"per_user.staff=2", "per_user.core=1", "per_user.early_access=1", "per_user.preview=1",
		"wait.max_seconds=0"} // refusals at once: scenario 12 tests waiting
}

// violations compares the upstream's peaks with limits1 and returns one
// message per lane that was exceeded.
func violations(p laneCounts, tiers map[string]string) []string {
	var v []string
	check := func(name string, got, limit int) {
		if got > limit {
			v = append(v, name+": "+itoa(got)+" at once > limit "+itoa(limit))
		}
	}
	check("api_heavy", p.Total, limits1["cluster"])
	check("api_heavy bulk", p.Bulk, limits1["bulk"])
	check("es2_knn", p.Semantic, limits1["es2_knn"])
	for task, n := range p.Task {
		check("api_heavy_task:"+task, n, limits1["per_task"])
	}
	for tier, n := range p.Tier {
		check("tier:"+tier, n, limits1["tier."+tier])
	}
	for user, n := range p.User {
		check("user:"+user, n, limits1["user."+tiers[user]])
	}
	return v
}

func TestS01LimitsHold(t *testing.T) {
	figures := begin(t, 1)
	r := newRig(t, rigOptions{Gateways: 3, DB: "s01", Config: limitsConfig("enforce"),
		// A generous Redis deadline: this scenario is about limits, and a
		// loaded machine must not turn calls unavailable (uncounted).
		Env: []string{"CAPACITY_REDIS_DEADLINE_SECONDS=5", "CAPACITY_REDIS_TIMEOUT_SECONDS=3"}})
	figures("%s", limitsHold(t, r, duration(20*time.Second, 8*time.Second)))
}

// limitsHold runs scenario 1's load on r's gateways for dur, checks every
// lane's limit at the upstream, and returns the figures.
func limitsHold(t *testing.T, r *rig, dur time.Duration) string {
	t.Helper()
	r.up.reset()
	res := runLoad(context.Background(), loadSpec{Gateways: r.urls(), Clients: 40, Duration: dur, Users: loadUsers})
	_, peak, upCalls := r.up.snapshot()
	c := count(res)

	if c.errs > 0 {
		t.Errorf("%d calls failed at the transport: first %v", c.errs, c.firstErr)
	}
	for _, x := range res {
		if x.err != nil {
			continue
		}
		switch {
		case x.status == http.StatusOK && x.decision == "admitted":
		case x.status == http.StatusTooManyRequests && x.decision == "refused" && x.header.Get("Retry-After") != "":
		default:
			t.Errorf("call %s (%s as %s): status %d decision %q: want 200 admitted or 429 refused with Retry-After",
				x.id, x.kind, x.user, x.status, x.decision)
		}
	}
	if c.byStatus[200] == 0 || c.byStatus[429] == 0 {
		t.Errorf("load did not exercise the limits: %v", c)
	}
	if upCalls != c.byStatus[200] {
		t.Errorf("upstream served %d heavy calls, clients got %d 200s: refused calls must never reach it", upCalls, c.byStatus[200])
	}
	v := violations(peak, r.up.tiers)
	for _, m := range v {
		t.Errorf("limit violated: %s", m)
	}
	took, err := lanesEmpty(t, r.rc, 3*time.Second)
	if err != nil {
		t.Errorf("lanes after the load: %v", err)
	}
	return fmt.Sprintf("%d gateways, 40 clients, %v: %d calls (%d admitted, %d refused 429, %d other); upstream peaks api_heavy %d/%d, bulk %d/%d, es2_knn %d/%d, per task max %d/%d, per user max %d; %d violations; lanes empty %v after",
		len(r.gws), dur, c.calls, c.byDecided["admitted"], c.byStatus[429], c.calls-c.byStatus[200]-c.byStatus[429],
		peak.Total, limits1["cluster"], peak.Bulk, limits1["bulk"], peak.Semantic, limits1["es2_knn"],
		maxOf(peak.Task), limits1["per_task"], maxOf(peak.User), len(v), took.Round(time.Millisecond))
}

func maxOf(m map[string]int) int {
	n := 0
	for _, v := range m {
		n = max(n, v)
	}
	return n
}
