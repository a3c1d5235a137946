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
		ctx, stop := holdContext(client, time.Now().Add(time.Minute))
		defer stop()
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
		ctx, stop := holdContext(client, time.Now().Add(time.Minute))
		defer stop()
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
		ctx, stop := holdContext(client, time.Now().Add(time.Minute))
		stop() // the call ended
		leave()
		synctest.Wait()
		if ctx.Err() == nil {
			t.Fatal("stop left the context live")
		}
	})
}
