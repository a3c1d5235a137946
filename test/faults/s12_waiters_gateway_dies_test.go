//go:build faults

package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/capgate/capgate"
)

// waitConfig is enforce with one bottleneck, api_heavy (2 at once across
// the cluster), every other lane roomy, and waiting on for 20 s.
func waitConfig() []string {
	return []string{"mode=enforce", "enforce_for=all", "api_heavy.cluster=2", "api_heavy.per_task=100",
		"reserve_single_row=0", "es2_knn=100",
		"tiers.staff=100", "tiers.core=100", "tiers.early_access=100", "tiers.preview=100",
		"per_user.staff=10", "per_user.core=10", "per_user.early_access=10", "per_user.preview=10",
		"lease_seconds=15", "renew_seconds=5",
		"wait.max_seconds=20", "wait.max_waiting=200", "wait.max_waiting_per_user=20"}
}

const waitMax = 20 * time.Second

// waitLease is waitConfig's lease_seconds.
const waitLease = 15 * time.Second

// waiter is one call queued in scenario 12.
type waiter struct {
	gw   int // index into the rig's gateways
	user string
	res  result
}

// waitlistKeys returns the waitlist keys left in Redis, but fair work's
// cost estimates (c), which outlive the list on purpose and must expire
// within capgate.RunMaxAge. The records of running calls (r, ru:<user>,
// rq) end with the calls' leases: once the dead gateway's leases have
// expired and the list has emptied, none is left (one with a TTL of at
// most the lease would be a record about to go; they are written with
// RunMaxAge).
func waitlistKeys(ctx context.Context, c *goredis.Client) ([]string, error) {
	keys, err := c.Keys(ctx, waitPrefix+"*").Result()
	if err != nil {
		return nil, err
	}
	var left []string
	for _, k := range keys {
		rest := strings.TrimPrefix(k, waitPrefix)
		limit := time.Duration(0)
		switch {
		case rest == "c":
			limit = capgate.RunMaxAge
		case rest == "r" || rest == "rq" || strings.HasPrefix(rest, "ru:"):
			limit = waitLease
		}
		if limit > 0 {
			ttl, err := c.PTTL(ctx, k).Result()
			if err != nil {
				return nil, err
			}
			if ttl > 0 && ttl <= limit {
				continue
			}
		}
		left = append(left, k)
	}
	return left, nil
}

// queued is how many tickets wait.
func queued(ctx context.Context, c *goredis.Client) (int64, error) {
	return c.ZCard(ctx, waitPrefix+"q").Result()
}

// grants reads, from a gateway's log, when each call took its slot
// (ts − held_ms: a call that waited holds from its grant), by request id.
func grants(t *testing.T, g *gateway) map[string]time.Time {
	t.Helper()
	out := map[string]time.Time{}
	for _, l := range g.logLines(t) {
		var rec struct {
			CID    string    `json:"cid"`
			HeldMS *int64    `json:"held_ms"`
			TS     time.Time `json:"ts"`
		}
		if json.Unmarshal([]byte(l), &rec) == nil && rec.CID != "" && rec.HeldMS != nil {
			out[rec.CID] = rec.TS.Add(-time.Duration(*rec.HeldMS) * time.Millisecond)
		}
	}
	return out
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func TestS12WaitersGatewayDies(t *testing.T) {
	figures := begin(t, 12)
	r := newRig(t, rigOptions{Gateways: 3, DB: "s12", Config: waitConfig(), Env: faultEnv})
	ctx := context.Background()

	// Two calls on gw1 fill api_heavy for 4 s.
	start := time.Now()
	var hold sync.WaitGroup
	for _, u := range []string{"margaret", "margaret"} {
		hold.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			if x := call(cctx, r.gws[0].url(), u, bulkSemantic, map[string]string{holdHeader: "4000"}); x.status != 200 {
				t.Errorf("holder: status %d err %v", x.status, x.err)
			}
		})
	}
	if _, err := waitFor(ctx, 30*time.Second, 10*time.Millisecond, func() error {
		if now, _, _ := r.up.snapshot(); now.Total != 2 {
			return fmt.Errorf("%d of 2 holders in the upstream", now.Total)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// Waiters, queued one at a time so their order is known: ada three
	// times on gw1, then grace and linus on gw2, then three users on gw3
	// (the one to die). Fair order: ada, grace, linus, barbara, ken,
	// dennis (the first round), then ada, ada.
	plan := []waiter{{gw: 0, user: "ada"}, {gw: 0, user: "ada"}, {gw: 0, user: "ada"},
		{gw: 1, user: "grace"}, {gw: 1, user: "linus"},
		{gw: 2, user: "barbara"}, {gw: 2, user: "ken"}, {gw: 2, user: "dennis"}}
	var wg sync.WaitGroup
	for i := range plan {
		w := &plan[i]
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Minute) // a bound: nothing may wait forever
			defer cancel()
			w.res = call(cctx, r.gws[w.gw].url(), w.user, bulkSemantic, map[string]string{holdHeader: "500"})
		})
		if _, err := waitFor(ctx, 10*time.Second, 5*time.Millisecond, func() error {
			n, err := queued(ctx, r.rc)
			if err != nil {
				return err
			}
			if n != int64(i+1) {
				return fmt.Errorf("%d of %d waiters queued", n, i+1)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	_, body, err := status(r.gws[0].url())
	if err != nil || !strings.Contains(body, `"waiting":8`) {
		t.Errorf("status with 8 waiting: %v %s", err, body)
	}

	killAt := time.Now()
	r.gws[2].kill()
	wg.Wait()
	hold.Wait()
	allEnded := time.Since(killAt)

	// gw1's and gw2's waiters: served, each within max_seconds of
	// queueing, in fair order; gw3's ended with its death.
	var served []waiter
	worst := time.Duration(0)
	for _, w := range plan {
		if w.gw == 2 {
			if w.res.err == nil && w.res.status != 0 {
				t.Errorf("%s on the killed gw3 got status %d", w.user, w.res.status)
			}
			continue
		}
		worst = max(worst, w.res.lat)
		switch {
		case w.res.err != nil:
			t.Errorf("%s on gw%d: %v", w.user, w.gw+1, w.res.err)
		case w.res.status == http.StatusOK && w.res.decision == "admitted":
			served = append(served, w)
		case w.res.status == http.StatusTooManyRequests && w.res.header.Get("Retry-After") != "":
		default:
			t.Errorf("%s on gw%d: status %d decision %q, want 200 admitted or 429", w.user, w.gw+1, w.res.status, w.res.decision)
		}
		if w.res.lat > waitMax+5*time.Second {
			t.Errorf("%s on gw%d ended after %v, more than max_seconds (%v) plus its call", w.user, w.gw+1, w.res.lat, waitMax)
		}
	}
	if len(served) != 5 {
		t.Errorf("%d of gw1's and gw2's 5 waiters served", len(served))
	}
	// A call's log line is written after its response (at release).
	at := map[string]time.Time{}
	if _, err := waitFor(ctx, 10*time.Second, 50*time.Millisecond, func() error {
		for _, g := range r.gws[:2] {
			for id, tm := range grants(t, g) {
				at[id] = tm
			}
		}
		for _, w := range served {
			if _, ok := at[w.res.id]; !ok {
				return fmt.Errorf("no log line for %s's call %s", w.user, w.res.id)
			}
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	slices.SortStableFunc(served, func(a, b waiter) int { return at[a.res.id].Compare(at[b.res.id]) })
	var got []string
	var waited []string
	for _, w := range served {
		got = append(got, w.user)
		waited = append(waited, fmt.Sprintf("%s %s", w.user, w.res.header.Get("X-OCL-Capacity-Waited-Ms")))
	}
	// Round-robin: grace and linus (one call each) are served in the
	// first round with ada's first call, before ada's other two. (ada's
	// and grace's grants come in one pass: which gateway picked its grant
	// up first is noise, so the order within a round is not checked.)
	if len(got) != 5 || !slices.Equal(sorted(got[:3]), []string{"ada", "grace", "linus"}) ||
		!slices.Equal(got[3:], []string{"ada", "ada"}) {
		t.Errorf("served in the order %v, want ada, grace, linus (in any order) then ada, ada", got)
	}

	// Nothing left: the status read drops expired tickets; the lanes and
	// the waitlist are empty.
	emptyIn, err := waitFor(ctx, 30*time.Second, 100*time.Millisecond, func() error {
		if _, _, err := status(r.gws[0].url()); err != nil {
			return err
		}
		keys, err := waitlistKeys(ctx, r.rc)
		if err != nil {
			return err
		}
		if len(keys) > 0 {
			return fmt.Errorf("waitlist keys left: %v", keys)
		}
		l, err := lanes(ctx, r.rc)
		if err != nil {
			return err
		}
		if len(l) > 0 {
			return fmt.Errorf("lanes not empty: %s", laneSummary(l))
		}
		return nil
	})
	if err != nil {
		t.Errorf("after the waiters: %v", err)
	}
	_, peak, _ := r.up.snapshot()
	if peak.Total > 2 {
		t.Errorf("upstream peak %d calls at once, limit 2", peak.Total)
	}
	figures("3 gateways, api_heavy 2, wait 20 s; 2 calls held 4 s on gw1, 8 waiters queued (3 on gw1 as one user, 2 on gw2, 3 on gw3), gw3 killed (SIGKILL) %v after the holders started: gw1+gw2 waiters served in fair order %v (waited ms: %s), slowest %v from queueing to its answer; every waiter ended %v after the kill; upstream peak %d/2; lanes and waitlist empty %v after",
		killAt.Sub(start).Round(time.Millisecond), got, strings.Join(waited, ", "), worst.Round(time.Millisecond),
		allEnded.Round(time.Millisecond), peak.Total, emptyIn.Round(time.Millisecond))
}
