//go:build faults

package faults

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"
)

// Scenario 14 is registered here rather than in names' literal, so that
// branches adding scenarios don't edit one line.
func init() { names[14] = "Redis Cluster: limits, then the lanes' master fails" }

// TestS14ClusterLimits is scenario 14's first part alone: three gateways
// started with --redis-cluster (so the hash-tagged key layout) hold
// scenario 1's limits exactly on a real Redis Cluster. A quick check of
// the cluster layout; TestS14ClusterFailover runs it too, then the
// failover.
func TestS14ClusterLimits(t *testing.T) {
	cfg := append(limitsConfig("enforce"), "lease_seconds=30", "renew_seconds=5")
	env := append(slices.Clone(faultEnv), "CAPGATE_LOCAL_LANES=false")
	r := newRig(t, rigOptions{Gateways: 3, DB: "s14l", Config: cfg, Env: env, Cluster: true})
	t.Log(limitsHold(t, r, duration(12*time.Second, 6*time.Second)))
}

// TestS14ClusterFailover: three gateways on a Redis Cluster (3 masters,
// 3 replicas; --redis-cluster, so the hash-tagged key layout) hold
// scenario 1's limits exactly; then the master serving the lanes' slot is
// killed under load while three long calls hold leases. Calls meanwhile
// are answered, failing open within the deadline; the replica is promoted;
// the long calls' leases are all on it, none lost or doubled; every
// gateway counts again and the limits hold exactly again.
func TestS14ClusterFailover(t *testing.T) {
	figures := begin(t, 14)
	// Leases of 30 s renewed every 5 s outlive a skip window (15 s) of
	// missed renewals: 15 < 30 - 2 × 5.
	cfg := append(limitsConfig("enforce"), "lease_seconds=30", "renew_seconds=5")
	// Local lanes off: the scenario times when the cluster counts again,
	// and a local lane's own refusal during the outage would look like
	// the cluster counting (scenarios 3 and 13 cover the local lanes).
	env := append(slices.Clone(faultEnv), "CAPGATE_LOCAL_LANES=false")
	r := newRig(t, rigOptions{Gateways: 3, DB: "s14", Config: cfg, Env: env, Cluster: true})
	ctx := context.Background()

	// 1. Scenario 1 on the cluster. The default socket timeout and
	// deadline, since phase 2 is about failing open.
	phase1 := limitsHold(t, r, duration(12*time.Second, 6*time.Second))

	// 2. Three long calls, one per gateway, of three tiers: bulk leases
	// that fill the bulk limit (3) and must survive the failover.
	post := duration(30*time.Second, 24*time.Second)
	check := duration(10*time.Second, 6*time.Second)
	// The long calls hold past the wait for the strays (entries of calls
	// in flight at the kill, 2 s into the load, expire a lease after it)
	// and past the check: that wait is for the long calls' entries alone,
	// which it never sees if they were released first.
	hold := max(post, 2*time.Second+30*time.Second) + check + 6*time.Second
	longUsers := []string{"ada", "grace", "barbara"}
	long := make([]result, len(r.gws))
	var wg sync.WaitGroup
	for i, g := range r.gws {
		wg.Go(func() {
			long[i] = call(ctx, g.url(), longUsers[i], bulkReranker, map[string]string{holdHeader: itoa(int(hold.Milliseconds()))})
			long[i].gw = i
		})
	}
	// The snapshot waits for every lane entry of the long calls, not only
	// for api_heavy's: lanes reads the keys first and each lane after, so a
	// call acquiring meanwhile can be in api_heavy but not yet in the lanes
	// whose keys it created (its task, tier and user lanes). A snapshot
	// missing them made the entries on the new master look doubled, and
	// the wait below for the long calls' entries alone run out.
	var before map[string][]string
	if _, err := waitFor(ctx, 10*time.Second, 50*time.Millisecond, func() error {
		l, err := lanes(ctx, r.rc)
		if err != nil {
			return err
		}
		if n := len(l[clusterLanePrefix+"api_heavy"]); n != len(long) {
			return fmt.Errorf("api_heavy holds %d leases, want %d", n, len(long))
		}
		if n, want := countTokenLeases(l, longTokens(l, clusterLanePrefix+"api_heavy")), len(long)*longCallLanes; n != want {
			return fmt.Errorf("the long calls hold %d lane entries, want %d", n, want)
		}
		before = l
		return nil
	}); err != nil {
		t.Fatalf("long calls: %v", err)
	}
	if err := replicaCaughtUp(ctx, r.rc); err != nil {
		t.Fatalf("before the kill: %v", err)
	}
	master, replicas, err := r.cluster.owner(ctx, t, clusterLanePrefix)
	if err != nil || master != r.redis || len(replicas) != 1 {
		t.Fatalf("lanes' slot: master %v (want %s), replicas %d, %v", master, r.redis.addr(), len(replicas), err)
	}

	// 3. Kill the lanes' master under load; wait for its replica to take
	// over the slot.
	done := make(chan []result, 1)

	go func() {
		done <- runLoad(ctx, loadSpec{Gateways: r.urls(), Clients: 12, Duration: post, Users: loadUsers})
	}()
	time.Sleep(2 * time.Second)
	killAt := time.Now()
	master.kill()
	promoted, err := waitFor(ctx, 30*time.Second, 50*time.Millisecond, func() error {
		m, _, err := r.cluster.owner(ctx, t, clusterLanePrefix)
		if err != nil {
			return err
		}
		if m != replicas[0] {
			return fmt.Errorf("the slot's master is %s", m.addr())
		}
		return nil
	})
	if err != nil {
		t.Fatalf("the replica was not promoted: %v", err)
	}
	promotedAt := killAt.Add(promoted)
	nc := replicas[0].client(t)
	after, err := lanes(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	lost, doubled := leaseDiff(before, after, longTokens(before, clusterLanePrefix+"api_heavy"))

	// Every call is answered: admitted, refused by a limit, or (store
	// failing) unavailable within the deadline.
	res := <-done
	worst, unavailable := time.Duration(0), 0
	for _, x := range res {
		switch {
		case x.err != nil:
			t.Errorf("call %s on gw%d at %+.3fs: %v", x.id, x.gw+1, x.start.Sub(killAt).Seconds(), x.err)
			continue
		case x.status == http.StatusOK && (x.decision == "admitted" || x.decision == "unavailable"):
		case x.status == http.StatusTooManyRequests && x.decision == "refused":
		default:
			t.Errorf("call %s on gw%d: status %d decision %q", x.id, x.gw+1, x.status, x.decision)
		}
		if x.decision == "unavailable" {
			unavailable++
			spent, _ := r.up.spentIn(x.id)
			worst = max(worst, x.lat-spent)
		}
	}
	if limit := redisDeadline + 1500*time.Millisecond; worst > limit {
		t.Errorf("an unavailable call took %v more than its time upstream, want ≤ the deadline %v (+1.5 s for a loaded machine)", worst, redisDeadline)
	}
	resume := countingAgain(t, res, len(r.gws), promotedAt)
	if limit := skipWindow + redisDeadline + 2*time.Second; resume > limit {
		t.Errorf("counting resumed %v after the promotion, want ≤ %v", resume, limit)
	}

	// Calls in flight at the kill whose release met the dead master left
	// their leases to expire (at most a lease after they were taken); wait
	// for that, so the check below has room to admit calls.
	stray := 0
	for k, m := range after {
		stray += len(m) - countTokenLeases(map[string][]string{k: m}, longTokens(before, clusterLanePrefix+"api_heavy"))
	}
	strayGone, err := waitFor(ctx, 35*time.Second, 100*time.Millisecond, func() error {
		l, err := lanes(ctx, nc)
		if err != nil {
			return err
		}
		if n, want := countLeases(l), countTokenLeases(before, longTokens(before, clusterLanePrefix+"api_heavy")); n != want {
			return fmt.Errorf("%d lane entries, want the long calls' %d (%s)", n, want, laneSummary(l))
		}
		return nil
	})
	if err != nil {
		t.Errorf("stray leases after the failover: %v", err)
	}
	strayGone += time.Since(killAt) - strayGone // as time since the kill

	// 4. The limits hold exactly again on the new master, with the long
	// calls still holding their leases.
	r.redis, r.rc = replicas[0], nc
	r.up.reset()
	res2 := runLoad(ctx, loadSpec{Gateways: r.urls(), Clients: 24, Duration: check, Users: loadUsers})
	_, peak, _ := r.up.snapshot()
	c2 := count(res2)
	for _, m := range violations(peak, r.up.tiers) {
		t.Errorf("after the failover: limit violated: %s", m)
	}
	if c2.errs > 0 || c2.byDecided["unavailable"] > 0 || c2.byDecided["admitted"] == 0 || c2.byStatus[429] == 0 {
		t.Errorf("after the failover: %v; want only admitted and refused, both", c2)
	}
	wg.Wait()
	for i, x := range long {
		if x.err != nil || x.status != http.StatusOK || x.decision != "admitted" {
			t.Errorf("long call on gw%d: status %d decision %q err %v, want 200 admitted", i+1, x.status, x.decision, x.err)
		}
	}
	took, err := lanesEmpty(t, nc, 3*time.Second)
	if err != nil {
		t.Errorf("lanes on the new master after the load: %v", err)
	}
	c := count(res)
	figures("limits on the cluster: %s. Failover: 3 gateways, 12 clients, 3 long calls; the lanes' master kill -9 under load: replica promoted %v after (node timeout %v); %d calls, %d failed, %d unavailable (worst %v over the upstream time), first at %+.1fs; every gateway counting again %v after the promotion; the long calls' %d leases on the new master: %d lost, %d doubled; %d lane entries of calls in flight at the kill (their release met the dead master) expired by %v after it; then %v of 24 clients: %d calls (%d admitted, %d refused), peaks api_heavy %d/%d, bulk %d/%d, per user max %d, 0 unavailable; lanes empty %v after",
		phase1, promoted.Round(100*time.Millisecond), clusterNodeTimeout, c.calls, c.calls-c.byStatus[200]-c.byStatus[429],
		unavailable, worst.Round(time.Millisecond), firstUnavailable(res, killAt).Seconds(), resume.Round(time.Millisecond),
		countTokenLeases(before, longTokens(before, clusterLanePrefix+"api_heavy")), lost, doubled, stray, strayGone.Round(100*time.Millisecond),
		check, c2.calls, c2.byDecided["admitted"], c2.byStatus[429], peak.Total, limits1["cluster"], peak.Bulk, limits1["bulk"],
		maxOf(peak.User), took.Round(time.Millisecond))
}

// longCallLanes is how many lanes a long call (bulkReranker, not
// semantic) takes a lease in: api_heavy, its gateway's task lane, its tier's
// and its user's.
const longCallLanes = 4

// longTokens are the tokens in key.
func longTokens(l map[string][]string, key string) map[string]bool {
	out := map[string]bool{}
	for _, tok := range l[key] {
		out[tok] = true
	}
	return out
}

// countTokenLeases counts the lane entries of tokens.
func countTokenLeases(l map[string][]string, tokens map[string]bool) int {
	n := 0
	for _, m := range l {
		for _, tok := range m {
			if tokens[tok] {
				n++
			}
		}
	}
	return n
}

// leaseDiff compares the lane entries of tokens before and after: lost are
// entries gone, doubled are entries that appear more than once or in lanes
// they were not in.
func leaseDiff(before, after map[string][]string, tokens map[string]bool) (lost, doubled int) {
	keys := slices.Sorted(maps.Keys(before))
	for _, k := range keys {
		seen := map[string]int{}
		for _, tok := range after[k] {
			seen[tok]++
		}
		for _, tok := range before[k] {
			if !tokens[tok] {
				continue
			}
			switch seen[tok] {
			case 0:
				lost++
			case 1:
			default:
				doubled += seen[tok] - 1
			}
		}
	}
	for k, m := range after {
		if _, ok := before[k]; ok {
			continue
		}
		for _, tok := range m {
			if tokens[tok] {
				doubled++
			}
		}
	}
	return lost, doubled
}

// countingAgain returns, for gateways 0..n-1, the longest time from at to
// the first call counted again (admitted or refused by a limit), and
// reports a gateway that never counts again, or that still answers
// unavailable 2 s after it did.
func countingAgain(t testing.TB, res []result, n int, at time.Time) time.Duration {
	t.Helper()
	worst := time.Duration(0)
	for gw := range n {
		first := time.Time{}
		for _, x := range res {
			counted := x.decision == "admitted" || x.decision == "refused"
			if x.gw == gw && x.start.After(at) && counted && (first.IsZero() || x.start.Before(first)) {
				first = x.start
			}
		}
		if first.IsZero() {
			t.Errorf("gw%d: no call counted after the promotion", gw+1)
			continue
		}
		worst = max(worst, first.Sub(at))
		for _, x := range res {
			if x.gw == gw && x.start.After(first.Add(2*time.Second)) && x.decision == "unavailable" {
				t.Errorf("gw%d: call at %+.3fs unavailable after counting resumed", gw+1, x.start.Sub(at).Seconds())
				break
			}
		}
	}
	return worst
}

// firstUnavailable is when, after at, the first call was unavailable.
func firstUnavailable(res []result, at time.Time) time.Duration {
	first := time.Duration(-1)
	for _, x := range res {
		if d := x.start.Sub(at); x.decision == "unavailable" && (first < 0 || d < first) {
			first = d
		}
	}
	return first
}
