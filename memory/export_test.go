package memory

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestStore is a Store with the hooks lanetest.Store needs to reach behind
// its API.
type TestStore struct{ *Store }

// SetLease sets token's expiry in key to now+d, creating the key (with no
// TTL, as a bare ZADD would) if needed.
func (s TestStore) SetLease(t testing.TB, key, token string, d time.Duration) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	_, now := s.clock()
	l := s.lane(key, now)
	if l == nil {
		l = s.create(key)
	}
	exp := now + int64(d)
	l.leases[token] = exp
	l.seated = l.seated || strings.Contains(token, "#") // a seat's member
	l.next = min(l.next, exp)
}

// Members returns the tokens in key, expired or not, sorted.
func (s TestStore) Members(t testing.TB, key string) []string {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	_, now := s.clock()
	var toks []string
	if l := s.lane(key, now); l != nil {
		for tok := range l.leases {
			toks = append(toks, tok)
		}
	}
	slices.Sort(toks)
	return toks
}

// Expiry returns token's expiry in key, relative to now.
func (s TestStore) Expiry(t testing.TB, key, token string) (time.Duration, bool) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	_, now := s.clock()
	l := s.lane(key, now)
	if l == nil {
		return 0, false
	}
	exp, ok := l.leases[token]
	return time.Duration(exp - now), ok
}

// TTL returns how long key lives: negative when it is missing, the longest
// duration when it has no TTL.
func (s TestStore) TTL(t testing.TB, key string) time.Duration {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	_, now := s.clock()
	l := s.lane(key, now)
	switch {
	case l == nil:
		return -1
	case l.expires == noTTL:
		return time.Duration(noTTL)
	}
	return time.Duration(l.expires - now)
}

// SetTTL sets key's TTL, if key exists.
func (s TestStore) SetTTL(t testing.TB, key string, d time.Duration) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	_, now := s.clock()
	if l := s.lane(key, now); l != nil {
		l.expires = now + int64(d)
	}
}

// Delete removes key.
func (s TestStore) Delete(t testing.TB, key string) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.lanes[key]; l != nil {
		s.drop(key, l)
	}
}

// Len returns how many lanes the store keeps, expired or not.
func (s TestStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.lanes)
}

// SetTicketExpiry sets the expiry of token's ticket under prefix to now+d.
func (s TestStore) SetTicketExpiry(t testing.TB, prefix, token string, d time.Duration) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	_, now := s.clock()
	if w := s.lists[prefix]; w != nil && w.byToken[token] != nil {
		w.byToken[token].exp = now + int64(d)
		return
	}
	t.Fatalf("no ticket %s under %s", token, prefix)
}
