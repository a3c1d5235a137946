package memory

import (
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/settings"
)

// fairState is the fair-work state of one key prefix (capgate.Waitlist,
// Fair work): the calls running and the last costs charged. It outlives
// the prefix's waitlist, whose tags start over when it empties.
type fairState struct {
	runs map[string]*fairRun // by token
	last map[string]int64    // user → the cost of its last call charged; "" → anyone's
}

// fairRun is a call running that a fair-work ticket (or Join's fast path
// under a fair-work ticket) took. Times are nanoseconds since Store.start.
// It runs while its lease lasts (fairLeased), for RunMaxAge at most.
type fairRun struct {
	user   string
	key    string // its first lane, which holds its lease as its token
	seats  int64  // the most it takes in a lane
	est    int64  // the estimate its ticket charged at its join (0: fast path)
	start  int64
	byTime bool // charged provisionally by its time while it runs
	queued bool // granted from the waitlist: its list's tags last until it ends
}

// fair returns prefix's fair-work state, making it. Requires s.mu held.
func (s *Store) fair(prefix string) *fairState {
	f := s.fairs[prefix]
	if f == nil {
		if s.fairs == nil {
			s.fairs = make(map[string]*fairState)
		}
		f = &fairState{runs: map[string]*fairRun{}, last: map[string]int64{}}
		s.fairs[prefix] = f
	}
	return f
}

// fairOf is how a ticket of fairness by is charged: "" (Ticket.Fair's zero
// value) is settings.FairCalls; any other value not FairCalls or FairTime
// is charged as FairUsage, as the Redis store does.
func fairOf(by settings.FairBy) settings.FairBy {
	if by == "" {
		return settings.FairCalls
	}
	return by
}

// fairStart records that token's call, of a fair-work ticket, runs from
// now; key is its first lane. Requires s.mu held.
func (s *Store) fairStart(prefix, token, key, user string, seats int, est int64, by settings.FairBy, queued bool, now int64) {
	if by == settings.FairCalls {
		return
	}
	s.fair(prefix).runs[token] = &fairRun{user: user, key: key, seats: int64(max(seats, 1)), est: est, start: now,
		byTime: by == settings.FairTime, queued: queued}
}

// fairLeased reports whether r, token's run, still counts: started less
// than RunMaxAge ago, and its lease in its lane not expired nor released.
// A run that doesn't is dropped without a charge: the estimate its join
// charged stands as its cost (as in Redis, where when its lease ended is
// not known once its lane has pruned it). Requires s.mu held.
func (s *Store) fairLeased(r *fairRun, token string, now int64) bool {
	if now-r.start > int64(capgate.RunMaxAge) {
		return false
	}
	l := s.lanes[r.key]
	if l == nil || now >= l.expires {
		return false
	}
	exp, ok := l.leases[token]
	return ok && exp > now
}

// fairKeeps reports whether a call granted from prefix's waitlist runs
// (fairLeased): the list's tags then outlive its last ticket, so the
// call's charge still counts. It drops the runs that don't count.
// Requires s.mu held.
func (s *Store) fairKeeps(prefix string, now int64) bool {
	f := s.fairs[prefix]
	if f == nil {
		return false
	}
	keeps := false
	for tok, r := range f.runs {
		switch {
		case !s.fairLeased(r, tok, now):
			delete(f.runs, tok)
		case r.queued:
			keeps = true
		}
	}
	return keeps
}

// fairEstimate is what a new ticket of user is charged at its join: the
// cost of the user's last call charged, or anyone's, or 1. Requires s.mu
// held.
func (s *Store) fairEstimate(prefix, user string) int64 {
	f := s.fairs[prefix]
	if f == nil {
		return 1
	}
	if c, ok := f.last[user]; ok {
		return max(c, 1)
	}
	if c, ok := f.last[""]; ok {
		return max(c, 1)
	}
	return 1
}

// fairPending is the provisional charge of user's calls running now: for
// those charged by time, seats × milliseconds held beyond the estimate
// their ticket charged; and how many run. It drops the records that no
// longer count (fairLeased). Requires s.mu held.
func (s *Store) fairPending(prefix, user string, now int64) (p int64, running int) {
	f := s.fairs[prefix]
	if f == nil {
		return 0, 0
	}
	for tok, r := range f.runs {
		if !s.fairLeased(r, tok, now) {
			delete(f.runs, tok)
			continue
		}
		if r.user != user {
			continue
		}
		running++
		if r.byTime {
			p += max(r.seats*((now-r.start)/int64(time.Millisecond))-r.est, 0)
		}
	}
	return p, running
}

// fairTag is the start tag of a new fair-work ticket of user on w: the
// user's counter with its provisional charge, lifted to the list's
// virtual time only when the user is newly active (no ticket waits and no
// call of it runs): a user whose calls run or wait keeps the credit of
// its counter, however the virtual time leapt meanwhile. Requires s.mu
// held.
func (s *Store) fairTag(prefix string, w *waitlist, user string, now int64) int64 {
	p, running := s.fairPending(prefix, user, now)
	if running > 0 || w.perUser[user] > 0 {
		return w.fin[user] + p
	}
	return max(w.v, w.fin[user]+p)
}

// fairLift lifts user's counter to the virtual time when a call it takes
// at once makes it newly active (fairTag). Requires s.mu held.
func (s *Store) fairLift(prefix, user string, by settings.FairBy, now int64) {
	w := s.list(prefix, false)
	if by == settings.FairCalls || w == nil || w.perUser[user] > 0 {
		return
	}
	if _, running := s.fairPending(prefix, user, now); running == 0 {
		w.fin[user] = max(w.fin[user], w.v)
	}
}

// fairCharge ends token's run and charges c: the user's finish tag, for
// a call recorded as running (of fair work), moves
// by the cost less the estimate its ticket charged, while the list lasts
// (tickets wait, or calls granted from it run; else only the estimates
// learn it, and the list of no tickets whose last such call this was
// ends). Requires s.mu held.
func (s *Store) fairCharge(prefix, token string, c capgate.Charge, now int64) {
	defer func() {
		if w := s.list(prefix, false); w != nil && len(w.tickets) == 0 && !s.fairKeeps(prefix, now) {
			delete(s.lists, prefix) // fair tags start over
		}
	}()
	f := s.fairs[prefix]
	var r *fairRun
	if f != nil {
		r = f.runs[token]
		delete(f.runs, token)
	}
	if c.User == "" || c.Cost < 0 {
		return
	}
	f = s.fair(prefix)
	f.last[c.User], f.last[""] = c.Cost, c.Cost
	w := s.list(prefix, false)
	if w == nil || r == nil || r.user != c.User {
		return // (a call of fairness by calls, or its record is gone: charged at its join)
	}
	w.fin[c.User] += c.Cost - r.est
}
