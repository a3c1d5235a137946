package capgate

import (
	"time"

	"github.com/capgate/capgate/tune"
)

// StoreCaps are what a lane store offers beyond LaneStore, declared in one
// set: each part nil (or zero) when the store lacks it. The gate reads a
// store's set through CapsOf, never by asserting the store's type itself,
// so a store that wraps another (mock.LaneStore, a store that counts or
// injects faults) forwards the set of the store it wraps by declaring it
// (CapableStore) instead of hiding it.
type StoreCaps struct {
	// Waitlist: enforced calls wait for a slot instead of being refused;
	// nil: a full lane refuses at once.
	Waitlist Waitlist
	// Idempotency keeps the entries of idempotent calls (package
	// idempotency); nil: a repeat runs again (idempotency.ErrNoRepeatStore).
	Idempotency IdempotencyStore
	// Adaptive keeps the adaptive limits' state (Gate.RunAdaptive); nil:
	// no lane is adaptive.
	Adaptive tune.Store
	// Deadline bounds each operation, as the store enforces it (Bounded
	// set; 0: its operations never wait, memory). Unbounded: the gate
	// gives each DefaultStoreDeadline.
	Deadline time.Duration
	Bounded  bool
	// Kind says where the lanes live, for status: "memory", "redis",
	// "redis-sentinel", "redis-cluster"; "": unknown.
	Kind string
	// KeyPrefix is the prefix the store's lane keys must have (a Redis
	// Cluster's hash tag); "": the policy's.
	KeyPrefix string
}

// CapableStore is a LaneStore that declares its optional parts itself: a
// wrapper forwards the StoreCaps of the store it wraps.
type CapableStore interface {
	LaneStore
	Caps() StoreCaps
}

// CapsOf returns what store offers: its own declaration (CapableStore),
// else the optional interfaces it implements (Waitlist, IdempotencyStore,
// tune.Store, StoreDeadline, StoreKind, StoreKeyPrefix). A nil store
// offers nothing.
func CapsOf(store LaneStore) StoreCaps {
	if c, ok := store.(CapableStore); ok {
		return c.Caps()
	}
	var c StoreCaps
	if store == nil {
		return c
	}
	c.Waitlist, _ = store.(Waitlist)
	c.Idempotency, _ = store.(IdempotencyStore)
	c.Adaptive, _ = store.(tune.Store)
	if d, ok := store.(StoreDeadline); ok {
		c.Deadline, c.Bounded = d.Deadline(), true
	}
	if k, ok := store.(StoreKind); ok {
		c.Kind = k.Kind()
	}
	if p, ok := store.(StoreKeyPrefix); ok {
		c.KeyPrefix = p.KeyPrefix()
	}
	return c
}
