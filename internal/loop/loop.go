// Package loop runs the background loops of the gateway (config watch,
// health checks, the migration retry) on one timer each.
package loop

import (
	"context"
	"time"
)

// Run waits first, then calls fn; fn returns how long to wait before it
// runs again, or done to end the loop. Run returns when fn is done or
// ctx is, whichever comes first; a run of fn in progress is never cut
// short by Run itself (fn gets ctx for that).
func Run(ctx context.Context, first time.Duration, fn func(ctx context.Context) (next time.Duration, done bool)) {
	t := time.NewTimer(first)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		next, done := fn(ctx)
		if done {
			return
		}
		t.Reset(next)
	}
}

// Every calls fn at once, then every d, until ctx is done.
func Every(ctx context.Context, d time.Duration, fn func(ctx context.Context)) {
	Run(ctx, 0, func(ctx context.Context) (time.Duration, bool) {
		fn(ctx)
		return d, false
	})
}
