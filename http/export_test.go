package http

import (
	"context"
	"net/http"
	"time"

	"github.com/capgate/capgate"
)

// What the external tests (package http_test) reach that the package does
// not export.

// WithClock sets the clock queue_ms is measured against.
func WithClock(now func() time.Time) Option { return withClock(now) }

// CheckNow runs every check once and records the results.
func (h *Health) CheckNow(ctx context.Context) { h.checkNow(ctx) }

// Used returns the bytes reserved now.
func (b *Budget) Used() int64 { return b.usedNow() }

// OCLCall returns a call of the OCL policy's route ("match" or "rerank")
// of rows rows, with the $match flags semantic and reranker.
func OCLCall(route string, rows int, semantic, reranker bool) capgate.Call {
	return testCall(route, rows, semantic, reranker)
}

// NormalizeRequest makes r read as the API behind the gateway reads it, as
// the middleware does before HeavyPath.
func NormalizeRequest(r *http.Request) { normalizeRequest(r) }
