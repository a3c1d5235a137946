package loop_test

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/capgate/capgate/internal/loop"
)

func TestRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var at []time.Duration
		waits := []time.Duration{time.Second, 3 * time.Second}
		loop.Run(t.Context(), 2*time.Second, func(context.Context) (time.Duration, bool) {
			at = append(at, time.Since(start))
			if len(at) > len(waits) {
				return 0, true
			}
			return waits[len(at)-1], false
		})
		if want := []time.Duration{2 * time.Second, 3 * time.Second, 6 * time.Second}; !slices.Equal(at, want) {
			t.Errorf("fn ran at %v; want %v (first wait, then each wait fn returned, until done)", at, want)
		}
	})
}

func TestRunStopsWithContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		start := time.Now()
		runs := 0
		loop.Run(ctx, time.Minute, func(context.Context) (time.Duration, bool) {
			runs++
			return time.Minute, false
		})
		if runs != 0 || time.Since(start) != 5*time.Second {
			t.Errorf("Run returned after %v with %d runs; want at the context's end (5s), no runs", time.Since(start), runs)
		}
	})
}

func TestEvery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		start := time.Now()
		var at []time.Duration
		loop.Every(ctx, 10*time.Second, func(ctx context.Context) {
			at = append(at, time.Since(start))
			if len(at) == 3 {
				cancel()
			}
		})
		if want := []time.Duration{0, 10 * time.Second, 20 * time.Second}; !slices.Equal(at, want) {
			t.Errorf("fn ran at %v; want %v (at once, then every 10s until ctx is done)", at, want)
		}
	})
}
