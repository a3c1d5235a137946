package http

import (
	"context"
	"time"
)

// What the external tests (package http_test) reach that the package does
// not export.

// WithClock sets the clock queue_ms is measured against.
func WithClock(now func() time.Time) Option { return withClock(now) }

// CheckNow runs every check once and records the results.
func (h *Health) CheckNow(ctx context.Context) { h.checkNow(ctx) }

// Used returns the bytes reserved now.
func (b *Budget) Used() int64 { return b.usedNow() }
