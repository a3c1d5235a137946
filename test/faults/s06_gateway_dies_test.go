//go:build faults

package faults

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"
)

func TestS06GatewayDies(t *testing.T) {
	figures := begin(t, 6)
	r := newRig(t, rigOptions{Gateways: 3, DB: "s06", Config: roomyConfig(), Env: faultEnv})
	gw1, gw2, gw3 := r.gws[0], r.gws[1], r.gws[2]

	// Load on the gateways that live.
	loadCtx, stopLoad := context.WithCancel(context.Background())
	defer stopLoad()
	done := make(chan []result, 1)
	go func() {
		done <- runLoad(loadCtx, loadSpec{Gateways: r.urls(gw1, gw2), Clients: 8, Duration: 2 * time.Minute, Users: loadUsers})
	}()

	// Calls held in flight on gw3.
	const held = 6
	var wg sync.WaitGroup
	for i := range held {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			_ = call(ctx, gw3.url(), loadUsers[i%len(loadUsers)], allKinds[i%len(allKinds)],
				map[string]string{holdHeader: "60000"})
		})
	}
	if _, err := waitFor(context.Background(), 30*time.Second, 20*time.Millisecond, func() error {
		if now, _, _ := r.up.snapshot(); now.Task["gw3"] != held {
			return fmt.Errorf("%d of %d calls in flight through gw3", now.Task["gw3"], held)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	l, err := lanes(context.Background(), r.rc)
	if err != nil {
		t.Fatal(err)
	}
	tokens := map[string]bool{}
	for _, m := range l[lanePrefix+"api_heavy_task:gw3"] {
		tokens[m] = true
	}
	if len(tokens) != held {
		t.Fatalf("gw3's task lane holds %d leases, want %d: %s", len(tokens), held, laneSummary(l))
	}

	killAt := time.Now()
	gw3.kill()
	wg.Wait()
	// Its leases stay until they expire: lease_seconds after their last renewal.
	leaked := func() (int, error) {
		l, err := lanes(context.Background(), r.rc)
		if err != nil {
			return 0, err
		}
		n := 0
		for _, ms := range l {
			for _, m := range ms {
				if tokens[m] {
					n++
				}
			}
		}
		return n, nil
	}
	var stillAt1s int
	var goneAt time.Time
	_, err = waitFor(context.Background(), 15*time.Second+3*time.Second, 100*time.Millisecond, func() error {
		n, err := leaked()
		if err != nil {
			return err
		}
		if time.Since(killAt) < time.Second {
			stillAt1s = n
		}
		if n > 0 {
			return fmt.Errorf("%d leases of gw3 still live", n)
		}
		goneAt = time.Now()
		return nil
	})
	gone := goneAt.Sub(killAt)
	if err != nil {
		t.Errorf("gw3's leases after kill -9: %v (lease_seconds is 15)", err)
	}
	upstreamEnded, _ := waitFor(context.Background(), 5*time.Second, 20*time.Millisecond, func() error {
		if now, _, _ := r.up.snapshot(); now.Task["gw3"] != 0 {
			return fmt.Errorf("%d calls of gw3 still in the upstream", now.Task["gw3"])
		}
		return nil
	})
	stopLoad()
	res := <-done
	c := count(res)
	for _, x := range res {
		if x.err != nil || x.status != http.StatusOK || x.decision != "admitted" {
			t.Errorf("call on gw%d at +%v after the kill: status %d err %v decision %q: want 200 admitted",
				x.gw+1, x.start.Sub(killAt).Round(time.Millisecond), x.status, x.err, x.decision)
		}
	}
	took, err := lanesEmpty(t, r.rc, 3*time.Second)
	if err != nil {
		t.Errorf("lanes after the load: %v", err)
	}
	figures("3 gateways; gw3 killed (SIGKILL) holding %d calls while gw1+gw2 served 8 clients: %d calls on the others, %d failed; gw3's calls left the upstream in %v; its %d calls' leases (%d lane entries still live 1 s after the kill) all expired %v after the kill (lease 15 s); lanes empty %v after the load",
		held, c.calls, c.calls-c.byStatus[200], upstreamEnded.Round(time.Millisecond), len(tokens), stillAt1s,
		gone.Round(100*time.Millisecond), took.Round(time.Millisecond))
}
