package memory

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"
)

// The journal (journal.Store), in process, as redis.Store keeps it: a
// group's roster (incarnation → when its liveness lapses) and each
// incarnation's records (token → keys), each expiring. A process's own
// in-process lanes end with it and need no journal; this one is for
// processes that share one memory store, as tests do, to run the journal
// on the memory store's clock.

// roster is a group's incarnations. Times are nanoseconds since
// Store.start.
type roster struct {
	live    map[string]int64 // incarnation → when its liveness lapses; goodbye: -1
	expires int64
}

// records is one incarnation's journal.
type records struct {
	keys    map[string][]string // token → lane keys
	expires int64
}

// journalKey names an incarnation's journal.
type journalKey struct{ group, id string }

// goodbye is the liveness of an incarnation that left: lapsed always.
const goodbye = -1

// rosterOf returns group's roster, nil when there is none or it expired
// (then it is deleted). Requires s.mu held.
func (s *Store) rosterOf(group string, now int64) *roster {
	r := s.rosters[group]
	if r != nil && now >= r.expires {
		delete(s.rosters, group)
		return nil
	}
	return r
}

// recordsOf returns k's journal, nil when there is none or it expired
// (then it is deleted). Requires s.mu held.
func (s *Store) recordsOf(k journalKey, now int64) *records {
	r := s.journals[k]
	if r != nil && now >= r.expires {
		delete(s.journals, k)
		return nil
	}
	return r
}

// JournalRenew implements journal.Store.
func (s *Store) JournalRenew(ctx context.Context, group, self string, ttl, keep time.Duration) (map[string]time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("renew the journal's liveness: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, now := s.clock()
	r := s.rosterOf(group, now)
	if r == nil {
		if s.rosters == nil {
			s.rosters = map[string]*roster{}
		}
		r = &roster{live: map[string]int64{}}
		s.rosters[group] = r
	}
	r.live[self] = now + int64(ttl)
	r.expires = max(r.expires, now+int64(keep))
	others := make(map[string]time.Duration, len(r.live)-1)
	for id, until := range r.live {
		if id != self {
			others[id] = time.Duration(until - now)
		}
	}
	return others, nil
}

// JournalWrite implements journal.Store.
func (s *Store) JournalWrite(ctx context.Context, group, self string, add map[string][]string, remove []string, ttl time.Duration) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("write the journal: %w", err)
	}
	if len(add) == 0 && len(remove) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, now := s.clock()
	k := journalKey{group, self}
	r := s.recordsOf(k, now)
	if r == nil && len(add) > 0 {
		if s.journals == nil {
			s.journals = map[journalKey]*records{}
		}
		r = &records{keys: map[string][]string{}}
		s.journals[k] = r
	}
	if r == nil {
		return nil
	}
	for token, keys := range add {
		r.keys[token] = slices.Clone(keys)
	}
	if len(add) > 0 {
		r.expires = now + int64(ttl)
	}
	for _, token := range remove {
		delete(r.keys, token)
	}
	if len(r.keys) == 0 {
		delete(s.journals, k)
	}
	return nil
}

// JournalRead implements journal.Store.
func (s *Store) JournalRead(ctx context.Context, group, id string) (map[string][]string, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, fmt.Errorf("read the journal: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, now := s.clock()
	if r := s.rosterOf(group, now); r != nil {
		if until, ok := r.live[id]; ok && until > now {
			return nil, false, nil
		}
	}
	left := map[string][]string{}
	if r := s.recordsOf(journalKey{group, id}, now); r != nil {
		for token, keys := range r.keys {
			left[token] = slices.Clone(keys)
		}
	}
	return left, true, nil
}

// JournalForget implements journal.Store.
func (s *Store) JournalForget(ctx context.Context, group, id string, tokens []string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("forget journalled leases: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, now := s.clock()
	k := journalKey{group, id}
	if r := s.recordsOf(k, now); r != nil {
		for _, token := range tokens {
			delete(r.keys, token)
		}
		if len(r.keys) > 0 {
			return nil
		}
		delete(s.journals, k)
	}
	if r := s.rosterOf(group, now); r != nil {
		if until, ok := r.live[id]; ok && until <= now {
			s.dropIncarnation(group, r, id)
		}
	}
	return nil
}

// JournalLeave implements journal.Store.
func (s *Store) JournalLeave(ctx context.Context, group, self string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("leave the journal's roster: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, now := s.clock()
	r := s.rosterOf(group, now)
	if rec := s.recordsOf(journalKey{group, self}, now); rec != nil {
		if r == nil {
			if s.rosters == nil {
				s.rosters = map[string]*roster{}
			}
			r = &roster{live: map[string]int64{}}
			s.rosters[group] = r
		}
		r.live[self] = goodbye
		r.expires = max(r.expires, rec.expires) // the roster outlives the journal it leads to
		return nil
	}
	if r != nil {
		s.dropIncarnation(group, r, self)
	}
	return nil
}

// dropIncarnation removes id from group's roster r, and the roster once
// empty. Requires s.mu held.
func (s *Store) dropIncarnation(group string, r *roster, id string) {
	delete(r.live, id)
	if len(r.live) == 0 {
		delete(s.rosters, group)
	}
}

// Journals returns the journals the store holds: group → incarnation →
// token → keys (tests).
func (s *Store) Journals() map[string]map[string]map[string][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, now := s.clock()
	out := map[string]map[string]map[string][]string{}
	for k := range maps.Clone(s.journals) {
		r := s.recordsOf(k, now)
		if r == nil {
			continue
		}
		if out[k.group] == nil {
			out[k.group] = map[string]map[string][]string{}
		}
		out[k.group][k.id] = maps.Clone(r.keys)
	}
	return out
}
