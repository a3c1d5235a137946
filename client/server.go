package client

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// server is the state one Transport keeps for one origin (scheme://host):
// the pauses the server asked for, the in-flight bound per user, and the
// calls waiting to be sent. All of it is guarded by mu; waiters sleep on
// changed, which is closed and replaced whenever something they wait for
// may have changed.
type server struct {
	cap      int                               // Transport.MaxInFlight
	probe    time.Duration                     // Transport.ProbeInterval
	jitter   func(time.Duration) time.Duration // Transport.jitter
	userLane string                            // Transport.UserLane
	tierLane string                            // Transport.TierLane

	mu       sync.Mutex
	seq      uint64
	pauses   map[pauseKey]*pause
	limiters map[string]*limiter // by Call.User
	tiers    map[string]string   // Call.User → the tier the server reported
	waiters  map[*waiter]struct{}
	changed  chan struct{}
	grants   uint64            // calls granted a slot so far
	served   map[string]uint64 // Call.User → grants when the user's last call was granted

	// After a refusal on a lane other users share (any but the caller's
	// own lane), bulk calls resume through a window: no more
	// than window of them in flight, one more allowed for each admitted
	// answer, until it reaches openWindow and is lifted. Without it every
	// held call would go at once when the pause ends, most would be refused
	// again, and whoever happened to finish a call first would take the
	// freed slot (a stampede, and users of a tier starving each other).
	window int // 0: no window
	bulk   int // bulk calls in flight through this server

	// queues: the server waits for slots itself (a response said it
	// waited: the Waited-Ms header). A suggested concurrency then only
	// counts free room, and keeping calls back would leave slots idle that
	// the server's fair queue would fill, so a user may keep up to cap in
	// flight; a suggestion of 0 (a paused lane) still stops it.
	queues bool
}

// openWindow is the window size at which the resume window is lifted.
const openWindow = 64

func newServer(cap int, probe time.Duration, jitter func(time.Duration) time.Duration, userLane, tierLane string) *server {
	return &server{
		cap:      cap,
		probe:    probe,
		jitter:   jitter,
		userLane: userLane,
		tierLane: tierLane,
		pauses:   make(map[pauseKey]*pause),
		limiters: make(map[string]*limiter),
		tiers:    make(map[string]string),
		waiters:  make(map[*waiter]struct{}),
		changed:  make(chan struct{}),
		served:   make(map[string]uint64),
	}
}

// pauseKey names a shared pause: one per limit kind, scope, and the user or
// tier it is about.
type pauseKey struct {
	kind  Kind
	scope string // a capacity lane; "" for a rate limit
	id    string // the user (user scope, rate limit) or tier (tier scope)
	all   bool   // holds back interactive calls as well as bulk ones
}

// pause is a wait the server asked for. baseEnd is when the server's delay
// ends; end adds the jitter. A pause is never shortened.
//
// A paced pause (every > 0, from a refusal with a spacing hint) lives on
// after its end, until until: then the calls it holds back leave it one at
// a time, each one moving its end every (plus jitter) later, so they come
// back at the rate the lane frees slots instead of all at once.
type pause struct {
	key     pauseKey
	paused  bool
	baseEnd time.Time
	end     time.Time
	every   time.Duration
	until   time.Time
}

// pacing reports whether p is a paced pause that is open at now: one held
// call may leave it. Requires mu held.
func (p *pause) pacing(now time.Time) bool {
	return p.every > 0 && !p.end.After(now) && p.until.After(now)
}

// limiter bounds one user's heavy calls in flight to this server.
type limiter struct {
	known    bool      // the server has answered one of the user's calls
	limit    int       // the bound now: 1 until known, then the last suggestion, at most cap
	inFlight int       // calls holding a slot
	probeAt  time.Time // with limit 0: when one call may go to look again
}

// bound returns how many calls may be in flight at now: a limit of 0
// allows one probe from probeAt on.
func (l *limiter) bound(now time.Time) int {
	if l.limit == 0 && !now.Before(l.probeAt) {
		return 1
	}
	return l.limit
}

// waiter is one heavy call between its arrival and its end. Its fields
// other than call and seq are guarded by server.mu.
type waiter struct {
	seq      uint64 // arrival order; kept across retries
	call     Call
	budget   time.Duration
	deadline time.Time // the context's deadline; zero if none
	retrying bool      // refused or failed once: goes before new calls
	own      *pause    // the wait this call's last refusal or failure asked for
	waited   time.Duration
	queued   time.Duration
}

// before reports whether w goes before o: refused calls first, then
// interactive calls, then bulk calls; within each, calls of the user
// served least recently first (round-robin across users), then oldest
// first. Requires mu held.
func (s *server) before(w, o *waiter) bool {
	if w.retrying != o.retrying {
		return w.retrying
	}
	if !w.retrying && w.call.Class != o.call.Class {
		return w.call.Class == Interactive
	}
	if w.call.User != o.call.User {
		if a, b := s.served[w.call.User], s.served[o.call.User]; a != b {
			return a < b
		}
	}
	return w.seq < o.seq
}

func (s *server) newWaiter(c Call, budget time.Duration, deadline time.Time) *waiter {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	return &waiter{seq: s.seq, call: c, budget: budget, deadline: deadline}
}

// left returns how long w may still wait at now: what is left of its
// budget, and no later than its context's deadline. Requires mu held.
func (w *waiter) left(now time.Time) time.Duration {
	d := w.budget - w.waited
	if !w.deadline.IsZero() {
		d = min(d, w.deadline.Sub(now))
	}
	return max(d, 0)
}

// broadcast wakes every waiter. Requires mu held.
func (s *server) broadcast() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// limiter returns user's limiter. Requires mu held.
func (s *server) limiter(user string) *limiter {
	l := s.limiters[user]
	if l == nil {
		l = &limiter{limit: 1}
		s.limiters[user] = l
	}
	return l
}

// concerns reports whether pause p holds back w's call. Requires mu held.
//
// A pause from a bulk call's refusal holds back only bulk calls, unless the
// lane is paused (limit 0); one from an interactive call's refusal holds
// back both. Within that: a pause of the caller's own lane (Transport's
// UserLane) holds that user's calls; of the tier lane (TierLane) the calls
// of users of that tier (or of unknown tier); of any other lane the calls
// that take it (Call.Lanes), every heavy call when a call does not say. A
// rate limit holds back all of that user's calls.
func (s *server) concerns(p *pause, w *waiter) bool {
	c := w.call
	if c.Class == Interactive && !p.key.all {
		return false
	}
	switch p.key.kind {
	case RateLimit:
		return p.key.id == c.User
	case Capacity:
	default:
		return false // a 503 or an error holds back only its own call
	}
	switch p.key.scope {
	case s.userLane:
		return p.key.id == c.User
	case s.tierLane:
		t := c.Tier
		if t == "" {
			t = s.tiers[c.User]
		}
		return t == "" || p.key.id == "" || t == p.key.id
	}
	return c.Lanes == nil || slices.Contains(c.Lanes, p.key.scope)
}

// verdict is what a waiter may do now.
type verdict struct {
	granted  bool
	throttle *pause    // the pause that outlasts the budget
	held     bool      // held back by a pause (the wait counts against the budget)
	wake     time.Time // when to look again without a change; zero: on a change only
}

// hold returns the pause that holds w back longest at now and when w may
// leave it, or the first pause whose server delay outlasts w's remaining
// budget or outlasts its context's deadline (throttle). w leaves a pause once the server's delay is over and
// either the jitter is over too or w's budget is at its end. Requires mu
// held.
func (s *server) hold(w *waiter, now time.Time) (holder *pause, leave time.Time, throttle *pause) {
	remaining := w.left(now)
	look := func(p *pause) {
		if p == nil || throttle != nil || !p.end.After(now) {
			return
		}
		if p.baseEnd.Sub(now) > remaining {
			throttle = p
			return
		}
		l := later(p.baseEnd, earlier(p.end, now.Add(remaining)))
		if l.After(now) && l.After(leave) {
			holder, leave = p, l
		}
	}
	look(w.own)
	for k, p := range s.pauses {
		if !p.end.After(now) {
			if !p.until.After(now) {
				delete(s.pauses, k)
			}
			continue
		}
		if s.concerns(p, w) {
			look(p)
		}
	}
	return holder, leave, throttle
}

// evaluate decides what w may do at now. Requires mu held.
func (s *server) evaluate(w *waiter, now time.Time) verdict {
	holder, leave, throttle := s.hold(w, now)
	if throttle != nil {
		return verdict{throttle: throttle}
	}
	if holder != nil {
		return verdict{held: true, wake: leave}
	}
	l := s.limiter(w.call.User)
	bound := l.bound(now)
	ahead := 0
	for o := range s.waiters {
		if o == w || o.call.User != w.call.User || !s.before(o, w) {
			continue
		}
		if h, _, t := s.hold(o, now); h == nil && t == nil {
			ahead++
		}
	}
	if w.call.Class == Bulk && s.window > 0 && s.bulk+s.bulkAhead(w, now) >= s.window {
		return verdict{} // wait for an answer to widen the window
	}
	if s.pacedAhead(w, now) {
		return verdict{} // an older call leaves the paced pause first
	}
	if l.inFlight+ahead < bound {
		return verdict{granted: true}
	}
	if bound == 0 {
		return verdict{wake: l.probeAt}
	}
	return verdict{}
}

// bulkAhead counts the bulk calls of any user that go before w and could
// be sent now, so the resume window's slots go in queue order, whoever's
// they are. Requires mu held.
func (s *server) bulkAhead(w *waiter, now time.Time) int {
	n := 0
	for o := range s.waiters {
		if o == w || o.call.Class != Bulk || !s.before(o, w) {
			continue
		}
		if h, _, t := s.hold(o, now); h != nil || t != nil {
			continue
		}
		if l := s.limiter(o.call.User); l.inFlight >= l.bound(now) {
			continue
		}
		n++
	}
	return n
}

// pacedAhead reports whether an open paced pause that concerns w concerns
// an older call that could be sent now: that one leaves first. Requires mu
// held.
func (s *server) pacedAhead(w *waiter, now time.Time) bool {
	for _, p := range s.pauses {
		if !p.pacing(now) || !s.concerns(p, w) {
			continue
		}
		for o := range s.waiters {
			if o == w || !s.before(o, w) || !s.concerns(p, o) {
				continue
			}
			if h, _, t := s.hold(o, now); h != nil || t != nil {
				continue
			}
			if l := s.limiter(o.call.User); l.inFlight < l.bound(now) {
				return true
			}
		}
	}
	return false
}

// paced closes every open paced pause that concerns w, which is leaving
// them: the next held call may go one spacing (plus jitter) later.
// Requires mu held.
func (s *server) paced(w *waiter, now time.Time) {
	for _, p := range s.pauses {
		if p.pacing(now) && s.concerns(p, w) {
			p.baseEnd = now.Add(p.every)
			p.end = p.baseEnd.Add(s.jitter(p.every))
		}
	}
}

// acquire waits until w's call may be sent and takes an in-flight slot for
// it. It returns a *ThrottledError at once when a pause holding the call
// back outlasts its remaining budget, and ctx's error when ctx ends first.
// Time held back by pauses is added to w.waited, time waiting for a slot
// to w.queued.
func (s *server) acquire(ctx context.Context, w *waiter) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waiters[w] = struct{}{}
	for {
		now := time.Now()
		v := s.evaluate(w, now)
		switch {
		case v.granted:
			delete(s.waiters, w)
			s.grants++
			s.served[w.call.User] = s.grants
			s.paced(w, now)
			s.limiter(w.call.User).inFlight++
			if w.call.Class == Bulk {
				s.bulk++
			}
			s.broadcast() // the next in line may take a slot too
			return nil
		case v.throttle != nil:
			delete(s.waiters, w)
			s.broadcast()
			p := v.throttle
			return &ThrottledError{Kind: p.key.kind, Scope: p.key.scope, Paused: p.paused,
				RetryAfter: p.baseEnd.Sub(now), Until: p.baseEnd, Waited: w.waited}
		}
		changed := s.changed
		s.mu.Unlock()
		err := sleep(ctx, changed, v.wake, now)
		s.mu.Lock()
		if d := time.Since(now); v.held {
			w.waited += d
		} else {
			w.queued += d
		}
		if err != nil {
			delete(s.waiters, w)
			s.broadcast()
			return fmt.Errorf("wait to send: %w", err)
		}
	}
}

// sleep waits for changed to close, until wake (if not zero), or for ctx
// to end, whichever comes first; only the last is an error.
func sleep(ctx context.Context, changed <-chan struct{}, wake, now time.Time) error {
	var timeout <-chan time.Time
	if !wake.IsZero() {
		t := time.NewTimer(wake.Sub(now))
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-changed:
	case <-timeout:
	}
	return nil
}

// release gives back the in-flight slot of c's call.
func (s *server) release(c Call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limiter(c.User).inFlight--
	if c.Class == Bulk {
		s.bulk--
	}
	s.broadcast()
}

// admitted widens the resume window by one for an admitted answer.
func (s *server) admitted() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.window == 0 {
		return
	}
	if s.window++; s.window >= openWindow {
		s.window = 0
	}
	s.broadcast()
}

// wait makes w's next send wait d plus jitter (a backoff after a 503 or an
// error), and puts w before new calls.
func (s *server) wait(w *waiter, kind Kind, d, jitter time.Duration, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w.retrying = true
	w.own = &pause{key: pauseKey{kind: kind}, baseEnd: now.Add(d), end: now.Add(d + jitter)}
}

// refuse records a 429 of w's call at now: it pauses the refusal's scope
// for d plus jitter, and w waits the same before its retry, ahead of new
// calls. With every > 0 (the server's spacing) the scope's pause is paced
// until now + horizon: after it ends, held calls leave it one per every.
func (s *server) refuse(w *waiter, r refusal, d, jitter, every, horizon time.Duration, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := w.call
	key := pauseKey{kind: r.kind, id: c.User, all: true}
	if r.kind == Capacity {
		key.scope = r.scope
		key.all = r.paused || c.Class == Interactive
		switch r.scope {
		case s.userLane:
		case s.tierLane:
			key.id = r.tier
			if key.id == "" {
				key.id = c.Tier
			}
		default:
			key.id = ""
		}
	}
	if r.kind == Capacity && r.scope != s.userLane && c.Class == Bulk {
		// The refused call still holds its slot: the others in flight are
		// what the shared lane takes from this client now.
		s.window = max(1, s.bulk-1)
	}
	p := &pause{key: key, paused: r.paused, baseEnd: now.Add(d), end: now.Add(d + jitter)}
	w.retrying = true
	w.own = p
	if old := s.pauses[key]; old != nil {
		if p.baseEnd.After(old.baseEnd) {
			old.baseEnd, old.paused = p.baseEnd, p.paused
		}
		old.end = later(old.end, p.end)
		if every > 0 {
			old.every, old.until = every, later(old.until, now.Add(horizon))
		}
	} else {
		if every > 0 {
			p.every, p.until = every, now.Add(horizon)
		}
		cp := *p
		s.pauses[key] = &cp
	}
	s.broadcast()
}

// observe takes what a response says about user: the tier, and, on a
// response the gate decided (admitted or refused), the suggested
// concurrency; with 0 the user sends nothing until wait (at least the
// probe interval) has passed, then one call to look again. The first
// response without a suggestion lifts the starting bound of 1 to cap.
func (s *server) observe(user, tier string, suggested int, decided bool, wait time.Duration, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if tier != "" {
		s.tiers[user] = tier
	}
	l := s.limiter(user)
	if !decided || suggested < 0 {
		if !l.known {
			l.known, l.limit = true, s.cap
			s.broadcast()
		}
		return
	}
	l.known, l.limit = true, min(suggested, s.cap)
	if s.queues && suggested > 0 {
		l.limit = s.cap
	}
	if l.limit == 0 {
		l.probeAt = now.Add(max(wait, s.probe))
	}
	s.broadcast()
}

// serverQueues records that the server waits for slots itself (see
// server.queues).
func (s *server) serverQueues() {
	s.mu.Lock()
	s.queues = true
	s.mu.Unlock()
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
