package http

import (
	"net/http"
	"sync/atomic"
)

// DefaultMaxBufferedBytes is the default bound on the request bytes the
// gateway holds for classification across every call in flight
// (--max-buffered-bytes): 256 MiB.
const DefaultMaxBufferedBytes = 256 << 20

// DefaultMaxHeaderBytes is the default bound on one request's header, its
// request line included (--max-header-bytes): 64 KiB. A larger one gets
// 431. The OCL API's own requests carry a few KiB at most.
const DefaultMaxHeaderBytes = 64 << 10

// Budget bounds the bytes buffered for classification across every call
// in flight, and the header bytes of every request the gateway holds, so
// many slow or large bodies or headers can't grow the gateway without
// bound. A nil *Budget is unbounded. Safe for concurrent use.
type Budget struct {
	max  int64
	used atomic.Int64
}

// NewBudget returns a Budget of max bytes (max ≤ 0: DefaultMaxBufferedBytes).
func NewBudget(max int64) *Budget {
	if max <= 0 {
		max = DefaultMaxBufferedBytes
	}
	return &Budget{max: max}
}

// used returns the bytes reserved now (for tests).
func (b *Budget) usedNow() int64 {
	if b == nil {
		return 0
	}
	return b.used.Load()
}

// take reserves n bytes, or reports false and reserves nothing.
func (b *Budget) take(n int64) bool {
	if b == nil {
		return true
	}
	if b.used.Add(n) > b.max {
		b.used.Add(-n)
		return false
	}
	return true
}

// give returns n reserved bytes.
func (b *Budget) give(n int64) {
	if b != nil && n > 0 {
		b.used.Add(-n)
	}
}

// headerBytes estimates the memory r's header holds: the request line and
// every name and value, with a line's framing.
func headerBytes(r *http.Request) int64 {
	n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + len(r.Host) + 4
	for k, vv := range r.Header {
		for _, v := range vv {
			n += len(k) + len(v) + 4
		}
	}
	return int64(n)
}
