//go:build faults

package faults

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

func TestS08LongCalls(t *testing.T) {
	figures := begin(t, 8)
	r := newRig(t, rigOptions{Gateways: 3, DB: "s08", Config: roomyConfig(), Env: faultEnv})
	const lease = 15 * time.Second
	hold := duration(3*lease, 2*lease)
	var wg sync.WaitGroup
	long := make([]result, len(r.gws))
	for i, g := range r.gws {
		wg.Go(func() {
			long[i] = call(context.Background(), g.url(), loadUsers[i+1], allKinds[i%len(allKinds)],
				map[string]string{holdHeader: itoa(int(hold.Milliseconds()))})
			long[i].gw = i
		})
	}
	if _, err := waitFor(context.Background(), 30*time.Second, 20*time.Millisecond, func() error {
		if now, _, _ := r.up.snapshot(); now.Total != len(r.gws) {
			return fmt.Errorf("%d of %d long calls in the upstream", now.Total, len(r.gws))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	l, err := lanes(context.Background(), r.rc)
	if err != nil {
		t.Fatal(err)
	}
	type leaseRef struct{ key, token string }
	var leases []leaseRef
	for k, ms := range l {
		for _, m := range ms {
			leases = append(leases, leaseRef{k, m})
		}
	}
	tokens := map[string]bool{}
	for _, m := range l[lanePrefix+"api_heavy"] {
		tokens[m] = true
	}
	if len(tokens) != len(r.gws) {
		t.Fatalf("api_heavy holds %d leases, want %d", len(tokens), len(r.gws))
	}
	// Short calls alongside, to keep the gateways busy.
	loadCtx, stopLoad := context.WithCancel(context.Background())
	loadDone := make(chan []result, 1)
	go func() {
		loadDone <- runLoad(loadCtx, loadSpec{Gateways: r.urls(), Clients: 6, Duration: hold, Users: loadUsers})
	}()
	// Watch every lease of the long calls once a second until they end.
	last := map[leaseRef]float64{}
	renewals, checks, missing := 0, 0, 0
	endCh := make(chan struct{})
	go func() { wg.Wait(); close(endCh) }()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
watch:
	for {
		select {
		case <-endCh:
			break watch
		case <-tick.C:
		}
		tm, err := r.rc.Time(context.Background()).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, ls := range leases {
			s, err := r.rc.ZScore(context.Background(), ls.key, ls.token).Result()
			if err == goredis.Nil || (err == nil && int64(s) <= tm.UnixMilli()) {
				// The calls end about hold after they started; before that
				// their leases must be there.
				if time.Since(started) < hold-2*time.Second {
					missing++
					t.Errorf("at +%v the lease %s in %s is gone or expired while its call runs", time.Since(started).Round(time.Second), ls.token, ls.key)
				}
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			checks++
			if p, ok := last[ls]; ok && s > p {
				renewals++
			}
			last[ls] = s
		}
	}
	ended := time.Now()
	stopLoad()
	res := <-loadDone
	allOK(t, append(res, long...), started)
	var emptyAt time.Time
	if _, err := waitFor(context.Background(), 5*time.Second, 10*time.Millisecond, func() error {
		l, err := lanes(context.Background(), r.rc)
		if err != nil {
			return err
		}
		for _, ms := range l {
			for _, m := range ms {
				if tokens[m] {
					return fmt.Errorf("a long call's lease is still live in %s", laneSummary(l))
				}
			}
		}
		emptyAt = time.Now()
		return nil
	}); err != nil {
		t.Errorf("after the long calls ended: %v", err)
	}
	heldMin := int64(-1)
	for i, g := range r.gws {
		rec, ok := records(t, g)[long[i].id]
		if !ok {
			t.Errorf("gw%d: no log line for the long call", i+1)
			continue
		}
		if rec.LeaseLost || rec.Decision != "admitted" {
			t.Errorf("gw%d: long call's line: decision %q lease_lost %v, want admitted and no lease lost", i+1, rec.Decision, rec.LeaseLost)
		}
		if rec.HeldMS != nil && (heldMin < 0 || *rec.HeldMS < heldMin) {
			heldMin = *rec.HeldMS
		}
	}
	perLease := float64(renewals) / float64(len(leases))
	if want := float64(hold/(5*time.Second)) - 2; perLease < want {
		t.Errorf("%.1f renewals seen per lease in %v, want ≥ %.0f (every 5 s)", perLease, hold, want)
	}
	figures("%d calls of %v (lease 15 s, renew 5 s) on 3 gateways beside 6 clients of short calls: %d lease checks, %d missing while running; %.1f renewals seen per lease; held_ms ≥ %d; released %v after they ended",
		len(long), hold, checks, missing, perLease, heldMin, emptyAt.Sub(ended).Round(time.Millisecond))
}
