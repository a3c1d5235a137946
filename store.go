package capgate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/capgate/capgate/repeat"
	"github.com/capgate/capgate/settings"
	"github.com/capgate/capgate/tune"
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

// Waitlist is the optional part of a LaneStore that lets an enforced call
// which finds a lane full wait for a slot, fairly, instead of being refused
// at once. The gate finds it by a type assertion; a store without it means
// "refuse at once". Every method is safe for concurrent use, and every
// error is a store failure (the gate fails open).
//
// A ticket is a waiting call: its lease token, lanes, per-lane limits
// (those in force: each Pump brings the ticket's up to date) and seats, its
// user, an expiry and the instance to wake. The waitlist of one key
// prefix is shared by every gateway on the store.
//
// Seats: a ticket takes Ticket.Seats in each of its lanes, all or nothing,
// as AcquireRequest.Seats (one each by default); a lane's count is in seats
// (LaneStore), and the ticket fits a lane when count + seats <= limit.
//
// Lending: a ticket's limit in a lane that lends it (Ticket.Borrow) is,
// wherever the waitlist judges it (Join's fast path, the grant pass, a call
// Join turns away, Next), its limit there + Borrow.Borrowable(the class
// key's count as the store has it at that point: in the pass, with the
// seats granted earlier in the pass to tickets holding the class key as
// a lane), except that a lane lends nothing while any ticket waits on its
// class key: the seats a waiting call of the class could use go to it
// first, even to a later one in fair order. "Limit" below means that
// limit.
//
// Tickets are served in start-time fair order, fair in seats: a ticket's
// cost is its largest seats value (at least 1). The list keeps a virtual
// time V (the start tag of the newest ticket granted) and, per user, the
// finish tag F of the user's newest ticket; a new ticket gets S = max(V +
// k, F), where k is how many seats the user holds now in its own lane
// (Ticket.UserLane; 0 without one), and F becomes S + cost. Tickets are
// ordered by (S, arrival): round-robin across users, FIFO within a user, a
// user who arrives joins the current round, calls a user took at once,
// before anyone waited, count as its turns, and a user of big calls gets
// the same share of seats as a user of small ones, not more by sending
// fewer bigger calls. A user whose last ticket leaves or expires unserved
// loses its F.
//
// The grant pass, which runs atomically inside Join, ReleaseWait and Pump,
// drops expired tickets and walks the rest in fair order, counting
// each lane as it goes (the counts include the grants made earlier in the
// pass); a ticket whose every lane has room for its seats is granted: its
// seats become leases in every lane, expiring after Ticket.Claim (the
// waiter renews them to the full lease when it picks the grant up, so a
// grant to a dead gateway frees quickly), it leaves the list, and its
// instance is woken. A ticket that doesn't fit is skipped, so a ticket held
// back by its own user lane does not hold up the others.
//
// Seats set aside: so that a call of many seats is not starved by calls of
// one seat taking each seat as it frees, the first ticket of a pass, in
// fair order, that is blocked only by seat shortfalls sets the free seats
// of those lanes aside for itself. A lane is a seat shortfall for a ticket
// when the ticket does not fit there, needs more than one seat there, the
// lane has room for a call of one seat (count < limit), the ticket's seats
// there are at most its limit, and it is not the ticket's own user lane
// (a borrower's limit, and so its room, includes what it may borrow at
// that moment: it may set aside a seat it could only borrow, which holds
// only while no call of the class waits, since one that queues stops the
// lending, and that seat's setting aside, from its pass on);
// the ticket is blocked only by seat shortfalls when every lane it does not
// fit is one, and it fits the others. It then sets aside, in each such
// lane, limit − count seats (as the pass has them), and the tickets after
// it in that pass see those lanes' free seats reduced by what is set
// aside. Nothing is kept between passes: each pass sets aside afresh, for
// one ticket at a time (the earliest), only where it is short of seats, so
// the ticket holds seats for as long as it waits (bounded by the wait's
// max_seconds) and an expired, dropped or departed ticket holds nothing
// from the next pass on. A ticket blocked by a lane with no room for any
// call, or by its own user lane, sets nothing aside. A call Join turns
// away from a full list takes nothing set aside either. With one seat
// per call nothing is ever set aside.
//
// Fair work (Ticket.Fair settings.FairTime or FairUsage): a ticket's cost
// is not its seats but the work its call does, known only when the call
// ends.
// Each user has a counter F of the work charged to it (in the units of
// Charge.Cost: seat-milliseconds held, or reported usage). A ticket gets
// S = F + P, where P is the provisional charge of the user's calls running
// now: for FairTime, each one's seats × milliseconds held so far beyond
// its estimate (below), for FairUsage nothing beyond it; a user newly
// active (no ticket of it waits and no call of it runs) gets max(V, F + P)
// instead, lifted to the round as VTC lifts a newly backlogged client to
// the smallest counter, so idle time earns no credit; one whose calls run
// or wait keeps its counter's credit however V leapt meanwhile. F then
// becomes S + E, where the estimate E is the cost of the user's last call
// charged (or, for a user with none, the last call anyone was charged for;
// 1 before any). A call taken by a fair-work ticket or by Join's fast path
// under one is recorded as running (its user, seats, start and estimate,
// 0 on the fast path, which also lifts a newly active user's F to V) until
// its ReleaseWait, which charges F += Charge.Cost − E (only for a call so
// recorded), or until its lease is gone (expired unrenewed: a dead
// gateway's call; found at its user's next join, when the list empties, or
// at a release that finds it empty), when its record is dropped without a
// charge beyond E; RunMaxAge at most. A ticket that leaves unserved gives its
// E back, and its user keeps F. The counters outlive the list's last
// ticket while a call granted from it runs, and start over with the list
// otherwise. Two users waiting all along get service within a bound of
// each other (docs/ARCHITECTURE.md states it).
type Waitlist interface {
	// Watch registers interest in wake-ups for token, which must come
	// before Join so none is missed. The channel gets a value (it never
	// blocks the sender; values coalesce) when the ticket may have been
	// granted or must be checked again (Pump); stop unregisters. An error
	// means wake-ups can't be delivered (the caller fails open).
	Watch(ctx context.Context, prefix, token string) (wake <-chan struct{}, stop func(), err error)

	// Join is atomic. When no ticket waits on any of t's lanes it behaves
	// exactly as Acquire without Force (counts, seats, borrowing, the same
	// result; but a lane lends nothing while a ticket waits on its class
	// key: see Lending above); else
	// it queues t behind them and runs the grant pass, so a new arrival
	// never overtakes a waiting ticket. counts get the lanes' counts
	// before the call. A ticket past t.MaxPerUser for its user is not
	// queued (Queued and Taken false). When t.MaxWaiting tickets wait in
	// all, room is made by the longest-queue drop: while the user holding
	// the most tickets holds more than t's user + 1, that user's newest
	// ticket leaves the list, its waiter is woken, and its next Pump
	// reports Dropped; when no ticket can be dropped, t is not queued.
	// Finding the expired tickets and the longest queue costs the store
	// O(log n) in the tickets waiting (plus those dropped); the grant pass
	// stops at once while the lane every ticket shares is full (counting
	// the seats set aside) even for the largest limit any ticket has had
	// there, with all that lane could lend it (its Lend), and otherwise
	// walks the tickets in fair order until it is.
	// Run after t.NotAfter, it does nothing and returns an error wrapping
	// ErrLateAcquire.
	Join(ctx context.Context, t Ticket, counts []int) (JoinResult, error)

	// Pump renews t's ticket to expire t.TicketLease from now and, when
	// t.NewLimits is set, makes t.Limits its limits (if it is still
	// queued), then runs the grant pass; it tells where t stands, as Join
	// does. A ticket is judged by the limits of its Join or of its latest
	// Pump with NewLimits: the waiter sends the limits in force when they
	// change, so a raised limit lets it in at this pass and a lowered one
	// holds it back from now on; a Pump without NewLimits need not read
	// the ticket (Redis: it renews it from the expiry index alone). Waiters call it when a blocking
	// lease expires (nobody releases a dead gateway's leases), every so
	// often while they wait, and at once when their limits change.
	Pump(ctx context.Context, t Ticket) (JoinResult, error)

	// Leave removes t's ticket. granted reports that the ticket had been
	// granted meanwhile (its token holds a lease in its lanes, and so do
	// its other seats): the caller then uses the grant or releases it.
	Leave(ctx context.Context, t Ticket) (granted bool, err error)

	// ReleaseWait is Release (every seat of the call) followed, when
	// tickets wait under prefix, by the grant pass, in one atomic step: a
	// freed seat is handed over inside the store. It also charges c (see
	// Fair work below) before the pass, so the pass already orders the
	// user's tickets by it; a zero Charge charges nothing.
	ReleaseWait(ctx context.Context, prefix, token string, keys []string, c Charge) error

	// Waiting fills counts (len(keys)) with the number of tickets waiting
	// on each lane key under prefix.
	Waiting(ctx context.Context, prefix string, keys []string, counts []int) error
}

// Ticket is one waiting call.
type Ticket struct {
	Prefix    string    // the gate's key prefix: the store keeps the waitlist under <Prefix>:wait
	NotAfter  time.Time // Join takes and queues nothing if the store runs it later (as AcquireRequest.NotAfter)
	Token     string    // the call's lease token
	Keys      []string  // the call's lane keys, in lane order
	Limits    []int     // each lane's limit for this call, as in force now; each at least 1 (paused lanes never wait)
	NewLimits bool      // Pump only: Limits changed since the Join or the last Pump that sent them, and replace the ticket's
	UserID    string    // whose ticket, for fair order and MaxPerUser
	// UserLane is 1 + the index in Keys of the caller's own lane (the
	// lane keyed by the user), whose count gives the user's head start in
	// fair order; 0: the call has none, and starts at the list's round.
	UserLane    int
	Lease       time.Duration // the call's lease when Join takes it at once (as AcquireRequest.Lease)
	TicketLease time.Duration // the ticket expires this long after Join or Pump
	Claim       time.Duration // a grant's leases expire this long after the grant
	MaxWaiting  int           // tickets queued at once under Prefix, at most
	MaxPerUser  int           // tickets of one user queued at once, at most
	// Seats are the seats the call takes in each lane, as
	// AcquireRequest.Seats (len(Keys), each 1 to MaxSeats; nil or empty:
	// 1 in each); a Pump sends the Join's. A ticket whose seats in a lane
	// exceed its limit there is never granted (and sets nothing aside):
	// like a call on a paused lane, the gate should refuse it instead.
	Seats []int
	// Borrow is as AcquireRequest.Borrow (a Pump sends the Join's; Join
	// reports the class keys' counts as Acquire does), with one more
	// rule: while any ticket waits on a lane's Borrow.Key (a call of the
	// class waits), nothing is lent there, so seats the class's calls
	// wait for go to them first (see Lending in Waitlist). A lane whose
	// limit for the ticket is 0 may wait when it lends (Lend ≥ 1): the
	// ticket then runs on borrowed seats only. The ticket keeps the
	// Borrow of its Join; a ticket without (nil, or every Key "") is
	// stored and judged as before lending.
	Borrow []Borrow
	// Fair is what the ticket's turn costs its user (fairness.by):
	// settings.FairCalls, or "" (the zero value), its seats at the join;
	// settings.FairTime and FairUsage the work its call does, charged
	// when it ends (see Fair work in Waitlist). A Pump sends the Join's.
	Fair settings.FairBy
}

// fairBy returns the fairness a gate's tickets carry under a fairness.by
// setting: calls or usage as set, else time (the default, also for a
// config made without the setting).
func fairBy(by settings.FairBy) settings.FairBy {
	if by == settings.FairCalls || by == settings.FairUsage {
		return by
	}
	return settings.FairTime
}

// Charge is what a call that ended cost its user in the fair order
// (ReleaseWait): Cost in the units of the ticket's Fair (seat-ms held, or
// reported usage). A zero User, or a negative Cost, charges nothing.
type Charge struct {
	User string
	Cost int64
}

// RunMaxAge is the longest a waitlist counts a running call's provisional
// charge (Fair work in Waitlist) without hearing of its end: a backstop, as
// a call whose lease is gone (its gateway died) stops counting sooner.
const RunMaxAge = 10 * time.Minute

// Validate reports whether a Waitlist can run t (Join, Pump): a token, at
// least one key, a limit of at least 1 per key (a ticket on a paused lane
// could never be granted: the gate refuses such a call instead) or 0
// where the lane lends, a lease, ticket lease and claim of at least 1ms
// each, Seats empty or one of 1 to MaxSeats per key, and Borrow valid
// (see Borrow). Every Waitlist runs
// it (or ValidateJoin) first and does nothing with a ticket it refuses, so
// all stores refuse the same tickets.
func (t Ticket) Validate() error {
	if t.Token == "" {
		return errors.New("no lease token")
	}
	if len(t.Keys) == 0 || len(t.Limits) < len(t.Keys) {
		return fmt.Errorf("%d keys, %d limits: want at least one key, and a limit for each", len(t.Keys), len(t.Limits))
	}
	if t.UserLane < 0 || t.UserLane > len(t.Keys) {
		return fmt.Errorf("user lane %d of %d keys: want 0 (none) or 1 + a key's index", t.UserLane, len(t.Keys))
	}
	if err := validBorrow(t.Borrow, t.Keys); err != nil {
		return err
	}
	for i, l := range t.Limits[:len(t.Keys)] {
		lends := len(t.Borrow) > 0 && t.Borrow[i].Key != ""
		if l < 1 && !(l == 0 && lends) {
			return fmt.Errorf("limit %d of lane %s: want at least 1, or 0 where it lends (a paused lane never waits)", l, t.Keys[i])
		}
	}
	if t.Lease < time.Millisecond || t.TicketLease < time.Millisecond || t.Claim < time.Millisecond {
		return errBadLease
	}
	return validSeats(t.Seats, t.Keys)
}

// ValidateJoin is Validate for Join, which also needs counts to have room
// for a count per key and per Borrow key (Join reports them as Acquire).
func (t Ticket) ValidateJoin(counts []int) error {
	if err := t.Validate(); err != nil {
		return err
	}
	if len(counts) < len(t.Keys)+borrowKeys(t.Borrow) {
		return fmt.Errorf("%d keys, %d borrow keys, room for %d counts", len(t.Keys), borrowKeys(t.Borrow), len(counts))
	}
	return nil
}

// JoinResult tells where a call stands on the waitlist.
type JoinResult struct {
	// Taken: the call holds a lease in every lane, by the fast path
	// (expiring after Ticket.Lease) or by a grant (expiring after
	// Claim; renew it to pick the grant up).
	Taken bool
	// Queued: the ticket waits.
	Queued bool
	// Dropped: the ticket was taken off a full list to make room for a
	// user holding fewer (the newest ticket of the user holding the most
	// is dropped): its call is refused.
	Dropped bool
	// Next is how long until the earliest lease of a lane that blocks
	// the ticket expires (then Pump); 0 when unknown.
	Next time.Duration
	// Waiting is how many tickets wait under the prefix, as Pump found
	// them (0 from Join: unknown). Waiters space their pumps by it.
	Waiting int
}

// Limits of the waiting, set by the gate.
const (
	// waitTicketLease is how long a ticket lives unless the waiter pumps
	// it: a dead gateway's tickets vanish this long after it died.
	waitTicketLease = 6 * time.Second
	// waitPumpEvery is how often a waiter renews its ticket (running the
	// grant pass as it does); wake-ups make most waits far shorter. It
	// also bounds how late a waiter learns of a grant whose wake-up was
	// lost.
	waitPumpEvery = 2 * time.Second
	// waitPumpRate is the pumps a second that the waiters of one list
	// aim at together once it is long (pumpEvery): at the ~70 µs of
	// Redis time a pump took on a loaded 2-core machine, under 3 % of a
	// core (docs/BENCHMARKS.md).
	waitPumpRate = 400
	// waitPumpMax bounds the pump interval; a ticket then lives 2 × that
	// + waitPumpEvery unless pumped (one lost pump is forgiven), so a dead
	// gateway's tickets vanish within about a minute even on the longest
	// list.
	waitPumpMax = 25 * time.Second
	// waitLimitsEvery is how often a waiting call reads the limits in
	// force (in process: no store call). A change is sent to the store at
	// once, by a pump: from then on the ticket is judged by the new limits.
	waitLimitsEvery = 250 * time.Millisecond
	// waitClaim is how long a grant's leases live before the waiter picks
	// the grant up: a grant to a dead gateway frees after this. It
	// exceeds waitPumpEvery, so a waiter on a short list whose wake-up was
	// lost still finds its grant at its next pump (on a long list, whose
	// waiters pump less often, such a waiter finds its ticket gone and
	// falls back to the degraded local limits).
	waitClaim = 3 * time.Second
)
