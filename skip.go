package capgate

import (
	"sync"
	"time"
)

// DefaultSkipDuration is how long the gate skips the store after a store
// error (CAPACITY_REDIS_RETRY_SECONDS). It is shorter than lease − 2×renew
// with the default config, so one error can't cost a long call its lease.
const DefaultSkipDuration = 15 * time.Second

// SkipWindow is the per-process memory that the lane store failed
// recently. It is the one piece of per-process state the spec asks for; the
// gateway makes one and shares it by pointer. Safe for concurrent use.
type SkipWindow struct {
	d   time.Duration
	now func() time.Time

	mu    sync.Mutex
	until time.Time // requires mu held
}

// NewSkipWindow returns a window that lasts d after each failure; now is
// the clock (nil: time.Now).
func NewSkipWindow(d time.Duration, now func() time.Time) *SkipWindow {
	if now == nil {
		now = time.Now
	}
	return &SkipWindow{d: d, now: now}
}

// Fail opens the window: the store is skipped for d from now.
func (w *SkipWindow) Fail() {
	t := w.now().Add(w.d)
	w.mu.Lock()
	if t.After(w.until) {
		w.until = t
	}
	w.mu.Unlock()
}

// Skipping reports whether the store failed within the last d.
func (w *SkipWindow) Skipping() bool {
	now := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	return now.Before(w.until)
}

// Reset closes the window, as if the store had never failed.
func (w *SkipWindow) Reset() {
	w.mu.Lock()
	w.until = time.Time{}
	w.mu.Unlock()
}
