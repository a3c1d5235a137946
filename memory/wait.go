package memory

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/settings"
)

var _ capgate.Waitlist = (*Store)(nil)

// waitlist is the tickets waiting under one key prefix, in fair order
// (see capgate.Waitlist).
type waitlist struct {
	v       int64            // virtual time: the start tag of the newest grant
	fin     map[string]int64 // user → finish tag of the user's newest ticket
	seq     int64            // arrivals so far
	tickets []*ticket        // by (start, seq)
	byToken map[string]*ticket
	perUser map[string]int
	perKey  map[string]int // lane key → tickets waiting on it
	// first is the first lane of every ticket ("" once two differ), and
	// firstMax the largest limit any ticket has had on it (at its Join or
	// a Pump), with all it could borrow there (ticket.most): once that
	// lane is full even for firstMax, no ticket can be granted. Neither
	// shrinks as tickets leave or limits fall (the early stop stays safe,
	// only less early).
	first    string
	mixed    bool
	firstMax int
}

// ticket is one waiting call. Times are nanoseconds since Store.start.
type ticket struct {
	token, user string
	keys        []string
	limits      []int
	seats       []int            // per lane; nil: 1 each
	borrow      []capgate.Borrow // per lane; nil when it borrows nowhere
	userLane    int              // 1 + the index in keys of the user's own lane; 0: none
	start, seq  int64
	exp, claim  int64
	fair        settings.FairBy // how its turn is charged (fairOf)
	est         int64           // fair work: the estimate charged at its join
	cost        int             // its largest seats value
}

func (w *waitlist) before(a, b *ticket) bool {
	return a.start < b.start || a.start == b.start && a.seq < b.seq
}

// lends returns the seats b lends a call when its class holds class seats
// in the lane: b.Borrowable(class), but none while a ticket of w waits on
// b.Key (a call of the class waits: the seats go to it first). w may be
// nil: nobody waits (Acquire, which has no waitlist).
func (w *waitlist) lends(b capgate.Borrow, class int) int {
	if b.Key == "" || w != nil && w.perKey[b.Key] > 0 {
		return 0
	}
	return b.Borrowable(class)
}

// most returns the largest limit t can have in its first lane: its limit
// there, plus all the lane may lend it (firstMax).
func (t *ticket) most() int {
	if t.borrow == nil || t.borrow[0].Key == "" {
		return t.limits[0]
	}
	return satAdd(t.limits[0], t.borrow[0].Lend)
}

// list returns prefix's waitlist, making it if make is set; nil when there
// is none. Requires s.mu held.
func (s *Store) list(prefix string, create bool) *waitlist {
	w := s.lists[prefix]
	if w == nil && create {
		if s.lists == nil {
			s.lists = make(map[string]*waitlist)
		}
		w = &waitlist{fin: map[string]int64{}, byToken: map[string]*ticket{},
			perUser: map[string]int{}, perKey: map[string]int{}}
		s.lists[prefix] = w
	}
	return w
}

// remove takes t off w. A user left with no ticket by one that was not
// granted (it left or expired) loses its finish tag: its next ticket joins
// the current round instead of queueing behind the rounds its abandoned
// tickets had reserved. Requires s.mu held.
func (s *Store) remove(prefix string, w *waitlist, t *ticket, granted bool, now int64) {
	i := slices.Index(w.tickets, t)
	w.tickets = slices.Delete(w.tickets, i, i+1)
	delete(w.byToken, t.token)
	if !granted && t.fair != settings.FairCalls {
		w.fin[t.user] -= t.est // gives back what its join charged
	}
	if w.perUser[t.user]--; w.perUser[t.user] == 0 {
		delete(w.perUser, t.user)
		if !granted && t.fair == settings.FairCalls {
			delete(w.fin, t.user) // (fair work keeps its counter: fairTag)
		}
	}
	for _, k := range t.keys {
		if w.perKey[k]--; w.perKey[k] == 0 {
			delete(w.perKey, k)
		}
	}
	if len(w.tickets) == 0 {
		w.first, w.mixed, w.firstMax = "", false, 0
		if !s.fairKeeps(prefix, now) {
			delete(s.lists, prefix) // fair tags start over
		}
	}
}

// dropExpired removes w's tickets whose expiry has passed. Requires s.mu
// held.
func (s *Store) dropExpired(prefix string, w *waitlist, now int64) {
	for _, t := range slices.Clone(w.tickets) {
		if t.exp <= now {
			s.remove(prefix, w, t, false, now)
		}
	}
}

// count returns key's unexpired leases, pruning it. Requires s.mu held.
func (s *Store) count(key string, now int64) int {
	if l := s.lane(key, now); l != nil && s.prune(key, l, now) {
		return len(l.leases)
	}
	return 0
}

// pass is the grant pass over prefix's waitlist (see capgate.Waitlist).
// It returns the seats set aside in each lane by the ticket that set some
// aside (nil when none did), for a call that takes seats after the pass.
// Requires s.mu held.
func (s *Store) pass(prefix string, now int64) map[string]int {
	w := s.list(prefix, false)
	if w == nil {
		return nil
	}
	counts := map[string]int{}
	var aside map[string]int // lane → seats set aside; requires one ticket to set them
	// held returns k's count in the pass: the seats held there, with those
	// granted earlier in the pass.
	held := func(k string) int {
		n, ok := counts[k]
		if !ok {
			n = s.count(k, now)
			counts[k] = n
		}
		return n
	}
	// used returns k's count in the pass, plus what is set aside there.
	used := func(k string) int {
		return held(k) + aside[k]
	}
	// limit returns t's limit in lane i as the pass has it: its own, plus
	// what the lane lends it now (waitlist.lends: the class's seats as the
	// pass has them; none while a ticket waits on the class key).
	limit := func(t *ticket, i int) int {
		if t.borrow == nil || t.borrow[i].Key == "" {
			return t.limits[i]
		}
		return satAdd(t.limits[i], w.lends(t.borrow[i], held(t.borrow[i].Key)))
	}
	// shut reports that the lane every ticket shares is full for all.
	shut := func() bool {
		if w.mixed || w.first == "" {
			return false
		}
		return used(w.first) >= w.firstMax
	}
	if shut() {
		return nil
	}
	s.dropExpired(prefix, w, now)
	if s.list(prefix, false) == nil {
		return nil
	}
	for _, t := range slices.Clone(w.tickets) {
		fits, short := true, true
		for i, k := range t.keys {
			n, need, lim := used(k), seat(t.seats, i), limit(t, i)
			if n+need <= lim {
				continue
			}
			fits = false
			if need == 1 || n >= lim || need > lim || i+1 == t.userLane {
				short = false // blocked as a call of one seat would be, or by its own lane
			}
		}
		if !fits {
			if short && aside == nil {
				// The first ticket short only of seats keeps what is free
				// where it is short from the tickets after it.
				aside = make(map[string]int, len(t.keys))
				for i, k := range t.keys {
					if n, lim := used(k), limit(t, i); n+seat(t.seats, i) > lim {
						aside[k] = lim - n
					}
				}
				if shut() {
					return aside
				}
			}
			continue
		}
		for i, k := range t.keys {
			counts[k] += seat(t.seats, i)
			l := s.lanes[k]
			if l == nil {
				l = s.create(k)
			}
			l.put(t.token, seat(t.seats, i), now+t.claim, now+2*t.claim)
		}
		w.v = max(w.v, t.start)
		s.fairStart(prefix, t.token, t.keys[0], t.user, t.cost, t.est, t.fair, true, now)
		s.remove(prefix, w, t, true, now)
		s.notify(prefix, t.token)
		if shut() {
			return aside
		}
	}
	return aside
}

// notify wakes token's waiter, if it watches. Requires s.mu held.
func (s *Store) notify(prefix, token string) {
	if ch := s.watchers[prefix+"\x00"+token]; ch != nil {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// next returns how long until the earliest lease expires among t's lanes
// that are full for it (count + its seats > its limit there, with what
// the lane lends it now); 0 when none is. Requires s.mu held.
func (s *Store) next(w *waitlist, t *ticket, now int64) time.Duration {
	soonest := int64(noTTL)
	for i, k := range t.keys {
		limit := t.limits[i]
		if t.borrow != nil && t.borrow[i].Key != "" {
			limit = satAdd(limit, w.lends(t.borrow[i], s.count(t.borrow[i].Key, now)))
		}
		l := s.lane(k, now)
		if l == nil || len(l.leases)+seat(t.seats, i) <= limit {
			continue
		}
		for _, exp := range l.leases {
			soonest = min(soonest, exp)
		}
	}
	if soonest == noTTL {
		return 0
	}
	return time.Duration(max(soonest-now, 1))
}

// holds reports whether token holds an unexpired lease in every key.
// Requires s.mu held.
func (s *Store) holds(token string, keys []string, now int64) bool {
	for _, k := range keys {
		l := s.lane(k, now)
		if l == nil {
			return false
		}
		if exp, ok := l.leases[token]; !ok || exp <= now {
			return false
		}
	}
	return len(keys) > 0
}

// Watch implements capgate.Waitlist. It fails only when ctx is done.
func (s *Store) Watch(ctx context.Context, prefix, token string) (<-chan struct{}, func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("watch waitlist: %w", err)
	}
	ch := make(chan struct{}, 1)
	id := prefix + "\x00" + token
	s.mu.Lock()
	if s.watchers == nil {
		s.watchers = make(map[string]chan struct{})
	}
	s.watchers[id] = ch
	s.mu.Unlock()
	return ch, func() {
		s.mu.Lock()
		if s.watchers[id] == ch {
			delete(s.watchers, id)
		}
		s.mu.Unlock()
	}, nil
}

// Join implements capgate.Waitlist. It fails when ctx is done, when t is
// malformed, and (wrapping capgate.ErrLateAcquire) after t.NotAfter.
func (s *Store) Join(ctx context.Context, t capgate.Ticket, counts []int) (capgate.JoinResult, error) {
	const op = "join waitlist"
	if err := ctx.Err(); err != nil {
		return capgate.JoinResult{}, fmt.Errorf("%s: %w", op, err)
	}
	if err := t.ValidateJoin(counts); err != nil {
		return capgate.JoinResult{}, fmt.Errorf("%s: %w", op, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	wall, now := s.clock()
	if !t.NotAfter.IsZero() && wall.After(t.NotAfter) {
		return capgate.JoinResult{}, fmt.Errorf("%s: %w", op, capgate.ErrLateAcquire)
	}
	w := s.list(t.Prefix, false)
	if w != nil {
		s.dropExpired(t.Prefix, w, now)
		w = s.list(t.Prefix, false)
	}
	keys := t.Keys[:len(t.Keys):len(t.Keys)]
	busy := w != nil && slices.ContainsFunc(keys, func(k string) bool { return w.perKey[k] > 0 })
	fair := fairOf(t.Fair)
	cost := 1
	for _, n := range t.Seats {
		cost = max(cost, n)
	}
	if !busy {
		if s.acquire(t.Token, keys, t.Limits, t.Seats, t.Borrow, w, t.Lease, false, counts, now) {
			s.fairLift(t.Prefix, t.UserID, fair, now)
			s.fairStart(t.Prefix, t.Token, keys[0], t.UserID, cost, 0, fair, false, now)
			return capgate.JoinResult{Taken: true}, nil
		}
	} else {
		j := len(keys)
		for i, k := range keys {
			counts[i] = s.count(k, now)
			s.limit(w, t.Limits, t.Borrow, i, counts, &j, now) // the class keys' counts
		}
	}
	if w != nil && t.MaxWaiting >= 1 && t.MaxPerUser >= 1 && w.perUser[t.UserID] < t.MaxPerUser {
		for len(w.tickets) >= t.MaxWaiting && s.dropLongest(t.Prefix, w, w.perUser[t.UserID], now+2*int64(t.TicketLease), now) {
		}
	}
	if t.MaxWaiting < 1 || t.MaxPerUser < 1 || w != nil && (len(w.tickets) >= t.MaxWaiting || w.perUser[t.UserID] >= t.MaxPerUser) {
		// No room to wait. After a pass (a lease may have expired since
		// the last), a call that fits takes nothing a waiting ticket
		// could use: none that fits is left.
		if busy {
			aside := s.pass(t.Prefix, now)
			w = s.list(t.Prefix, false)
			if s.fitsBeyond(w, t, aside, counts, now) &&
				s.acquire(t.Token, keys, t.Limits, t.Seats, t.Borrow, w, t.Lease, false, counts, now) {
				s.fairLift(t.Prefix, t.UserID, fair, now)
				s.fairStart(t.Prefix, t.Token, keys[0], t.UserID, cost, 0, fair, false, now)
				return capgate.JoinResult{Taken: true}, nil
			}
		}
		return capgate.JoinResult{}, nil
	}
	w = s.list(t.Prefix, true)
	// A user who already holds k seats in its own lane (Ticket.UserLane)
	// joins k rounds on: calls taken at once, before anyone waited, count
	// as the user's turns too. A ticket costs its largest seats value.
	// Fair work: the user's counter, with what its calls running now have
	// cost so far, and the ticket charges an estimate (fair.go).
	held := 0
	if t.UserLane > 0 {
		held = counts[t.UserLane-1]
	}
	start, est := max(w.v+int64(held), w.fin[t.UserID]), int64(cost)
	if fair != settings.FairCalls {
		start = s.fairTag(t.Prefix, w, t.UserID, now)
		est = s.fairEstimate(t.Prefix, t.UserID)
	}
	w.fin[t.UserID] = start + est
	w.seq++
	tk := &ticket{token: t.Token, user: t.UserID, keys: slices.Clone(keys), limits: slices.Clone(t.Limits[:len(keys)]),
		userLane: t.UserLane, start: start, seq: w.seq, exp: now + int64(t.TicketLease), claim: int64(t.Claim),
		fair: fair, est: est, cost: cost}
	if cost > 1 {
		tk.seats = slices.Clone(t.Seats)
	}
	if slices.ContainsFunc(t.Borrow, func(b capgate.Borrow) bool { return b.Key != "" }) {
		tk.borrow = slices.Clone(t.Borrow)
	}
	i, _ := slices.BinarySearchFunc(w.tickets, tk, func(a, b *ticket) int {
		if w.before(a, b) {
			return -1
		}
		return 1
	})
	w.tickets = slices.Insert(w.tickets, i, tk)
	switch {
	case w.first == "" && !w.mixed:
		w.first = keys[0]
	case w.first != keys[0]:
		w.mixed = true
	}
	w.firstMax = max(w.firstMax, tk.most())
	w.byToken[tk.token] = tk
	w.perUser[tk.user]++
	for _, k := range tk.keys {
		w.perKey[k]++
	}
	s.pass(t.Prefix, now)
	return s.where(t, now), nil
}

// fitsBeyond reports whether t's lanes have room for its seats beyond
// what the pass set aside (nil: nothing), with what they lend it (w as
// after the pass), filling counts as acquire does when they don't.
// Requires s.mu held.
func (s *Store) fitsBeyond(w *waitlist, t capgate.Ticket, aside map[string]int, counts []int, now int64) bool {
	if aside == nil {
		return true
	}
	ok := true
	j := len(t.Keys)
	for i, k := range t.Keys {
		counts[i] = s.count(k, now)
		if counts[i]+aside[k]+seat(t.Seats, i) > s.limit(w, t.Limits, t.Borrow, i, counts, &j, now) {
			ok = false
		}
	}
	return ok
}

// where reports t's standing after a pass. Requires s.mu held.
func (s *Store) where(t capgate.Ticket, now int64) capgate.JoinResult {
	if w := s.list(t.Prefix, false); w != nil {
		if tk := w.byToken[t.Token]; tk != nil {
			return capgate.JoinResult{Queued: true, Next: s.next(w, tk, now)}
		}
	}
	if s.takeDropped(t.Prefix, t.Token, now) {
		return capgate.JoinResult{Dropped: true}
	}
	return capgate.JoinResult{Taken: s.holds(t.Token, t.Keys, now)}
}

// dropLongest makes room on w, which is full, for a user holding mine
// tickets: when another user holds more than mine + 1, that user's newest
// ticket is dropped, its waiter woken and marked until until (its next
// Pump reports Dropped), and the user's finish tag goes back to the
// dropped ticket's start tag. It reports whether a ticket was dropped.
// Requires s.mu held.
func (s *Store) dropLongest(prefix string, w *waitlist, mine int, until, now int64) bool {
	top, most := "", 0
	for u, n := range w.perUser {
		if n > most || n == most && u < top {
			top, most = u, n
		}
	}
	if most <= mine+1 {
		return false
	}
	var victim *ticket
	for _, tk := range w.tickets {
		if tk.user == top && (victim == nil || tk.seq > victim.seq) {
			victim = tk
		}
	}
	s.remove(prefix, w, victim, false, now)
	w.fin[top] = victim.start
	if s.dropped == nil {
		s.dropped = make(map[string]int64)
	}
	s.dropped[prefix+"\x00"+victim.token] = until
	s.notify(prefix, victim.token)
	return true
}

// takeDropped reports whether token's ticket was dropped to make room,
// and forgets the mark (and any that lapsed). Requires s.mu held.
func (s *Store) takeDropped(prefix, token string, now int64) bool {
	if len(s.dropped) == 0 {
		return false
	}
	id := prefix + "\x00" + token
	until, ok := s.dropped[id]
	delete(s.dropped, id)
	for k, u := range s.dropped {
		if u <= now {
			delete(s.dropped, k)
		}
	}
	return ok && until > now
}

// Pump implements capgate.Waitlist. It fails when ctx is done or t is
// malformed.
func (s *Store) Pump(ctx context.Context, t capgate.Ticket) (capgate.JoinResult, error) {
	const op = "pump waitlist"
	if err := ctx.Err(); err != nil {
		return capgate.JoinResult{}, fmt.Errorf("%s: %w", op, err)
	}
	if err := t.Validate(); err != nil {
		return capgate.JoinResult{}, fmt.Errorf("%s: %w", op, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, now := s.clock()
	if w := s.list(t.Prefix, false); w != nil {
		if tk := w.byToken[t.Token]; tk != nil && tk.exp > now {
			tk.exp = now + int64(t.TicketLease)
			if t.NewLimits {
				// Judged by the limits in force from now on.
				copy(tk.limits, t.Limits)
				w.firstMax = max(w.firstMax, tk.most())
			}
		}
	}
	s.pass(t.Prefix, now)
	res := s.where(t, now)
	if w := s.list(t.Prefix, false); w != nil {
		res.Waiting = len(w.tickets)
	}
	return res, nil
}

// Leave implements capgate.Waitlist. It fails only when ctx is done.
func (s *Store) Leave(ctx context.Context, t capgate.Ticket) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("leave waitlist: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, now := s.clock()
	if w := s.list(t.Prefix, false); w != nil {
		if tk := w.byToken[t.Token]; tk != nil {
			s.remove(t.Prefix, w, tk, false, now)
			return false, nil
		}
	}
	s.takeDropped(t.Prefix, t.Token, now)
	return s.holds(t.Token, t.Keys, now), nil
}

// ReleaseWait implements capgate.Waitlist. It fails only when ctx is done.
func (s *Store) ReleaseWait(ctx context.Context, prefix, token string, keys []string, c capgate.Charge) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("release leases: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.release(token, keys)
	_, now := s.clock()
	s.fairCharge(prefix, token, c, now)
	if s.lists[prefix] != nil {
		s.pass(prefix, now)
	}
	return nil
}

// Waiting implements capgate.Waitlist. It fails when ctx is done or counts
// is shorter than keys.
func (s *Store) Waiting(ctx context.Context, prefix string, keys []string, counts []int) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("count waiting: %w", err)
	}
	if len(counts) < len(keys) {
		return fmt.Errorf("count waiting: %d keys, room for %d counts", len(keys), len(counts))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, now := s.clock()
	w := s.list(prefix, false)
	if w != nil {
		s.dropExpired(prefix, w, now)
		w = s.list(prefix, false)
	}
	for i, k := range keys {
		counts[i] = 0
		if w != nil {
			counts[i] = w.perKey[k]
		}
	}
	return nil
}
