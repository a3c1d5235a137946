package capgate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/capgate/capgate/settings"
)

// LaneStore keeps the leases of the lanes. A lane is a set of leases, each a
// token with an expiry measured by the store's own clock, so gateway clocks
// don't matter. Every method is safe for concurrent use. Any error returned
// is a store failure: the gate fails open and skips the store for a while.
//
// A store may also offer optional parts, which it declares in one set
// (Caps, StoreCaps): Waitlist (enforced calls wait for a slot instead of
// being refused), repeat.Store (the entries of idempotent calls),
// tune.Store (the adaptive limits' state), its own
// operation deadline, where the lanes live (for status) and the prefix
// its keys must have. A store that wraps another forwards the set of the
// one it wraps, so wrapping hides nothing. memory.Store offers all but a
// key prefix, redis.Store all of them.
type LaneStore interface {
	// Acquire is atomic across req.Keys: it drops leases that have expired,
	// counts the rest into counts (len(req.Keys); the count before this
	// call), and a lane is full for the call when its count + the call's
	// seats there (req.Seats) > its limit. If req.Force is set or no lane
	// is full, it takes the call's seats in every lane with expiry
	// now+req.Lease and raises each lane's TTL to 2×req.Lease, never
	// shortening it, and reports taken = true; else it takes nothing.
	//
	// Seats: a call holding k seats in a lane is k members with the same
	// expiry, req.Token and req.Token+"#2", …, req.Token+"#k", so a lane's
	// count is the seats its unexpired leases hold (with one seat per call,
	// as by default, the number of leases) and a one-seat call is the
	// single member req.Token.
	//
	// Lending (req.Borrow): in a lane whose Borrow.Key is set, the store
	// also drops the class key's expired members and counts it (c), and
	// the lane's limit for the call is its limit + Borrow.Borrowable(c);
	// after the lanes' counts, counts gets each such c, in lane order. The
	// call takes nothing in a class key, nor touches its TTL. A request
	// whose Borrow is nil or all Key "" is exactly one without.
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
	// every one of keys (its member token; held counts those keys) does it
	// set every seat of the call there (token, token#2, … up to the first
	// missing one) to now+lease (TTL rule as in Acquire). It returns how
	// many keys held the token unexpired; fewer than len(keys) means the
	// call lost its lease, and nothing was renewed. An expired lease or
	// seat is never revived, a missing one never added, and a deleted key
	// never re-created.
	Renew(ctx context.Context, token string, keys []string, lease time.Duration) (held int, err error)

	// Release removes token and every other seat of the call (token#2, …
	// up to the first missing one) from every one of keys.
	Release(ctx context.Context, token string, keys []string) error

	// Count fills counts (len(keys)) with the number of unexpired leases
	// in each key, in seats (a member per seat).
	Count(ctx context.Context, keys []string, counts []int) error

	// Keys returns the lane keys that start with prefix, sorted. The Redis
	// store uses SCAN, never KEYS.
	Keys(ctx context.Context, prefix string) ([]string, error)

	// Ping reports whether the store answers.
	Ping(ctx context.Context) error

	// Caps declares the store's optional parts (StoreCaps). It must be
	// cheap: the gate reads it on each call.
	Caps() StoreCaps
}

// AcquireRequest is one call's acquire across its lanes.
type AcquireRequest struct {
	Token    string        // the call's lease token: 32 lowercase hex characters
	Keys     []string      // the lane keys, in lane order
	Limits   []int         // the limit of each lane, in seats; 0 means paused (always full)
	Lease    time.Duration // how long a lease lives unless renewed
	Force    bool          // take the lease even when a lane is full (not enforced)
	NotAfter time.Time     // take nothing if the store runs the acquire later than this; zero: no guard
	// Seats are the seats the call takes in each lane (len(Keys), each 1
	// to MaxSeats), all or nothing; nil or empty: 1 in each.
	Seats []int
	// Borrow, nil or one per key, lets the call borrow seats a lane
	// reserves for a class of calls it is not of, while the class leaves
	// them idle: lane i's limit for the call is Limits[i] +
	// Borrow[i].Borrowable(the seats held in Borrow[i].Key). After the
	// lanes' counts, counts gets the count of each Borrow key that is not
	// "", in lane order (so it needs room for those too): the caller
	// works out from them the limit the store applied.
	Borrow []Borrow
}

// Borrow describes a lane that lends a call seats of its reserve.
type Borrow struct {
	// Key is the lane's class key: the seats the reserve's class holds in
	// the lane (each call of the class takes its seats there too, as one
	// of its keys). "": the lane lends this call nothing.
	Key string
	// Reserve is the seats the lane keeps for the class (at least 1), and
	// Lend how many of them the lane's other calls may borrow while the
	// class leaves them idle (1 to Reserve).
	Reserve, Lend int
}

// Borrowable returns the seats a call may borrow when the class holds
// class seats in the lane: the reserve's idle seats, up to Lend. The
// class's calls count against its reserve first.
func (b Borrow) Borrowable(class int) int {
	if b.Key == "" {
		return 0
	}
	return min(b.Lend, max(b.Reserve-class, 0))
}

// borrowKeys returns how many of borrow's keys are set: the counts a store
// reports after the lanes'.
func borrowKeys(borrow []Borrow) int {
	n := 0
	for _, b := range borrow {
		if b.Key != "" {
			n++
		}
	}
	return n
}

// validBorrow reports whether borrow is none, or one per key of keys, each
// either "" or a key that is none of keys with a reserve of at least 1 and
// a Lend of 1 to the reserve.
func validBorrow(borrow []Borrow, keys []string) error {
	if len(borrow) == 0 {
		return nil
	}
	if len(borrow) != len(keys) {
		return fmt.Errorf("%d borrow entries for %d keys: want none or one per key", len(borrow), len(keys))
	}
	for i, b := range borrow {
		if b.Key == "" {
			continue
		}
		if slices.Contains(keys, b.Key) {
			return fmt.Errorf("lane %s borrows from %s, one of the call's own keys", keys[i], b.Key)
		}
		if b.Reserve < 1 || b.Lend < 1 || b.Lend > b.Reserve {
			return fmt.Errorf("lane %s: reserve %d, lend %d: want a reserve of at least 1 and 1 to reserve lent", keys[i], b.Reserve, b.Lend)
		}
	}
	return nil
}

// errBadLease is the error for a lease shorter than a millisecond, the
// resolution of the stores' expiry times.
var errBadLease = errors.New("the lease must be at least 1ms")

// Validate reports whether a store can run r with counts as the buffer of
// the lanes' counts: a token, at least one key, a limit per key, room for
// a count per key and per Borrow key, a lease of at least 1ms, Seats
// empty or one of 1 to MaxSeats per key, and Borrow valid (see Borrow). Every
// LaneStore runs it first and takes nothing for a request it refuses, so
// all stores refuse the same requests.
func (r AcquireRequest) Validate(counts []int) error {
	if r.Token == "" {
		return errors.New("no lease token")
	}
	if len(r.Keys) == 0 || len(r.Limits) < len(r.Keys) || len(counts) < len(r.Keys)+borrowKeys(r.Borrow) {
		return fmt.Errorf("%d keys, %d limits, %d borrow keys, room for %d counts: want at least one key, a limit and a count for each, and a count for each borrow key",
			len(r.Keys), len(r.Limits), borrowKeys(r.Borrow), len(counts))
	}
	if r.Lease < time.Millisecond {
		return errBadLease
	}
	if err := validSeats(r.Seats, r.Keys); err != nil {
		return err
	}
	return validBorrow(r.Borrow, r.Keys)
}

// MaxSeats is the most seats a call may take in one lane
// (AcquireRequest.Seats, Ticket.Seats): the largest limit a config gives a
// lane (settings.MaxNumber). A store takes each seat as a member of the
// lane, so the bound keeps one acquire's work bounded, and a count plus a
// call's seats never overflows; the gate caps a call's seats at it.
const MaxSeats = settings.MaxNumber

// validSeats reports whether seats are none (1 in each lane) or 1 to
// MaxSeats for each of keys.
func validSeats(seats []int, keys []string) error {
	if len(seats) == 0 {
		return nil
	}
	if len(seats) != len(keys) {
		return fmt.Errorf("%d seats for %d keys: want none (1 each) or one per key", len(seats), len(keys))
	}
	for i, n := range seats {
		if n < 1 || n > MaxSeats {
			return fmt.Errorf("%d seats in lane %s: want 1 to %d", n, keys[i], MaxSeats)
		}
	}
	return nil
}

// Sink takes the JSON log lines of gated calls and config changes. Emit
// must never block; line is a compact JSON object, which the sink may extend
// (log_dropped). An error means the line was not accepted.
type Sink interface {
	Emit(line []byte) error
}
