package http

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// holdContext: never done while the client is connected, however long the
// call runs; once the client has left, done at the deadline (at once if
// that has passed).
func TestHoldContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client, leave := context.WithCancel(context.Background())
		ctx, h := holdContext(client, time.Now().Add(time.Minute), nil)
		defer h.stop()
		time.Sleep(time.Hour) // the bubble's clock: the call runs long past max_hold
		synctest.Wait()
		if ctx.Err() != nil {
			t.Fatal("a connected client's call was cut")
		}
		leave()
		synctest.Wait()
		if ctx.Err() == nil {
			t.Fatal("the client left after the deadline; the call still runs")
		}
	})
	synctest.Test(t, func(t *testing.T) {
		client, leave := context.WithCancel(context.Background())
		ctx, h := holdContext(client, time.Now().Add(time.Minute), nil)
		defer h.stop()
		leave()
		time.Sleep(59 * time.Second)
		synctest.Wait()
		if ctx.Err() != nil {
			t.Fatal("cut before the deadline, though the client left")
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if ctx.Err() == nil {
			t.Fatal("the client left; the call outlived the deadline")
		}
	})
	synctest.Test(t, func(t *testing.T) {
		client, leave := context.WithCancel(context.Background())
		ctx, h := holdContext(client, time.Now().Add(time.Minute), nil)
		h.stop() // the call ended
		leave()
		synctest.Wait()
		if ctx.Err() == nil {
			t.Fatal("stop left the context live")
		}
	})
}

// With onLeave (on_client_gone: cancel), the context ends as soon as the
// client leaves when onLeave says so, and the hold says it was cut; when
// it says no (a call a retry may join), the call is held as before.
func TestHoldContextCancelOnLeave(t *testing.T) {
	for _, cancelNow := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			client, leave := context.WithCancel(context.Background())
			ctx, h := holdContext(client, time.Now().Add(time.Minute), func() bool { return cancelNow })
			defer h.stop()
			leave()
			synctest.Wait()
			h.mu.Lock()
			cut := h.cut
			h.mu.Unlock()
			if (ctx.Err() != nil) != cancelNow || cut != cancelNow {
				t.Fatalf("onLeave %v: done %v, cut %v; want both %v", cancelNow, ctx.Err() != nil, cut, cancelNow)
			}
			time.Sleep(time.Minute)
			synctest.Wait()
			if ctx.Err() == nil {
				t.Fatal("held past the deadline")
			}
		})
	}
}
