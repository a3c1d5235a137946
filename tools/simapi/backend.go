package simapi

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"
)

// BackendPath is where a Backend is read (GET) and changed (POST
// {"capacity": K, "base_ms": B}).
const BackendPath = "/_sim/backend"

// maxBackendSamples bounds the latencies a Backend keeps between two
// reads.
const maxBackendSamples = 1 << 20

// Backend models a shared backend of known capacity behind the semantic
// calls (the kNN search): a semantic call takes Base × max(1, n / Capacity),
// n being the semantic calls in the API when it starts, itself included.
// So the backend serves Capacity calls at once at its no-load time, and
// beyond that every call is slower in proportion: the most it serves is
// Capacity / Base calls a second whatever the concurrency — the ground
// truth of the adaptive limits' benchmark. Safe for concurrent use.
//
// Per row (SetPerRow, or POST {"per_row": true}), a semantic call sends
// its rows to the backend one after another, as a bulk $match does: it
// takes rows × that time, holding one of the backend's places throughout
// (the latencies reported are per row).
type Backend struct {
	mu       sync.Mutex
	perRow   bool            // requires mu held
	capacity int             // requires mu held
	base     time.Duration   // requires mu held
	lat      []time.Duration // latencies given since the last read; requires mu held
}

// NewBackend returns a backend of capacity calls at once, each taking
// base when it is not overloaded.
func NewBackend(capacity int, base time.Duration) *Backend {
	return &Backend{capacity: max(capacity, 1), base: base}
}

// Use makes a's semantic calls take the backend's time; the others keep
// a's latency.
func (b *Backend) Use(a *API) {
	other := a.Latency
	a.Latency = func(endpoint string, rows int, semantic bool) time.Duration {
		if !semantic {
			if other != nil {
				return other(endpoint, rows, semantic)
			}
			return b.Base()
		}
		a.mu.Lock()
		n := a.stats.semantic
		a.mu.Unlock()
		b.mu.Lock()
		perRow := b.perRow
		b.mu.Unlock()
		if perRow {
			return time.Duration(max(rows, 1)) * b.latency(n)
		}
		return b.latency(n)
	}
}

// Base returns the no-load time.
func (b *Backend) Base() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.base
}

func (b *Backend) latency(inFlight int) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	d := time.Duration(float64(b.base) * max(1, float64(inFlight)/float64(b.capacity)))
	if len(b.lat) < maxBackendSamples {
		b.lat = append(b.lat, d)
	}
	return d
}

// SetPerRow sets whether a semantic call takes each of its rows in turn,
// from now on.
func (b *Backend) SetPerRow(on bool) {
	b.mu.Lock()
	b.perRow = on
	b.mu.Unlock()
}

// SetCapacity changes the capacity (at least 1) from now on.
func (b *Backend) SetCapacity(k int) {
	b.mu.Lock()
	b.capacity = max(k, 1)
	b.mu.Unlock()
}

// BackendJSON is the backend's state as GET BackendPath serves it: its
// model, and the latencies it gave since the last read that asked for
// reset=1.
type BackendJSON struct {
	Capacity int     `json:"capacity"`
	BaseMS   float64 `json:"base_ms"`
	PerRow   bool    `json:"per_row"`
	Calls    int     `json:"calls"`
	P50MS    float64 `json:"p50_ms"`
	P99MS    float64 `json:"p99_ms"`
}

// Read returns the state; with reset, the latencies start over.
func (b *Backend) Read(reset bool) BackendJSON {
	b.mu.Lock()
	lat := b.lat
	if reset {
		b.lat = nil
	} else {
		lat = slices.Clone(lat)
	}
	out := BackendJSON{Capacity: b.capacity, BaseMS: ms(b.base), PerRow: b.perRow, Calls: len(lat)}
	b.mu.Unlock()
	slices.Sort(lat)
	if len(lat) > 0 {
		out.P50MS = ms(lat[len(lat)*50/100])
		out.P99MS = ms(lat[min(len(lat)-1, len(lat)*99/100)])
	}
	return out
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Handler serves BackendPath and passes everything else to next.
func (b *Backend) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != BackendPath {
			next.ServeHTTP(w, r)
			return
		}
		switch r.Method {
		case http.MethodGet:
		case http.MethodPost:
			var body struct {
				Capacity *int     `json:"capacity"`
				BaseMS   *float64 `json:"base_ms"`
				PerRow   *bool    `json:"per_row"`
			}
			if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&body); err != nil ||
				(body.Capacity != nil && *body.Capacity < 1) || (body.BaseMS != nil && *body.BaseMS <= 0) {
				http.Error(w, `{"detail":"Send {\"capacity\": K} with K >= 1, and/or {\"base_ms\": B} with B > 0."}`, http.StatusBadRequest)
				return
			}
			b.mu.Lock()
			if body.Capacity != nil {
				b.capacity = *body.Capacity
			}
			if body.BaseMS != nil {
				b.base = time.Duration(*body.BaseMS * float64(time.Millisecond))
			}
			if body.PerRow != nil {
				b.perRow = *body.PerRow
			}
			b.mu.Unlock()
		default:
			w.Header().Set("Allow", "GET, POST")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(b.Read(r.URL.Query().Get("reset") == "1"))
	})
}
