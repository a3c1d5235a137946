// Package memory is the in-process lane store: the leases of one gateway,
// kept in a map. It is the embedded default; with more than one gateway the
// lanes must live in Redis (package redis), since each process counts only
// its own calls.
package memory

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/capgate/capgate"
)

// maxSpare bounds how many emptied lanes the store keeps for reuse, so that
// a lane that empties and fills again (the usual life of a lane) costs no
// allocation.
const maxSpare = 64

// noTTL is the deadline of a lane that has no TTL; only the test hooks
// create one (Redis does the same for a key made by a bare ZADD).
const noTTL = math.MaxInt64

// Store is an in-process capgate.LaneStore. It has the same semantics as
// the Redis store: a lane is a set of leases (token, expiry), a call of k
// seats holding k of them (token, token#2, …, token#k; see
// capgate.LaneStore), and a lane key lives for its TTL, which an acquire or
// a renew raises to 2×lease and never shortens. Expired leases are dropped
// lazily, when an acquire touches their lane; a lane whose TTL has passed
// is gone; an empty lane is deleted. There is no background goroutine.
//
// Time is measured by the store's own clock, Now, as a duration since the
// store first used it: with the default time.Now that is Go's monotonic
// clock, so a wall-clock jump neither expires nor prolongs a lease. Only the
// not-after guard of Acquire compares wall time, as the gateway means it.
//
// It is also a capgate.Waitlist (wait.go): the waiting tickets of each key
// prefix, with a channel per waiter for wake-ups.
//
// The zero value is ready to use with time.Now. A Store is safe for
// concurrent use; every operation takes one mutex, and an acquire plus a
// release allocate nothing once the lanes exist. Its methods fail only when
// ctx is already done or a request is malformed; they never block on I/O.
type Store struct {
	// Now is the store's clock. Default time.Now. Set it before first use.
	Now func() time.Time

	mu    sync.Mutex
	start time.Time        // the instant times are measured from; requires mu held
	lanes map[string]*lane // requires mu held
	spare []*lane          // emptied lanes kept for reuse; requires mu held

	lists    map[string]*waitlist     // by key prefix; requires mu held
	watchers map[string]chan struct{} // by prefix+token; requires mu held
	fairs    map[string]*fairState    // fair-work state by key prefix (fair.go); requires mu held

	tunes   map[string]*tuneEntry // adaptive limits' state by key (tune/); requires mu held
	dropped map[string]int64      // prefix+token → when the mark lapses: tickets dropped to make room; requires mu held

	repeats     map[string]*repeatEntry // idempotency entries by id (idem.go); requires mu held
	repeatBytes int64                   // the bytes of the answers in repeats; requires mu held
	repeatUsers map[string]*userRepeats // each user's share of repeats (idem.go); requires mu held

	rosters  map[string]*roster      // journal rosters by group (journal.go); requires mu held
	journals map[journalKey]*records // journals by group and incarnation (journal.go); requires mu held
}

var _ capgate.LaneStore = (*Store)(nil)

// lane is one lane key: its leases and its TTL. Times are nanoseconds since
// Store.start.
type lane struct {
	leases  map[string]int64 // token → expiry
	next    int64            // no lease expires before this: a lower bound that tells when pruning can find something
	expires int64            // the key's TTL deadline; noTTL when it has none
	// seated: a call of more than one seat has been put in the lane since
	// it was made, so release and renew look for token#2, …; a lane of
	// 1-seat calls only never does.
	seated bool
}

// Caps implements capgate.LaneStore: the store is a waitlist, keeps
// idempotency entries and adaptive state, and its lanes live in this
// process only ("memory"). It bounds its operations with a deadline of 0:
// they never wait (no I/O), so a gate gives them no deadline of its own.
func (s *Store) Caps() capgate.StoreCaps {
	return capgate.StoreCaps{Waitlist: s, Idempotency: s, Adaptive: s, Bounded: true, Kind: "memory"}
}

// New returns an empty store whose clock is now (nil: time.Now).
func New(now func() time.Time) *Store {
	return &Store{Now: now}
}

// clock returns the store's wall time and its own time in nanoseconds
// since start. Requires s.mu held.
func (s *Store) clock() (time.Time, int64) {
	var t time.Time
	if s.Now != nil {
		t = s.Now()
	} else {
		t = time.Now()
	}
	if s.lanes == nil {
		s.start = t
		s.lanes = make(map[string]*lane)
	}
	return t, int64(t.Sub(s.start))
}

// lane returns key's lane, or nil when there is none or its TTL has passed
// (then the lane is deleted). Requires s.mu held.
func (s *Store) lane(key string, now int64) *lane {
	l := s.lanes[key]
	if l != nil && now >= l.expires {
		s.drop(key, l)
		return nil
	}
	return l
}

// drop deletes key's lane l and keeps it for reuse. Requires s.mu held.
func (s *Store) drop(key string, l *lane) {
	delete(s.lanes, key)
	if len(s.spare) < maxSpare {
		clear(l.leases)
		s.spare = append(s.spare, l)
	}
}

// create makes an empty lane for key with no TTL. Requires s.mu held.
func (s *Store) create(key string) *lane {
	var l *lane
	if n := len(s.spare); n > 0 {
		l = s.spare[n-1]
		s.spare = s.spare[:n-1]
	} else {
		l = &lane{leases: make(map[string]int64, 4)}
	}
	l.next, l.expires, l.seated = noTTL, noTTL, false
	s.lanes[key] = l
	return l
}

// sweepPerAcquire is how many lanes each acquire checks for a TTL that
// has passed, so that lanes nobody touches again (a user who left) don't
// pile up. Map iteration starts at a random place, so every lane is
// checked before long.
const sweepPerAcquire = 2

// sweep deletes up to sweepPerAcquire lanes whose TTL has passed, from a
// random place in the map. Requires s.mu held.
func (s *Store) sweep(now int64) {
	n := 0
	for key, l := range s.lanes {
		if now >= l.expires {
			s.drop(key, l)
		}
		if n++; n == sweepPerAcquire {
			return
		}
	}
}

// prune drops l's leases that expired at or before now, and deletes the
// lane if that empties it. It reports whether the lane still exists.
// Requires s.mu held.
func (s *Store) prune(key string, l *lane, now int64) bool {
	if now >= l.next {
		next := int64(noTTL)
		for tok, exp := range l.leases {
			if exp <= now {
				delete(l.leases, tok)
			} else if exp < next {
				next = exp
			}
		}
		l.next = next
	}
	if len(l.leases) == 0 {
		s.drop(key, l)
		return false
	}
	return true
}

// put sets the expiry in l of token's seats 1 to seats to exp and raises
// l's TTL to ttl. A lane with no TTL gets one, as PEXPIRE gives one to a
// Redis key with none.
func (l *lane) put(token string, seats int, exp, ttl int64) {
	l.leases[token] = exp
	if seats > 1 {
		l.seated = true
		var buf [64]byte
		for j := 2; j <= seats; j++ {
			l.leases[string(seatMember(buf[:0], token, j))] = exp
		}
	}
	if exp < l.next {
		l.next = exp
	}
	if l.expires == noTTL || l.expires < ttl {
		l.expires = ttl
	}
}

// errBadLease is returned for a lease shorter than a millisecond, the
// resolution the Redis store keeps.
var errBadLease = errors.New("the lease must be at least 1ms")

// Acquire implements capgate.LaneStore. It returns an error wrapping
// capgate.ErrLateAcquire when the store's clock is past req.NotAfter, the
// context's error when ctx is done, and an error when req is malformed
// (req.Validate); in each case nothing is taken.
func (s *Store) Acquire(ctx context.Context, req capgate.AcquireRequest, counts []int) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("acquire lanes: %w", err)
	}
	if err := req.Validate(counts); err != nil {
		return false, fmt.Errorf("acquire lanes: %w", err)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	t, now := s.clock()
	if !req.NotAfter.IsZero() && t.After(req.NotAfter) {
		return false, fmt.Errorf("acquire lanes: %w", capgate.ErrLateAcquire)
	}
	return s.acquire(req.Token, req.Keys, req.Limits, req.Seats, req.Borrow, nil, req.Lease, req.Force, counts, now), nil
}

// seat returns seats[i], or 1 when seats is empty (one seat in each lane).
func seat(seats []int, i int) int {
	if len(seats) == 0 {
		return 1
	}
	return seats[i]
}

// acquire is Acquire's atomic step on a valid request: lane i's limit is
// limits[i] plus what it lends the call (borrow, see capgate.Borrow; w is
// the waitlist judging a ticket, nil for Acquire: see waitlist.lends), and
// counts get the class keys' counts after the lanes'. Requires s.mu held.
func (s *Store) acquire(token string, keys []string, limits, seats []int, borrow []capgate.Borrow, w *waitlist, lease time.Duration, force bool, counts []int, now int64) bool {
	var seen [8]*lane // the lanes found, so that most calls look each up once
	full := false
	j := len(keys) // where the next class key's count goes
	for i, key := range keys {
		n := 0
		l := s.lane(key, now)
		if l != nil && s.prune(key, l, now) {
			n = len(l.leases)
		} else {
			l = nil
		}
		if i < len(seen) {
			seen[i] = l
		}
		counts[i] = n
		limit := limits[i]
		if len(borrow) > 0 {
			limit = s.limit(w, limits, borrow, i, counts, &j, now)
		}
		if n+seat(seats, i) > limit {
			full = true
		}
	}
	if full && !force {
		return false
	}

	s.sweep(now)
	exp, ttl := now+int64(lease), now+2*int64(lease)
	for i, key := range keys {
		var l *lane
		if i < len(seen) {
			l = seen[i]
		}
		if l == nil {
			// Absent, or a duplicate key created earlier in this loop.
			if l = s.lanes[key]; l == nil {
				l = s.create(key)
			}
		}
		l.put(token, seat(seats, i), exp, ttl)
	}
	return true
}

// limit returns lane i's limit for a call of limits and borrow: limits[i],
// plus what the lane lends the call when it lends (w.lends), whose class
// key's count (expired seats dropped) goes to counts[*j], j then moving on.
// The call takes nothing in the class key. Requires s.mu held.
func (s *Store) limit(w *waitlist, limits []int, borrow []capgate.Borrow, i int, counts []int, j *int, now int64) int {
	if len(borrow) == 0 || borrow[i].Key == "" {
		return limits[i]
	}
	c := s.count(borrow[i].Key, now)
	counts[*j] = c
	*j++
	return satAdd(limits[i], w.lends(borrow[i], c))
}

// satAdd returns a + b for b ≥ 0, saturating at math.MaxInt: a lane's
// limit plus what it lends may be any int (a limit of MaxInt is no limit,
// never a wrapped negative one, which would be full).
func satAdd(a, b int) int {
	if a > math.MaxInt-b {
		return math.MaxInt
	}
	return a + b
}

// Renew implements capgate.LaneStore. It fails only when ctx is done or
// the lease is under 1ms.
func (s *Store) Renew(ctx context.Context, token string, keys []string, lease time.Duration) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("renew leases: %w", err)
	}
	if lease < time.Millisecond {
		return 0, fmt.Errorf("renew leases: %w", errBadLease)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	_, now := s.clock()
	held := 0
	for _, key := range keys {
		if l := s.lane(key, now); l != nil {
			if exp, ok := l.leases[token]; ok && exp > now {
				held++
			}
		}
	}
	if held < len(keys) {
		return held, nil
	}
	exp, ttl := now+int64(lease), now+2*int64(lease)
	for _, key := range keys {
		l := s.lanes[key]
		l.put(token, 1, exp, ttl)
		// The call's other seats, up to the first missing one; an
		// expired seat is not revived.
		var buf [64]byte
		for j := 2; l.seated; j++ {
			m := seatMember(buf[:0], token, j)
			e, ok := l.leases[string(m)]
			if !ok {
				break
			}
			if e > now {
				l.leases[string(m)] = exp
			}
		}
	}
	return held, nil
}

// seatMember appends the member of token's seat j (j >= 2) to buf:
// token+"#j". Looked up as string(seatMember(…)), it costs no allocation.
func seatMember(buf []byte, token string, j int) []byte {
	buf = append(buf, token...)
	buf = append(buf, '#')
	return strconv.AppendInt(buf, int64(j), 10)
}

// Release implements capgate.LaneStore. It fails only when ctx is done.
func (s *Store) Release(ctx context.Context, token string, keys []string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("release leases: %w", err)
	}

	// No clock: a lane whose TTL has passed is invisible to every other
	// operation, so removing the token from it changes nothing they see.
	s.mu.Lock()
	defer s.mu.Unlock()
	s.release(token, keys)
	return nil
}

// release removes token and the call's other seats (token#2, … up to the
// first missing one) from keys. Requires s.mu held.
func (s *Store) release(token string, keys []string) {
	var buf [64]byte
	for _, key := range keys {
		if l := s.lanes[key]; l != nil {
			delete(l.leases, token)
			for j := 2; l.seated; j++ {
				m := seatMember(buf[:0], token, j)
				if _, ok := l.leases[string(m)]; !ok {
					break
				}
				delete(l.leases, string(m))
			}
			if len(l.leases) == 0 {
				s.drop(key, l)
			}
		}
	}
}

// Count implements capgate.LaneStore: the unexpired leases, in seats. It
// drops nothing. It fails only when ctx is done or counts is shorter than
// keys.
func (s *Store) Count(ctx context.Context, keys []string, counts []int) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("count leases: %w", err)
	}
	if len(counts) < len(keys) {
		return fmt.Errorf("count leases: %d keys, room for %d counts", len(keys), len(counts))
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	_, now := s.clock()
	for i, key := range keys {
		counts[i] = 0
		l := s.lane(key, now)
		if l == nil {
			continue
		}
		if now < l.next {
			counts[i] = len(l.leases)
			continue
		}
		for _, exp := range l.leases {
			if exp > now {
				counts[i]++
			}
		}
	}
	return nil
}

// Keys implements capgate.LaneStore. It fails only when ctx is done.
func (s *Store) Keys(ctx context.Context, prefix string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list lane keys: %w", err)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	_, now := s.clock()
	var keys []string
	for key, l := range s.lanes {
		if now >= l.expires {
			s.drop(key, l)
			continue
		}
		if strings.HasPrefix(key, prefix) {
			keys = append(keys, key)
		}
	}
	sort.Strings(keys)
	return keys, nil
}

// Ping implements capgate.LaneStore: the store always answers, unless ctx
// is done.
func (s *Store) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	return nil
}
