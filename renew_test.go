package capgate_test

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/lanetest"
)

// TestOneRenewerForAllCalls: calls in flight start no goroutine of their
// own; each is renewed on its own schedule until released; Close stops
// the renewals of the calls still in flight.
func TestOneRenewerForAllCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newFaultEnv(t)
		ctx := context.Background()
		before := runtime.NumGoroutine()
		a := e.gate.Admit(ctx, lanetest.Match("p", "preview"))
		time.Sleep(10 * time.Second)
		b := e.gate.Admit(ctx, lanetest.Match("q", "preview"))
		c := e.gate.Admit(ctx, lanetest.Match("r", "preview"))
		// The process's count: a goroutine another test left behind may
		// end meanwhile (none of this package's tests run in parallel, so
		// none starts); a renewer per call would add three.
		if n := runtime.NumGoroutine(); n > before {
			t.Errorf("%d goroutines with 3 calls in flight, want at most %d as before them", n, before)
		}
		c.Release(ctx)
		time.Sleep(15 * time.Second) // a at 20 s, b due at 30 s
		synctest.Wait()
		if n := e.renews.Load(); n != 1 {
			t.Fatalf("renewals at 25 s = %d, want 1 (a's)", n)
		}
		time.Sleep(20 * time.Second) // a at 40 s, b at 30 s
		synctest.Wait()
		if n := e.renews.Load(); n != 3 {
			t.Fatalf("renewals at 45 s = %d, want 3", n)
		}
		a.Release(ctx)
		time.Sleep(10 * time.Second) // b at 50 s
		synctest.Wait()
		if n := e.renews.Load(); n != 4 {
			t.Fatalf("renewals at 55 s = %d, want 4 (b's second)", n)
		}
		if err := e.gate.Close(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Second)
		synctest.Wait()
		if n := e.renews.Load(); n != 4 {
			t.Fatalf("renewals after Close = %d, want 4", n)
		}
		if n := e.userLane(t, "q"); n != 0 {
			t.Fatalf("b's lease outlived Close by 100 s: user lane %d", n)
		}
		b.Release(ctx)
	})
}

// TestRenewalsDueTogetherRunSideBySide: the calls due in one round are
// renewed side by side, a few at a time, so one slow renewal does not
// hold the others back until their leases expire.
func TestRenewalsDueTogetherRunSideBySide(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newFaultEnv(t)
		ctx := context.Background()
		gate := make(chan struct{})
		var inFlight, most atomic.Int32
		e.store.RenewFn = func(ctx context.Context, token string, keys []string, lease time.Duration) (int, error) {
			n := inFlight.Add(1)
			for {
				m := most.Load()
				if n <= m || most.CompareAndSwap(m, n) {
					break
				}
			}
			<-gate // a store that answers only when told
			inFlight.Add(-1)
			return e.mem.Renew(ctx, token, keys, lease)
		}
		var adms []*capgate.Admission
		for _, u := range []string{"p", "q", "r", "s"} {
			adms = append(adms, e.gate.Admit(ctx, lanetest.Match(u, "preview")))
		}
		time.Sleep(21 * time.Second) // all four due at 20 s (renew_seconds)
		synctest.Wait()
		if n := inFlight.Load(); n != 4 {
			t.Errorf("renewals in flight while the store is slow = %d, want all 4 due", n)
		}
		close(gate)
		synctest.Wait()
		if m := most.Load(); m != 4 {
			t.Errorf("at most %d renewals at once, want 4", m)
		}
		for _, a := range adms {
			if a.LeaseLost() {
				t.Errorf("%s lost its lease", a.Outcome().Call.UserID)
			}
			a.Release(ctx)
		}
	})
}
