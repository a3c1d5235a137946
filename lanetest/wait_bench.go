package lanetest

import (
	"slices"
	"testing"
	"time"

	"github.com/capgate/capgate"
)

// WaitStoreAPI is a lane store with a waitlist.
type WaitStoreAPI interface {
	capgate.LaneStore
	capgate.Waitlist
}

// BenchWake measures how long a freed slot takes to reach the next
// waiter: each iteration, a call on holder fills a one-slot lane, a call
// on waiter queues for it, and holder releases; the time from the start
// of the release to the waiter's wake-up is one sample. holder and waiter
// may be the same store (one gateway) or two stores on one Redis (two
// gateways). It reports the samples' p50 and p99 in ms (wake-p50-ms,
// wake-p99-ms), and the same up to the waiter holding the full lease
// (pickup-p50-ms, pickup-p99-ms).
func BenchWake(b *testing.B, holder, waiter WaitStoreAPI) {
	ctx := b.Context()
	prefix := NewPrefix() + "ocl"
	keys := []string{prefix + ":api_heavy", prefix + ":user:u"}
	ticket := func(user string) capgate.Ticket {
		return capgate.Ticket{Prefix: prefix, Token: NewToken(), Keys: keys, Limits: []int{1, 10}, UserID: user, UserLane: 2,
			Lease: time.Minute, TicketLease: 10 * time.Second, Claim: 5 * time.Second, MaxWaiting: 10, MaxPerUser: 10}
	}
	counts := make([]int, len(keys))
	var wakes, pickups []time.Duration
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for b.Loop() {
		h := ticket("h")
		if res, err := holder.Join(ctx, h, counts); err != nil || !res.Taken {
			b.Fatalf("holder Join = %+v, %v; want taken", res, err)
		}
		w := ticket("w")
		wake, stop, err := waiter.Watch(ctx, w.Prefix, w.Token)
		if err != nil {
			b.Fatal(err)
		}
		if res, err := waiter.Join(ctx, w, counts); err != nil || !res.Queued {
			b.Fatalf("waiter Join = %+v, %v; want queued", res, err)
		}
		start := time.Now()
		if err := holder.ReleaseWait(ctx, prefix, h.Token, keys, capgate.Charge{}); err != nil {
			b.Fatal(err)
		}
		timer.Reset(10 * time.Second)
		select {
		case <-wake:
		case <-timer.C:
			b.Fatal("no wake-up within 10s")
		}
		wakes = append(wakes, time.Since(start))
		if held, err := waiter.Renew(ctx, w.Token, keys, time.Minute); err != nil || held != len(keys) {
			b.Fatalf("pick up: held %d, %v", held, err)
		}
		pickups = append(pickups, time.Since(start))
		stop()
		if err := waiter.ReleaseWait(ctx, prefix, w.Token, keys, capgate.Charge{}); err != nil {
			b.Fatal(err)
		}
	}
	report := func(name string, ds []time.Duration) {
		slices.Sort(ds)
		ms := func(q float64) float64 {
			return float64(ds[min(int(q*float64(len(ds))), len(ds)-1)]) / float64(time.Millisecond)
		}
		b.ReportMetric(ms(0.5), name+"-p50-ms")
		b.ReportMetric(ms(0.99), name+"-p99-ms")
	}
	report("wake", wakes)
	report("pickup", pickups)
}
