package capgate

import (
	"context"
	"log/slog"
	"net/http"
	"time"
)

// DefaultKeyPrefix is the prefix of every lane key; the layout matches the
// original implementation's.
const DefaultKeyPrefix = "ocl:capacity"

// Gate admits heavy calls. Admit decides one call and, unless it is
// refused or the limiter could not count, takes a lease in each of its lanes
// and renews it in the background; Release ends it and writes its log line.
//
// The gate never refuses a call because of its own failure: a store error,
// a bug or a bad input makes the call "unavailable" and lets it go ahead.
// A Gate is safe for concurrent use. Create one with NewGate.
type Gate struct {
	Store  LaneStore    // required
	Config ConfigSource // required
	Sink   Sink         // receives one line per gated call; nil: no lines

	// TaskID names this API task's lane (api_heavy_task:<TaskID>).
	TaskID string
	// KeyPrefix prefixes every lane key. Default DefaultKeyPrefix.
	KeyPrefix string
	// Skip is the per-process window during which the store is not used
	// after it failed. NewGate sets one of DefaultSkipDuration.
	Skip *SkipWindow
	// StoreDeadline is the longest one store operation may take; an acquire
	// the store runs later than now+StoreDeadline+2s takes no lease.
	// Default DefaultStoreDeadline.
	StoreDeadline time.Duration
	// Now is the gateway's clock (for held_ms and not-after). Default time.Now.
	Now func() time.Time
	// Logger gets the gate's own warnings. Default slog.Default().
	Logger *slog.Logger
	// Observer is told about decisions and store failures (metrics).
	// Default: nobody.
	Observer Observer
}

// Admission is one heavy call's passage through the gate, from Admit to
// Release. Its methods are safe for concurrent use.
type Admission struct {
}

// Observer is told what the gate does, for metrics. Its methods must be
// fast and must not block.
type Observer interface {
	// Released is called once per admission, after its log line.
	Released(a *Admission)
	// StoreError is called when a store operation fails.
	StoreError(op string, err error)
	// StoreSkipped is called when an operation skips the store because
	// it failed recently.
	StoreSkipped(op string)
}

// Admit decides call. It returns nil when the mode is off: the call passes
// untouched. Otherwise the caller must call Release when the call ends,
// however it ends.
func (g *Gate) Admit(ctx context.Context, call Call) *Admission {
	return nil // TODO(gate)
}

// Decision returns the admission's decision.
func (a *Admission) Decision() Decision { return DecisionNone }

// Refused reports whether the call must be answered with the 429 and never
// reach the API.
func (a *Admission) Refused() bool { return false }

// SetHeaders sets the capacity headers on h (SPEC §4); Retry-After only on
// a refusal.
func (a *Admission) SetHeaders(h http.Header) {}

// RefusalBody returns the JSON body of the 429.
func (a *Admission) RefusalBody() []byte { return nil }

// Release stops renewing, gives back the leases and writes the log line.
// It is idempotent and never fails; cleanup runs even when ctx is done.
func (a *Admission) Release(ctx context.Context) {}
