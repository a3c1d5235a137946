// Package repeat is the lane store's port for idempotent heavy calls (the
// config key "idempotency"): the entries an idempotency store keeps, per
// key the call running or its kept answer, and the bound on the answers it
// keeps. The calls' idempotency itself — the claim, the wait of a repeat,
// the kept answer — is package idempotency's, over a Gate; a lane store
// offers a Store in its capabilities (capgate.StoreCaps.Idempotency).
// It imports only the standard library, so the root can name it.
package repeat

import (
	"context"
	"time"
)

// Store is the optional part of a lane store that keeps the entries of
// idempotent calls: per key, the call running (a marker that expires
// unless touched) or its kept answer (expiring after the ttl). Keys are
// opaque ids the gate makes (hex hashes); the store lays them out (on a
// Redis Cluster each in a hash slot of its own). Every error is a store
// failure: the call runs as it would without idempotency. memory.Store
// and redis.Store implement it.
type Store interface {
	// ClaimRepeat sets id's entry to e, a call running, expiring after
	// ttl, when id has none; else it changes nothing and returns the entry
	// it has (claimed false). With replaceFinished, an entry holding an
	// answer counts as none.
	ClaimRepeat(ctx context.Context, id string, e Entry, ttl time.Duration, replaceFinished bool) (cur Entry, claimed bool, err error)
	// GetRepeat returns id's entry; ok is false when there is none.
	GetRepeat(ctx context.Context, id string) (e Entry, ok bool, err error)
	// TouchRepeat makes the entry of the running call token at id expire
	// ttl from now; false (and nothing changed) when id holds no running
	// call of token.
	TouchRepeat(ctx context.Context, id, token string, ttl time.Duration) (bool, error)
	// FinishRepeat ends the running call token at id. With answer
	// non-nil the entry keeps it for keep, if every answer the store
	// keeps then fits in b.Total bytes and the answers of b.User in
	// b.PerUser; else (answer nil, or no room: kept false) the entry is
	// deleted. Nothing changes when id holds no running call of token.
	FinishRepeat(ctx context.Context, id, token string, answer []byte, keep time.Duration, b Bound) (kept bool, err error)
}

// Bound bounds the answers a Store keeps: in all, and per user, so that
// one user can neither fill the store nor evict the answers of others.
type Bound struct {
	User    string // whose answer: an opaque tag of the caller (Entry.User), [0-9a-f] or ""
	Total   int64  // bytes of all the answers kept, at most
	PerUser int64  // bytes of one user's answers kept, at most
}

// Entry is what the store keeps for one key.
type Entry struct {
	Token       string // the running call's own random token
	CID         string // its request id: the dedup_of of its repeats
	Fingerprint string // a hash of the request (method, path, query, body, the headers that change the answer)
	Answer      []byte // the kept answer; nil while the call runs
	// User tags whose entry it is (package idempotency sets a hash of the user id,
	// hex): the store bounds each user's entries (Bound).
	User string
}
