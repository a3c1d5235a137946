package lanetest

import (
	"slices"
	"testing"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/internal/randhex"
)

// NewToken returns a random lease token: 32 lowercase hex characters.
func NewToken() string {
	return randhex.String(16)
}

// NewPrefix returns a fresh key prefix ending in ":", so that tests against
// a shared Redis database never see each other's keys. Its random part is a
// hash tag, so every key under it lands in one Redis Cluster slot, as a
// call's lanes must.
func NewPrefix() string {
	return "capgate-test:{" + randhex.String(6) + "}:"
}

// lanes returns n fresh lane keys under one fresh prefix.
func storeLanes(n int) []string {
	p := NewPrefix()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = p + string(rune('a'+i))
	}
	return keys
}

// repeat returns n copies of v.
func storeRepeat(n, v int) []int {
	return slices.Repeat([]int{v}, n)
}

// acquire runs an acquire that must not fail and returns whether it took
// the lease and the counts before it.
func storeAcquire(t testing.TB, s Store, token string, keys []string, limits []int, lease time.Duration, force bool) (bool, []int) {
	t.Helper()
	counts := make([]int, len(keys))
	req := capgate.AcquireRequest{Token: token, Keys: keys, Limits: limits, Lease: lease, Force: force}
	taken, err := s.Acquire(t.Context(), req, counts)
	if err != nil {
		t.Fatalf("Acquire(%v, limits %v, force %v): %v", keys, limits, force, err)
	}
	return taken, counts
}

// count returns the counts of keys.
func storeCount(t testing.TB, s Store, keys ...string) []int {
	t.Helper()
	counts := make([]int, len(keys))
	if err := s.Count(t.Context(), keys, counts); err != nil {
		t.Fatalf("Count(%v): %v", keys, err)
	}
	return counts
}

// renew runs a renew that must not fail.
func storeRenew(t testing.TB, s Store, token string, keys []string, lease time.Duration) int {
	t.Helper()
	held, err := s.Renew(t.Context(), token, keys, lease)
	if err != nil {
		t.Fatalf("Renew(%v): %v", keys, err)
	}
	return held
}

// release runs a release that must not fail.
func storeRelease(t testing.TB, s Store, token string, keys ...string) {
	t.Helper()
	if err := s.Release(t.Context(), token, keys); err != nil {
		t.Fatalf("Release(%v): %v", keys, err)
	}
}

// wantMembers fails t unless key holds exactly want (any order).
func storeWantMembers(t testing.TB, s Store, key string, want ...string) {
	t.Helper()
	got := s.Members(t, key)
	want = slices.Clone(want)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("members of %s = %v, want %v", key, got, want)
	}
}

// wantGone fails t unless key does not exist.
func storeWantGone(t testing.TB, s Store, key string) {
	t.Helper()
	if ttl := s.TTL(t, key); ttl >= 0 {
		t.Errorf("key %s exists (TTL %v), want it gone", key, ttl)
	}
}

// wantBetween fails t unless lo < d <= hi.
func storeWantBetween(t testing.TB, what string, d, lo, hi time.Duration) {
	t.Helper()
	if d <= lo || d > hi {
		t.Errorf("%s = %v, want in (%v, %v]", what, d, lo, hi)
	}
}
