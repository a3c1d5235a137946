package capgate

import (
	"time"

	"github.com/capgate/capgate/repeat"
	"github.com/capgate/capgate/tune"
)

// StoreCaps are what a lane store offers beyond the lanes, declared in one
// set by its Caps method: each part nil (or zero) when the store lacks it.
// The gate reads a store's parts only from that set, never by asserting
// the store's type, so a store that wraps another (mock.LaneStore, a store
// that counts or injects faults) forwards the set of the store it wraps,
// or its own where it replaces a part, and wrapping hides nothing.
type StoreCaps struct {
	// Waitlist: enforced calls wait for a slot instead of being refused;
	// nil: a full lane refuses at once.
	Waitlist Waitlist
	// Idempotency keeps the entries of idempotent calls (package
	// idempotency); nil: a repeat runs again (idempotency.ErrNoRepeatStore).
	Idempotency repeat.Store
	// Adaptive keeps the adaptive limits' state (adaptive.Runner); nil:
	// no lane is adaptive.
	Adaptive tune.Store
	// Deadline bounds each operation, as the store enforces it (Bounded
	// set; 0: its operations never wait, memory). The store owns that
	// setting (redis.Options.Deadline), since it enforces it; the gate
	// reads it to bound its own waits on the store. Unbounded: the gate
	// gives each DefaultStoreDeadline, and its releases a deadline of the
	// gate's own.
	Deadline time.Duration
	Bounded  bool
	// Kind says where the lanes live, for status: "memory" (this process
	// only), "redis", "redis-sentinel", "redis-cluster"; "": unknown.
	Kind string
	// KeyPrefix is the prefix the store's lane keys must have: the Redis
	// store on a Redis Cluster, where a call's keys must share one hash
	// slot, gives a hash-tagged one, and NewGate sets the gate's KeyPrefix
	// from it. "": the policy's.
	KeyPrefix string
}

// capsOf returns what store offers (LaneStore.Caps); a nil store, as a
// zero Gate's, offers nothing.
func capsOf(store LaneStore) StoreCaps {
	if store == nil {
		return StoreCaps{}
	}
	return store.Caps()
}
