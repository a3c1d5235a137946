package capgate_test

import (
	"context"
	"runtime"
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
		a := e.gate.Admit(ctx, lanetest.Match("p", capgate.TierPreview))
		time.Sleep(10 * time.Second)
		b := e.gate.Admit(ctx, lanetest.Match("q", capgate.TierPreview))
		c := e.gate.Admit(ctx, lanetest.Match("r", capgate.TierPreview))
		if n := runtime.NumGoroutine(); n != before {
			t.Errorf("%d goroutines with 3 calls in flight, want %d as before them", n, before)
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
