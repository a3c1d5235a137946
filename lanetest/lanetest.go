// Package lanetest is the conformance suite that every capgate.LaneStore
// must pass: RunStore checks the store's own contract, RunGate runs the
// gate's scenarios on top of it.
package lanetest

import (
	"testing"
	"time"

	"github.com/capgate/capgate"
)

// Store is a lane store under test, with the controls a test needs to
// reach behind its API. Times are relative to the store's own clock.
type Store interface {
	capgate.LaneStore
	// SetLease sets token's expiry in key to the store's now + d (d may be
	// negative: already expired), adding the token if it is absent.
	SetLease(t testing.TB, key, token string, d time.Duration)
	// Members returns the tokens in key, expired or not, sorted.
	Members(t testing.TB, key string) []string
	// Expiry returns token's expiry in key relative to the store's now;
	// ok is false when the token is absent.
	Expiry(t testing.TB, key, token string) (d time.Duration, ok bool)
	// TTL returns how long key lives; negative when key is missing.
	TTL(t testing.TB, key string) time.Duration
	// SetTTL sets key's TTL.
	SetTTL(t testing.TB, key string, d time.Duration)
	// Delete removes key.
	Delete(t testing.TB, key string)
}

// Factory opens an empty store for one test and registers its cleanup on t.
type Factory func(t testing.TB) Store
