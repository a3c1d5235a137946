//go:build faults

package faults

import (
	"context"
	"fmt"
	"testing"
	"time"
)

func TestS05SentinelFailover(t *testing.T) {
	figures := begin(t, 5)
	r := newRig(t, rigOptions{Gateways: 3, DB: "s05", Config: roomyConfig(), Env: faultEnv, Sentinel: true})
	pre, post := 4*time.Second, 26*time.Second
	done := make(chan []result, 1)
	t0 := time.Now()
	go func() {
		done <- runLoad(context.Background(), loadSpec{Gateways: r.urls(), Clients: 12, Duration: pre + post, Users: loadUsers})
	}()
	time.Sleep(pre)
	killAt := time.Now()
	r.sen.master.kill()
	promoted, err := waitFor(context.Background(), 30*time.Second, 100*time.Millisecond, func() error {
		m, err := r.sen.currentMaster(context.Background())
		if err != nil {
			return err
		}
		if m != r.sen.replica.port {
			return fmt.Errorf("master still %d", m)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Sentinel did not promote the replica: %v", err)
	}
	promotedAt := killAt.Add(promoted)
	res := <-done
	allOK(t, res, t0)
	resume := resumed(t, res, len(r.gws), promotedAt)
	if limit := skipWindow + redisDeadline + 2*time.Second; resume > limit {
		t.Errorf("counting resumed %v after the promotion, want ≤ %v", resume, limit)
	}
	nc := r.sen.replica.client(t)
	took, err := lanesEmpty(t, nc, 15*time.Second+5*time.Second)
	if err != nil {
		t.Errorf("lanes on the new master after the load: %v", err)
	}
	c := count(res)
	dc, dr := degraded(t, r.gws)
	if dr > 0 {
		t.Errorf("%d calls refused by the local lanes under limits the load never reaches", dr)
	}
	figures("3 gateways via 3 Sentinels, 12 clients; master kill -9 under load: replica promoted %v after; %d calls, %d failed, %d unavailable (%d of them counted by the local lanes, degraded; %d refused); every gateway counting on the new master %v after the promotion; lanes there empty %v after the load",
		promoted.Round(100*time.Millisecond), c.calls, c.calls-c.byStatus[200], c.byDecided["unavailable"], dc, dr,
		resume.Round(time.Millisecond), took.Round(time.Millisecond))
}
