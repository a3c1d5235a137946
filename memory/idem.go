package memory

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/capgate/capgate/repeat"
)

var _ repeat.Store = (*Store)(nil)

// MaxRepeatEntries bounds the idempotency entries the store holds at once
// (calls running plus answers kept): past it, expired entries are swept,
// and a claim that still finds no room fails (the call runs as it would
// without idempotency). The answers' bytes are bounded by the config
// (idempotency.max_total_mib), counted exactly.
const MaxRepeatEntries = 10000

// MaxRepeatEntriesPerUser bounds the entries of one user
// (repeat.Entry.User) held at once: an eighth of MaxRepeatEntries, so that
// one user can't fill the store for the others. A claim past it fails
// (that call runs without deduplication). The bytes of one user's answers
// are bounded by repeat.Bound.PerUser.
const MaxRepeatEntriesPerUser = MaxRepeatEntries / 8

// The errors of a claim that finds no room.
var (
	errRepeatsFull     = errors.New("too many idempotency entries")
	errRepeatsUserFull = errors.New("too many idempotency entries of this user")
)

// userRepeats is one user's share of the entries.
type userRepeats struct {
	n     int   // entries
	bytes int64 // their answers' bytes
}

// repeatEntry is one key's entry. Times are nanoseconds since Store.start.
type repeatEntry struct {
	e       repeat.Entry
	expires int64
}

// repeat returns id's entry, nil when none or expired (then it is
// deleted). Requires s.mu held.
func (s *Store) repeat(id string, now int64) *repeatEntry {
	r := s.repeats[id]
	if r != nil && now >= r.expires {
		s.dropRepeat(id, r)
		return nil
	}
	return r
}

// dropRepeat deletes id's entry r. Requires s.mu held.
func (s *Store) dropRepeat(id string, r *repeatEntry) {
	s.repeatBytes -= int64(len(r.e.Answer))
	delete(s.repeats, id)
	if u := s.repeatUsers[r.e.User]; u != nil {
		u.n--
		u.bytes -= int64(len(r.e.Answer))
		if u.n <= 0 {
			delete(s.repeatUsers, r.e.User)
		}
	}
}

// repeatUser returns user's share, created when missing. Requires s.mu
// held.
func (s *Store) repeatUser(user string) *userRepeats {
	if s.repeatUsers == nil {
		s.repeatUsers = map[string]*userRepeats{}
	}
	u := s.repeatUsers[user]
	if u == nil {
		u = &userRepeats{}
		s.repeatUsers[user] = u
	}
	return u
}

// sweepRepeats deletes every expired entry. Requires s.mu held.
func (s *Store) sweepRepeats(now int64) {
	for id, r := range s.repeats {
		if now >= r.expires {
			s.dropRepeat(id, r)
		}
	}
}

// ClaimRepeat implements repeat.Store. It fails when ctx is
// done, when MaxRepeatEntries are held, and when MaxRepeatEntriesPerUser of
// e.User's are.
func (s *Store) ClaimRepeat(ctx context.Context, id string, e repeat.Entry, ttl time.Duration, replaceFinished bool) (repeat.Entry, bool, error) {
	if err := ctx.Err(); err != nil {
		return repeat.Entry{}, false, fmt.Errorf("claim repeat: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, now := s.clock()
	if s.repeats == nil {
		s.repeats = map[string]*repeatEntry{}
	}
	if r := s.repeat(id, now); r != nil {
		if !replaceFinished || r.e.Answer == nil {
			return cloneEntry(r.e), false, nil
		}
		s.dropRepeat(id, r)
	}
	if len(s.repeats) >= MaxRepeatEntries || s.repeatUser(e.User).n >= MaxRepeatEntriesPerUser {
		s.sweepRepeats(now)
		if len(s.repeats) >= MaxRepeatEntries {
			return repeat.Entry{}, false, fmt.Errorf("claim repeat: %w", errRepeatsFull)
		}
		if s.repeatUser(e.User).n >= MaxRepeatEntriesPerUser {
			return repeat.Entry{}, false, fmt.Errorf("claim repeat: %w", errRepeatsUserFull)
		}
	}
	e.Answer = nil
	s.repeats[id] = &repeatEntry{e: e, expires: now + int64(ttl)}
	s.repeatUser(e.User).n++
	return repeat.Entry{}, true, nil
}

// GetRepeat implements repeat.Store. It fails only when ctx
// is done.
func (s *Store) GetRepeat(ctx context.Context, id string) (repeat.Entry, bool, error) {
	if err := ctx.Err(); err != nil {
		return repeat.Entry{}, false, fmt.Errorf("get repeat: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, now := s.clock()
	r := s.repeat(id, now)
	if r == nil {
		return repeat.Entry{}, false, nil
	}
	return cloneEntry(r.e), true, nil
}

// TouchRepeat implements repeat.Store. It fails only when ctx
// is done.
func (s *Store) TouchRepeat(ctx context.Context, id, token string, ttl time.Duration) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("touch repeat: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, now := s.clock()
	r := s.repeat(id, now)
	if r == nil || r.e.Token != token || r.e.Answer != nil {
		return false, nil
	}
	r.expires = now + int64(ttl)
	return true, nil
}

// FinishRepeat implements repeat.Store. It fails only when
// ctx is done.
func (s *Store) FinishRepeat(ctx context.Context, id, token string, answer []byte, keep time.Duration, b repeat.Bound) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("finish repeat: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, now := s.clock()
	r := s.repeat(id, now)
	if r == nil || r.e.Token != token || r.e.Answer != nil {
		return false, nil
	}
	size := int64(len(answer))
	u := s.repeatUser(r.e.User)
	room := func() bool { return s.repeatBytes+size <= b.Total && u.bytes+size <= b.PerUser }
	if answer != nil && !room() {
		s.sweepRepeats(now)
		u = s.repeatUser(r.e.User)
	}
	if answer == nil || !room() {
		s.dropRepeat(id, r)
		return false, nil
	}
	r.e.Answer = slices.Clone(answer)
	if r.e.Answer == nil {
		r.e.Answer = []byte{}
	}
	r.expires = now + int64(keep)
	s.repeatBytes += size
	u.bytes += size
	return true, nil
}

// cloneEntry returns e with an answer of its own, so that no caller
// shares the store's bytes.
func cloneEntry(e repeat.Entry) repeat.Entry {
	if e.Answer != nil {
		e.Answer = append([]byte{}, e.Answer...)
	}
	return e
}
