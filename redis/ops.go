package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/capgate/capgate"
)

// scanCount is the COUNT hint of each SCAN in Keys. Each SCAN holds Redis
// for about a millisecond at this size; at 100 a status over 100 000 user
// lanes took two thousand round trips per listing.
const scanCount = 1000

// countBatch is how many keys one run of count.lua counts. Redis runs a
// script to its end before any other command, so Count splits a long key
// list into runs of this size: one script over 100 000 lanes held Redis for
// about half a second (past the socket timeout), stalling every gateway's
// acquires.
const countBatch = 1000

// errBadLease is returned for a lease shorter than a millisecond, the
// resolution of the scores.
var errBadLease = errors.New("the lease must be at least 1ms")

// Acquire implements capgate.LaneStore with the acquire.lua script, one
// atomic step across req.Keys (and the class keys of req.Borrow, sent as
// KEYS after them, only when some lane lends). It returns an error wrapping
// capgate.ErrLateAcquire when Redis ran it after req.NotAfter (by Redis's
// clock against the caller's wall time), an error when req is malformed
// (req.Validate),
// and the errors of Store.
func (s *Store) Acquire(ctx context.Context, req capgate.AcquireRequest, counts []int) (bool, error) {
	const op = "acquire lanes"
	if err := req.Validate(counts); err != nil {
		return false, fmt.Errorf("%s: %w", op, err)
	}
	n := len(req.Keys)
	keys := s.own(req.Keys)
	if class := classKeys(req.Borrow); class != nil {
		keys = withClassKeys(req.Keys, class)
	}
	if err := s.checkSlot(op, keys); err != nil {
		return false, err
	}
	args := make([]any, 0, 4+2*n+borrowArgs(keys, n))
	force := "0"
	if req.Force {
		force = "1"
	}
	var notAfter int64
	if !req.NotAfter.IsZero() {
		notAfter = max(req.NotAfter.UnixMilli(), 1)
	}
	args = append(args, req.Token, req.Lease.Milliseconds(), force, notAfter)
	for _, limit := range req.Limits[:n] {
		args = append(args, limit)
	}
	args = appendBorrow(args, req.Seats, req.Borrow, n)

	res, err := runToAnswer(ctx, s, op, func(ctx context.Context) ([]int64, error) {
		return acquireScript.Run(ctx, s.client, keys, args...).Int64Slice()
	})
	if err != nil {
		return false, err
	}
	if len(res) == 1 && res[0] == -1 {
		return false, fmt.Errorf("%s: %w", op, capgate.ErrLateAcquire)
	}
	if len(res) != 1+len(keys) {
		return false, fmt.Errorf("%s: the script returned %d values for %d keys", op, len(res), len(keys))
	}
	// The lanes' counts, then the class keys'.
	for i, c := range res[1:] {
		counts[i] = int(c)
	}
	return res[0] == 1, nil
}

// appendSeats appends seats to a script's ARGV when any exceeds 1: a call
// of one seat in every lane sends none (the scripts' default), so its
// command is the one it was before seats.
func appendSeats(args []any, seats []int) []any {
	for _, n := range seats {
		if n > 1 {
			for _, n := range seats {
				args = append(args, n)
			}
			return args
		}
	}
	return args
}

// classKeys returns the class keys of borrow that are set, in lane order:
// the KEYS a script gets after the lanes; nil when none is (no lane
// lends), so the call sends the KEYS it did before lending.
func classKeys(borrow []capgate.Borrow) []string {
	var keys []string
	for _, b := range borrow {
		if b.Key != "" {
			keys = append(keys, b.Key)
		}
	}
	return keys
}

// withClassKeys returns a new slice of keys followed by class: the KEYS of
// a call that borrows.
func withClassKeys(keys, class []string) []string {
	return append(append(make([]string, 0, len(keys)+len(class)), keys...), class...)
}

// borrowArgs returns how many more ARGV a call of n lanes sends with the
// Borrow of its KEYS keys: none without (len(keys) == n), else the
// reserves, lends and n (appendBorrow).
func borrowArgs(keys []string, n int) int {
	if len(keys) == n {
		return 0
	}
	return 2*n + 1
}

// appendBorrow appends a script's ARGV tail for a call of n lanes: when
// some lane lends (borrow), its seats (1 each when none are given), each
// lane's reserve, then each lane's lend (0 and 0 where it lends nothing),
// then n; else the seats as appendSeats does, so a call without Borrow
// sends what it did before lending (the scripts tell the two apart by
// ARGV's length).
func appendBorrow(args []any, seats []int, borrow []capgate.Borrow, n int) []any {
	if !slices.ContainsFunc(borrow, func(b capgate.Borrow) bool { return b.Key != "" }) {
		return appendSeats(args, seats)
	}
	for i := range n {
		args = append(args, seatOf(seats, i))
	}
	for _, b := range borrow {
		if b.Key == "" {
			b.Reserve = 0
		}
		args = append(args, b.Reserve)
	}
	for _, b := range borrow {
		if b.Key == "" {
			b.Lend = 0
		}
		args = append(args, b.Lend)
	}
	return append(args, n)
}

// seatOf returns seats[i], or 1 when seats is empty (one seat in
// each lane).
func seatOf(seats []int, i int) int {
	if len(seats) == 0 {
		return 1
	}
	return seats[i]
}

// Renew implements capgate.LaneStore with the renew.lua script. It returns
// an error for a lease under 1ms, and the errors of Store.
func (s *Store) Renew(ctx context.Context, token string, keys []string, lease time.Duration) (int, error) {
	const op = "renew leases"
	if lease < time.Millisecond {
		return 0, fmt.Errorf("%s: %w", op, errBadLease)
	}
	if err := s.checkSlot(op, keys); err != nil {
		return 0, err
	}
	keys = s.own(keys)
	held, err := run(ctx, s, op, func(ctx context.Context) (int64, error) {
		return renewScript.Run(ctx, s.client, keys, token, lease.Milliseconds()).Int64()
	})
	return int(held), err
}

// Release implements capgate.LaneStore: a ZREM of token and token#2 from
// each key, in one pipeline (not a transaction); then, for the keys where
// both were there (the call held 2 seats or more), the release.lua script
// takes the rest (token#3, … up to the first missing one). A call of
// one seat costs what it did before seats: one round trip, one ZREM per
// key, each answering 1. It returns the errors of Store.
func (s *Store) Release(ctx context.Context, token string, keys []string) error {
	const op = "release leases"
	if err := s.checkSlot(op, keys); err != nil {
		return err
	}
	keys = s.own(keys)
	_, err := run(ctx, s, op, func(ctx context.Context) (struct{}, error) {
		if len(keys) == 0 {
			return struct{}{}, nil
		}
		// Boxed once for all keys.
		first, second := any(token), any(token+"#2")
		cmds, err := s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for _, key := range keys {
				p.ZRem(ctx, key, first, second)
			}
			return nil
		})
		if err != nil {
			return struct{}{}, err
		}
		var more []string
		for i, c := range cmds {
			if c, ok := c.(*goredis.IntCmd); ok && c.Val() == 2 {
				more = append(more, keys[i])
			}
		}
		if len(more) == 0 {
			return struct{}{}, nil
		}
		return struct{}{}, releaseScript.Run(ctx, s.client, more, token, 3).Err()
	})
	return err
}

// own returns keys, or a copy of them when the command runs on a
// goroutine of its own: it may outlive the call, and the caller may reuse
// its slice.
func (s *Store) own(keys []string) []string {
	if s.direct {
		return keys
	}
	return slices.Clone(keys)
}

// Count implements capgate.LaneStore with the count.lua script, run once
// per countBatch keys (one after another, within one operation deadline),
// so Redis is never held long by one call. It returns an error when counts
// is shorter than keys, and the errors of Store.
func (s *Store) Count(ctx context.Context, keys []string, counts []int) error {
	const op = "count leases"
	if len(counts) < len(keys) {
		return fmt.Errorf("%s: %d keys, room for %d counts", op, len(keys), len(counts))
	}
	if err := s.checkSlot(op, keys); err != nil {
		return err
	}
	return s.countBatched(ctx, op, countScript, keys, counts)
}

// countBatched runs script (one count per key) over keys in runs of
// countBatch keys, one after another within one operation deadline, so
// Redis is never held long by one call, and fills counts. args follow the
// keys of every run.
func (s *Store) countBatched(ctx context.Context, op string, script *goredis.Script, keys []string, counts []int, args ...any) error {
	keys = slices.Clone(keys) // the command may outlive the call
	res, err := run(ctx, s, op, func(ctx context.Context) ([]int64, error) {
		res := make([]int64, 0, len(keys))
		for lo := 0; lo < len(keys); lo += countBatch {
			part, err := script.Run(ctx, s.client, keys[lo:min(lo+countBatch, len(keys))], args...).Int64Slice()
			if err != nil {
				return nil, err
			}
			res = append(res, part...)
		}
		return res, nil
	})
	if err != nil {
		return err
	}
	if len(res) != len(keys) {
		return fmt.Errorf("%s: the script returned %d values for %d keys", op, len(res), len(keys))
	}
	for i, n := range res {
		counts[i] = int(n)
	}
	return nil
}

// Keys implements capgate.LaneStore with SCAN MATCH <prefix>* COUNT 1000
// (never KEYS), the prefix's glob characters escaped. The whole scan is one
// operation under one deadline. On a Redis Cluster it scans the master
// that owns the prefix's slot when the prefix has a hash tag, else every
// master (see scanCluster). It returns the errors of Store.
func (s *Store) Keys(ctx context.Context, prefix string) ([]string, error) {
	const op = "list lane keys"
	match := escapeGlob(prefix) + "*"
	return run(ctx, s, op, func(ctx context.Context) ([]string, error) {
		var seen map[string]struct{}
		var err error
		if c, ok := s.client.(clusterScanner); ok {
			seen, err = scanCluster(ctx, c, prefix, match)
		} else {
			seen = make(map[string]struct{})
			err = scanNode(ctx, s.client, prefix, match, seen)
		}
		if err != nil {
			return nil, err
		}
		keys := make([]string, 0, len(seen))
		for key := range seen {
			keys = append(keys, key)
		}
		slices.Sort(keys)
		return keys, nil
	})
}

// scanner is a client that SCANs one node.
type scanner interface {
	Scan(ctx context.Context, cursor uint64, match string, count int64) *goredis.ScanCmd
}

// scanNode adds the keys under prefix on one node to seen.
func scanNode(ctx context.Context, c scanner, prefix, match string, seen map[string]struct{}) error {
	var cursor uint64
	for {
		page, next, err := c.Scan(ctx, cursor, match, scanCount).Result()
		if err != nil {
			return err
		}
		for _, key := range page {
			if strings.HasPrefix(key, prefix) { // SCAN may repeat a key
				seen[key] = struct{}{}
			}
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// Ping implements capgate.LaneStore with PING. It returns the errors of
// Store.
func (s *Store) Ping(ctx context.Context) error {
	_, err := run(ctx, s, "ping", func(ctx context.Context) (string, error) {
		return s.client.Ping(ctx).Result()
	})
	return err
}

// escapeGlob escapes the characters special to Redis's glob patterns.
func escapeGlob(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
