package capgate

import (
	"sync"
	"time"
)

// DefaultSkipDuration is how long the gate skips the store after a store
// error (Gate.SkipFor; CAPACITY_REDIS_RETRY_SECONDS). It is shorter than
// lease − 2×renew with the default config, so one error can't cost a long
// call its lease.
const DefaultSkipDuration = 15 * time.Second

// skipWindow is the per-process memory that the lane store failed
// recently: the one piece of per-process state the spec asks for. A gate
// owns one; the gates ForTask derives share it. Safe for concurrent use.
// The zero value is closed.
type skipWindow struct {
	mu    sync.Mutex
	until time.Time // the store is skipped before it; requires mu held
}

// fail opens the window until t, unless it is already open longer.
func (w *skipWindow) fail(t time.Time) {
	w.mu.Lock()
	if t.After(w.until) {
		w.until = t
	}
	w.mu.Unlock()
}

// open reports whether the window is open at now.
func (w *skipWindow) open(now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return now.Before(w.until)
}

// reset closes the window, as if the store had never failed.
func (w *skipWindow) reset() {
	w.mu.Lock()
	w.until = time.Time{}
	w.mu.Unlock()
}

// window returns the skip window the gate uses: the one it shares with
// the gate it was derived from (ForTask), else its own.
func (g *Gate) window() *skipWindow {
	if g.skip != nil {
		return g.skip
	}
	return &g.ownSkip
}

// skipping reports whether the store failed within the last SkipFor, by
// the gate's clock.
func (g *Gate) skipping() bool { return g.SkipFor > 0 && g.window().open(g.now()) }

// Skipping reports whether the gate skips its store now: the store failed
// within the last SkipFor, by the gate's clock (the skip window, shared
// by the gates ForTask derives). Work beside the calls that uses the
// store waits for it to close: the adaptive limits' steps, and package
// idempotency skips the store then too.
func (g *Gate) Skipping() bool { return g.skipping() }

// failStore opens the skip window for SkipFor from now.
func (g *Gate) failStore() {
	if g.SkipFor > 0 {
		g.window().fail(g.now().Add(g.SkipFor))
	}
}
