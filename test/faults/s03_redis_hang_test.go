//go:build faults

package faults

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"syscall"
	"testing"
	"time"
)

// roomyConfig is enforce for everyone with limits the load never reaches:
// every call must be admitted (or, with the store down, unavailable) and
// succeed. A 15 s lease, renewed every 5 s.
func roomyConfig() []string {
	return []string{"mode=enforce", "enforce_for=all", "api_heavy.cluster=1000", "api_heavy.per_task=1000",
		"reserve_single_row=0", "es2_knn=1000",
		"tiers.staff=1000", "tiers.core=1000", "tiers.early_access=1000", "tiers.preview=1000",
		"per_user.staff=1000", "per_user.core=1000", "per_user.early_access=1000", "per_user.preview=1000",
		"lease_seconds=15", "renew_seconds=5"}
}

// faultEnv are the fail-open settings at their defaults, spelled out so the
// figures say what they were measured with.
var faultEnv = []string{"CAPACITY_REDIS_DEADLINE_SECONDS=1", "CAPACITY_REDIS_TIMEOUT_SECONDS=0.5",
	"CAPACITY_REDIS_RETRY_SECONDS=15"}

const (
	redisDeadline = time.Second
	skipWindow    = 15 * time.Second
	// delayedOver is the added latency over which a call counts as delayed
	// by the limiter: half the Redis deadline.
	delayedOver = 500 * time.Millisecond
)

// added is a call's latency at the client minus its time in the upstream:
// what the gateway added.
func (u *upstream) added(r result) (time.Duration, bool) {
	d, ok := u.spentIn(r.id)
	if !ok {
		return 0, false
	}
	return r.lat - d, true
}

func TestS03RedisHangs(t *testing.T) {
	figures := begin(t, 3)
	r := newRig(t, rigOptions{Gateways: 3, DB: "s03", Config: roomyConfig(), Env: faultEnv})
	pre, hang, post := 4*time.Second, duration(20*time.Second, 8*time.Second), 20*time.Second
	endProbes := watchProbes(t, r.gws)
	done := make(chan []result, 1)
	loadStart := time.Now()
	go func() {
		done <- runLoad(context.Background(), loadSpec{Gateways: r.urls(), Clients: 12, Duration: pre + hang + post,
			Users: loadUsers})
	}()
	time.Sleep(pre)
	stopAt := time.Now()
	if err := r.redis.signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(hang)
	contAt := time.Now()
	if err := r.redis.signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	res := <-done
	c := count(res)
	endProbes()

	// Every call succeeds.
	for _, x := range res {
		if x.err != nil || x.status != http.StatusOK {
			t.Errorf("call %s on gw%d at +%v: status %d err %v decision %q: want 200", x.id, x.gw+1,
				x.start.Sub(loadStart).Round(time.Millisecond), x.status, x.err, x.decision)
		}
	}
	// What the gateway added to each call, before and during the hang.
	var base []time.Duration
	worst := time.Duration(0)
	type delayed struct {
		at    time.Time
		added time.Duration
	}
	perGW := map[int][]delayed{}
	for _, x := range res {
		a, ok := r.up.added(x)
		if !ok {
			continue
		}
		if x.start.Before(stopAt) && x.start.Add(x.lat).Before(stopAt) {
			base = append(base, a)
			continue
		}
		worst = max(worst, a)
		if a > delayedOver {
			perGW[x.gw] = append(perGW[x.gw], delayed{x.start, a})
		}
	}
	// Delayed calls come in bursts, one per skip window: those that were
	// waiting on Redis when an operation first failed.
	maxEpisodes := int(hang/skipWindow) + 1
	totalDelayed, episodesMax, burstMax := 0, 0, 0
	for gw, ds := range perGW {
		sort.Slice(ds, func(i, j int) bool { return ds[i].at.Before(ds[j].at) })
		episodes, inBurst := 0, 0
		var epStart time.Time
		for _, d := range ds {
			if episodes == 0 || d.at.After(epStart.Add(redisDeadline+time.Second)) {
				episodes++
				epStart = d.at
				inBurst = 0
			}
			inBurst++
			burstMax = max(burstMax, inBurst)
		}
		totalDelayed += len(ds)
		episodesMax = max(episodesMax, episodes)
		if episodes > maxEpisodes {
			var at []string
			for _, d := range ds {
				at = append(at, fmt.Sprintf("+%v(%v)", d.at.Sub(stopAt).Round(time.Millisecond), d.added.Round(time.Millisecond)))
			}
			t.Errorf("gw%d: %d bursts of delayed calls in a %v hang, want ≤ %d (one per %v skip window): %v",
				gw+1, episodes, hang, maxEpisodes, skipWindow, at)
		}
	}
	if limit := redisDeadline + 1500*time.Millisecond; worst > limit {
		t.Errorf("worst added latency %v, want ≤ the Redis deadline %v (+1.5 s for a loaded machine)", worst, redisDeadline)
	}
	// Counting resumes: per gateway, the first admitted call after SIGCONT.
	resume := time.Duration(0)
	for gw := range r.gws {
		first := time.Time{}
		for _, x := range res {
			if x.gw == gw && x.start.After(contAt) && x.decision == "admitted" && (first.IsZero() || x.start.Before(first)) {
				first = x.start
			}
		}
		if first.IsZero() {
			t.Errorf("gw%d: no call admitted (counted) in the %v after SIGCONT", gw+1, post)
			continue
		}
		resume = max(resume, first.Sub(contAt))
		for _, x := range res {
			if x.gw == gw && x.start.After(first.Add(2*time.Second)) && x.decision != "admitted" {
				t.Errorf("gw%d: call at +%v after SIGCONT is %q after counting resumed", gw+1, x.start.Sub(contAt).Round(time.Millisecond), x.decision)
				break
			}
		}
	}
	if limit := skipWindow + redisDeadline + time.Second; resume > limit {
		t.Errorf("counting resumed %v after SIGCONT, want ≤ %v (skip window + deadline + 1 s)", resume, limit)
	}
	// Leases the gateways could not release expire.
	took, err := lanesEmpty(t, r.rc, 15*time.Second+5*time.Second)
	if err != nil {
		t.Errorf("lanes after the load: %v", err)
	}
	dc, dr := degraded(t, r.gws)
	if dr > 0 {
		t.Errorf("%d calls refused by the local lanes under limits the load never reaches", dr)
	}
	figures("3 gateways, 12 clients, Redis master SIGSTOPped %v under load: %d calls, %d failed, %d unavailable (%d of them counted by the local lanes, degraded; %d refused); gateway overhead before p50 %v p99 %v; %d calls delayed > %v, in ≤ %d burst(s) per gateway of ≤ %d calls (those waiting on Redis when it hung), worst added %v; counting resumed %v after SIGCONT; lanes empty %v after the load",
		hang, c.calls, c.calls-c.byStatus[200], c.byDecided["unavailable"], dc, dr,
		percentile(base, 50).Round(time.Millisecond), percentile(base, 99).Round(time.Millisecond),
		totalDelayed, delayedOver, episodesMax, burstMax, worst.Round(time.Millisecond), resume.Round(time.Millisecond),
		took.Round(100*time.Millisecond))
}
