//go:build faults

package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// logRecord is the part of an ocl_capacity line the suite reads.
type logRecord struct {
	Event     string `json:"event"`
	Decision  string `json:"decision"`
	CID       string `json:"cid"`
	LeaseLost bool   `json:"lease_lost"`
	HeldMS    *int64 `json:"held_ms"`
	Error     string `json:"error"`
	Degraded  bool   `json:"degraded"`
	Dropped   int    `json:"log_dropped"`
}

// records reads a gateway's ocl_capacity lines by cid.
func records(t testing.TB, g *gateway) map[string]logRecord {
	t.Helper()
	b, err := os.ReadFile(g.logFile)
	if err != nil {
		t.Fatalf("read log of %s: %v", g.task, err)
	}
	out := map[string]logRecord{}
	for _, l := range strings.Split(string(b), "\n") {
		var rec logRecord
		if json.Unmarshal([]byte(l), &rec) == nil && rec.Event == "ocl_capacity" {
			out[rec.CID] = rec
		}
	}
	return out
}

// degraded counts the gateways' log lines of calls their local lanes
// decided while Redis was unavailable: unavailable (counted locally) and
// refused.
func degraded(t testing.TB, gws []*gateway) (counted, refused int) {
	t.Helper()
	for _, g := range gws {
		for _, rec := range records(t, g) {
			switch {
			case !rec.Degraded:
			case rec.Decision == "unavailable":
				counted++
			default:
				refused++
			}
		}
	}
	return counted, refused
}

func TestS04RedisRestarts(t *testing.T) {
	figures := begin(t, 4)
	r := newRig(t, rigOptions{Gateways: 3, DB: "s04", Config: roomyConfig(), Env: faultEnv})
	pre, down, post := 4*time.Second, 3*time.Second, 19*time.Second
	endProbes := watchProbes(t, r.gws)
	done := make(chan []result, 1)
	t0 := time.Now()
	go func() {
		done <- runLoad(context.Background(), loadSpec{Gateways: r.urls(), Clients: 12, Duration: pre + down + post, Users: loadUsers})
	}()
	// One long call per gateway, in flight across the restart and past the
	// skip window, so that its renewals meet the empty Redis.
	var wg sync.WaitGroup
	long := make([]result, len(r.gws))
	time.Sleep(time.Second)
	for i, g := range r.gws {
		wg.Go(func() {
			long[i] = call(context.Background(), g.url(), loadUsers[i], bulkSemantic,
				map[string]string{holdHeader: itoa(int((pre + down + post + 2*time.Second).Milliseconds()))})
			long[i].gw = i
		})
	}
	time.Sleep(pre - time.Second)
	killAt := time.Now()
	r.redis.kill()
	time.Sleep(down)
	r.redis.start(t) // same port, empty
	upAt := time.Now()
	res := <-done
	endProbes()
	// Only the long calls are in flight now: the new Redis must not count
	// them (their leases died with the old one and are never revived).
	time.Sleep(time.Second)
	l, err := lanes(context.Background(), r.rc)
	if err != nil {
		t.Fatal(err)
	}
	if len(l) > 0 {
		t.Errorf("with only the %d pre-restart calls in flight, the restarted Redis counts %s: leases revived or double-counted",
			len(long), laneSummary(l))
	}
	wg.Wait()
	allOK(t, append(res, long...), t0)
	resume := resumed(t, res, len(r.gws), upAt)
	if limit := skipWindow + redisDeadline + time.Second; resume > limit+down {
		t.Errorf("counting resumed %v after the restart, want ≤ %v after the kill", resume, limit)
	}
	lost := 0
	for i, g := range r.gws {
		// The line is written as the call is released, just after its
		// client got the answer.
		var rec logRecord
		ok := false
		_, _ = waitFor(context.Background(), 3*time.Second, 20*time.Millisecond, func() error {
			if rec, ok = records(t, g)[long[i].id]; !ok {
				return fmt.Errorf("no line yet")
			}
			return nil
		})
		switch {
		case !ok:
			t.Errorf("gw%d: no log line for the long call %s", i+1, long[i].id)
		case rec.LeaseLost:
			lost++
		default:
			t.Errorf("gw%d: the long call's line has no lease_lost though its leases vanished with Redis: %+v", i+1, rec)
		}
	}
	took, err := lanesEmpty(t, r.rc, 2*time.Second)
	if err != nil {
		t.Errorf("lanes after the load: %v", err)
	}
	c := count(res)
	dc, dr := degraded(t, r.gws)
	if dr > 0 {
		t.Errorf("%d calls refused by the local lanes under limits the load never reaches", dr)
	}
	figures("3 gateways, 12 clients; Redis master kill -9 under load, restarted empty %v later: %d calls + %d long ones, %d failed, %d unavailable (%d of them counted by the local lanes, degraded; %d refused); counting resumed %v after the restart (%v after the kill); 0 leases counted for the %d calls in flight across the restart (%d marked lease_lost); lanes empty %v after",
		down, c.calls, len(long), c.calls-c.byStatus[200], c.byDecided["unavailable"], dc, dr, resume.Round(time.Millisecond),
		(resume + upAt.Sub(killAt)).Round(time.Millisecond), len(long), lost, took.Round(time.Millisecond))
}
