package capgate

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// LaneStore keeps the leases of the lanes. A lane is a set of leases, each a
// token with an expiry measured by the store's own clock, so gateway clocks
// don't matter. Every method is safe for concurrent use. Any error returned
// is a store failure: the gate fails open and skips the store for a while.
//
// A store may also implement the optional interfaces the gate looks for by
// a type assertion: Waitlist (enforced calls wait for a slot instead of
// being refused), StoreDeadline (the store bounds its own operations),
// StoreKind (where the lanes live, for status), StoreKeyPrefix (the
// store lays out its own keys) and IdempotencyStore (the entries of
// idempotent calls, idempotency.go). memory.Store implements all but
// StoreKeyPrefix, redis.Store all five.
type LaneStore interface {
	// Acquire is atomic across req.Keys: it drops leases that have expired,
	// counts the rest into counts (len(req.Keys); the count before this
	// call), and a lane is full when its count >= its limit. If req.Force
	// is set or no lane is full, it adds req.Token to every lane with expiry
	// now+req.Lease and raises each lane's TTL to 2×req.Lease, never
	// shortening it, and reports taken = true.
	//
	// If the store runs the acquire after req.NotAfter (non-zero), it takes
	// nothing and returns an error wrapping ErrLateAcquire.
	//
	// ctx bounds the wait before the acquire is sent: a caller that gives
	// up by then gets an error wrapping ctx.Err() and nothing is taken.
	// Once sent, the acquire is awaited to its answer (bounded by the
	// store's own deadline) whatever ctx does, so a lease it took is always
	// reported. A store too busy to send it within its deadline returns an
	// error wrapping ErrBusy and takes nothing.
	Acquire(ctx context.Context, req AcquireRequest, counts []int) (taken bool, err error)

	// Renew is all or nothing: only if token holds an unexpired lease in
	// every one of keys does it set each to now+lease (TTL rule as in
	// Acquire). It returns how many keys held the token unexpired; fewer
	// than len(keys) means the call lost its lease, and nothing was renewed.
	// An expired lease is never revived and a deleted key never re-created.
	Renew(ctx context.Context, token string, keys []string, lease time.Duration) (held int, err error)

	// Release removes token from every one of keys.
	Release(ctx context.Context, token string, keys []string) error

	// Count fills counts (len(keys)) with the number of unexpired leases
	// in each key.
	Count(ctx context.Context, keys []string, counts []int) error

	// Keys returns the lane keys that start with prefix, sorted. The Redis
	// store uses SCAN, never KEYS.
	Keys(ctx context.Context, prefix string) ([]string, error)

	// Ping reports whether the store answers.
	Ping(ctx context.Context) error
}

// StoreDeadline is the optional part of a LaneStore that bounds its own
// operations (redis.Options.Deadline). The store owns that setting, since
// it enforces it; the gate reads it to bound its own waits on the store.
type StoreDeadline interface {
	// Deadline returns the longest one operation takes, 0 for a store
	// whose operations never wait (memory). A store without the method
	// is given DefaultStoreDeadline, and its releases a deadline of the
	// gate's own.
	Deadline() time.Duration
}

// StoreKind is the optional part of a LaneStore that says where the lanes
// live, for status.
type StoreKind interface {
	// Kind returns "memory" (this process only), "redis" or
	// "redis-sentinel". A store without the method is "unknown".
	Kind() string
}

// StoreKeyPrefix is the optional part of a LaneStore that lays out its
// own keys: the Redis store on a Redis Cluster, where a call's keys must
// share one hash slot, gives a hash-tagged prefix. NewGate sets the gate's
// KeyPrefix from it.
type StoreKeyPrefix interface {
	// KeyPrefix returns the prefix the store's lane keys must have.
	KeyPrefix() string
}

// AcquireRequest is one call's acquire across its lanes.
type AcquireRequest struct {
	Token    string        // the call's lease token: 32 lowercase hex characters
	Keys     []string      // the lane keys, in lane order
	Limits   []int         // the limit of each lane; 0 means paused (always full)
	Lease    time.Duration // how long a lease lives unless renewed
	Force    bool          // take the lease even when a lane is full (not enforced)
	NotAfter time.Time     // take nothing if the store runs the acquire later than this; zero: no guard
}

// errBadLease is the error for a lease shorter than a millisecond, the
// resolution of the stores' expiry times.
var errBadLease = errors.New("the lease must be at least 1ms")

// Validate reports whether a store can run r with counts as the buffer of
// the lanes' counts: a token, at least one key, a limit per key, room for
// a count per key, and a lease of at least 1ms. Every LaneStore runs it
// first and takes nothing for a request it refuses, so all stores refuse
// the same requests.
func (r AcquireRequest) Validate(counts []int) error {
	if r.Token == "" {
		return errors.New("no lease token")
	}
	if len(r.Keys) == 0 || len(r.Limits) < len(r.Keys) || len(counts) < len(r.Keys) {
		return fmt.Errorf("%d keys, %d limits, room for %d counts: want at least one key, and a limit and a count for each", len(r.Keys), len(r.Limits), len(counts))
	}
	if r.Lease < time.Millisecond {
		return errBadLease
	}
	return nil
}

// ConfigSource gives the gate the config in force. Config never fails: a
// source that cannot read its store returns its last known config (or the
// defaults) with enforce turned into shadow.
type ConfigSource interface {
	Config(ctx context.Context) Config
}

// Sink takes the JSON log lines of gated calls and config changes. Emit
// must never block; line is a compact JSON object, which the sink may extend
// (log_dropped). An error means the line was not accepted.
type Sink interface {
	Emit(line []byte) error
}
