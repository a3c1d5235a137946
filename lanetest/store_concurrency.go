package lanetest

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capgate/capgate"
)

// Sizes of the concurrency test.
const (
	storeHammerGoroutines = 64
	storeHammerRounds     = 40
	storeHammerLimit      = 3
)

// storeTestConcurrency has many goroutines acquire (enforced) and release on
// one lane, and counts the holders itself: an atomic counter goes up after
// a successful acquire and down before the release, so it never
// undercounts, and must never exceed the limit.
func storeTestConcurrency(t *testing.T, s Store) {
	key := storeLanes(1)
	var (
		holders, peak, taken atomic.Int64
		wg                   sync.WaitGroup
		start                = make(chan struct{})
	)
	errs := make(chan error, storeHammerGoroutines)
	for range storeHammerGoroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			req := capgate.AcquireRequest{Keys: key, Limits: []int{storeHammerLimit}, Lease: time.Minute}
			counts := make([]int, 1)
			for range storeHammerRounds {
				req.Token = NewToken()
				ok, err := s.Acquire(t.Context(), req, counts)
				if errors.Is(err, capgate.ErrBusy) {
					continue // a store may shed load; that takes nothing
				}
				if err != nil {
					errs <- err
					return
				}
				if !ok {
					runtime.Gosched()
					continue
				}
				n := holders.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				taken.Add(1)
				runtime.Gosched()
				holders.Add(-1)
				if err := storeReleaseRetry(t, s, req.Token, key); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("store error under load: %v", err)
	}
	if p := peak.Load(); p > storeHammerLimit {
		t.Errorf("saw %d holders at once, limit %d", p, storeHammerLimit)
	}
	if taken.Load() == 0 {
		t.Errorf("no acquire succeeded in %d tries", storeHammerGoroutines*storeHammerRounds)
	}
	if got := storeCount(t, s, key...); got[0] != 0 {
		t.Errorf("count after everyone released = %d, want 0", got[0])
	}
	t.Logf("%d of %d acquires taken, peak %d holders", taken.Load(), storeHammerGoroutines*storeHammerRounds, peak.Load())
}

// releaseRetry releases, retrying while the store sheds load: a lease
// left behind would only make the store stricter, but would skew the final
// count.
func storeReleaseRetry(t testing.TB, s Store, token string, keys []string) error {
	for {
		err := s.Release(t.Context(), token, keys)
		if !errors.Is(err, capgate.ErrBusy) {
			return err
		}
		runtime.Gosched()
	}
}
