package redis

import (
	"context"
	_ "embed"
	"fmt"
	"slices"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/internal/randhex"
	"github.com/capgate/capgate/settings"
)

// The waitlist's scripts: seats.lua (scripts.go), then waitpass.lua (the
// grant pass and its helpers) head each of them, since Lua scripts in Redis
// can't include one another.
var (
	//go:embed waitpass.lua
	waitPassSrc string
	//go:embed waitjoin.lua
	waitJoinSrc string
	//go:embed waitpump.lua
	waitPumpSrc string
	//go:embed waitleave.lua
	waitLeaveSrc string
	//go:embed waitrelease.lua
	waitReleaseSrc string
	//go:embed waiting.lua
	waitingSrc string

	waitJoinScript    = goredis.NewScript(seatsSrc + waitPassSrc + waitJoinSrc)
	waitPumpScript    = goredis.NewScript(seatsSrc + waitPassSrc + waitPumpSrc)
	waitLeaveScript   = goredis.NewScript(seatsSrc + waitPassSrc + waitLeaveSrc)
	waitReleaseScript = goredis.NewScript(seatsSrc + waitPassSrc + waitReleaseSrc)
	waitingScript     = goredis.NewScript(seatsSrc + waitPassSrc + waitingSrc)
)

var _ capgate.Waitlist = (*Store)(nil)

// newInstanceID names this Store for wake-ups: grants to its waiters are
// published on <prefix>:wake:<id>.
func newInstanceID() string {
	return randhex.String(8)
}

// wakeChannel is the channel this Store's waiters under prefix hear on.
func (s *Store) wakeChannel(prefix string) string {
	return prefix + ":wake:" + s.instance
}

// fairWire is a ticket's fairness (Ticket.Fair) as waitjoin.lua takes it:
// 0 calls ("", the zero value, too), 1 time, 2 usage (any other value,
// as the memory store charges it).
func fairWire(by settings.FairBy) int {
	switch by {
	case "", settings.FairCalls:
		return 0
	case settings.FairTime:
		return 1
	}
	return 2
}

// Join implements capgate.Waitlist with waitjoin.lua: one atomic step
// (t's class keys, when some lane lends it, go in KEYS after its lanes). It
// returns an error wrapping capgate.ErrLateAcquire when Redis ran it after
// t.NotAfter, an error when t is malformed, and the errors of Store.
func (s *Store) Join(ctx context.Context, t capgate.Ticket, counts []int) (capgate.JoinResult, error) {
	const op = "join waitlist"
	if err := t.ValidateJoin(counts); err != nil {
		return capgate.JoinResult{}, fmt.Errorf("%s: %w", op, err)
	}
	n := len(t.Keys)
	keys := ticketKeys(t)
	if err := s.checkSlot(op, keys, t.Prefix); err != nil {
		return capgate.JoinResult{}, err
	}
	var notAfter int64
	if !t.NotAfter.IsZero() {
		notAfter = max(t.NotAfter.UnixMilli(), 1)
	}
	args := make([]any, 0, 12+2*n+borrowArgs(keys, n))
	args = append(args, t.Prefix, t.Token, t.Lease.Milliseconds(), notAfter, t.TicketLease.Milliseconds(),
		t.Claim.Milliseconds(), t.MaxWaiting, t.MaxPerUser, t.UserID, s.wakeChannel(t.Prefix), fairWire(t.Fair))
	for _, l := range t.Limits[:n] {
		args = append(args, l)
	}
	args = append(args, t.UserLane)
	args = appendBorrow(args, t.Seats, t.Borrow, n)
	res, err := run(ctx, s, op, func(ctx context.Context) ([]int64, error) {
		return waitJoinScript.Run(ctx, s.client, keys, args...).Int64Slice()
	})
	if err != nil {
		return capgate.JoinResult{}, err
	}
	if len(res) == 1 && res[0] == -1 {
		return capgate.JoinResult{}, fmt.Errorf("%s: %w", op, capgate.ErrLateAcquire)
	}
	if len(res) != 2+len(keys) {
		return capgate.JoinResult{}, fmt.Errorf("%s: the script returned %d values for %d keys", op, len(res), len(keys))
	}
	// The lanes' counts, then the class keys'.
	for i, c := range res[2:] {
		counts[i] = int(c)
	}
	return joinResult(res[0], res[1]), nil
}

// ticketKeys returns a new slice of t's lane keys, then the class keys of
// the lanes that lend it (classKeys): the KEYS of its Join and Pump.
func ticketKeys(t capgate.Ticket) []string {
	if class := classKeys(t.Borrow); class != nil {
		return withClassKeys(t.Keys, class)
	}
	return slices.Clone(t.Keys)
}

func joinResult(state, next int64) capgate.JoinResult {
	return capgate.JoinResult{Taken: state == 1, Queued: state == 2, Dropped: state == 3, Next: time.Duration(next) * time.Millisecond}
}

// Pump implements capgate.Waitlist with waitpump.lua (t's class keys as
// Join's, for Next). It returns an error
// when t is malformed, and the errors of Store.
func (s *Store) Pump(ctx context.Context, t capgate.Ticket) (capgate.JoinResult, error) {
	const op = "pump waitlist"
	if err := t.Validate(); err != nil {
		return capgate.JoinResult{}, fmt.Errorf("%s: %w", op, err)
	}
	n := len(t.Keys)
	keys := ticketKeys(t)
	if err := s.checkSlot(op, keys, t.Prefix); err != nil {
		return capgate.JoinResult{}, err
	}
	args := make([]any, 0, 4+2*n+borrowArgs(keys, n))
	args = append(args, t.Prefix, t.Token, t.TicketLease.Milliseconds())
	for _, l := range t.Limits[:n] {
		args = append(args, l)
	}
	newLimits := 0
	if t.NewLimits {
		newLimits = 1
	}
	args = append(args, newLimits)
	args = appendBorrow(args, t.Seats, t.Borrow, n)
	res, err := run(ctx, s, op, func(ctx context.Context) ([]int64, error) {
		return waitPumpScript.Run(ctx, s.client, keys, args...).Int64Slice()
	})
	if err != nil {
		return capgate.JoinResult{}, err
	}
	if len(res) != 3 {
		return capgate.JoinResult{}, fmt.Errorf("%s: the script returned %d values", op, len(res))
	}
	r := joinResult(res[0], res[1])
	r.Waiting = int(res[2])
	return r, nil
}

// Leave implements capgate.Waitlist with waitleave.lua. It returns the
// errors of Store.
func (s *Store) Leave(ctx context.Context, t capgate.Ticket) (bool, error) {
	const op = "leave waitlist"
	if err := s.checkSlot(op, t.Keys, t.Prefix); err != nil {
		return false, err
	}
	keys := slices.Clone(t.Keys)
	n, err := run(ctx, s, op, func(ctx context.Context) (int64, error) {
		return waitLeaveScript.Run(ctx, s.client, keys, t.Prefix, t.Token).Int64()
	})
	return n == 1, err
}

// ReleaseWait implements capgate.Waitlist with waitrelease.lua: as cheap
// as Release (one round trip) when nobody waits. It returns the errors of
// Store.
func (s *Store) ReleaseWait(ctx context.Context, prefix, token string, keys []string, c capgate.Charge) error {
	const op = "release leases"
	if err := s.checkSlot(op, keys, prefix); err != nil {
		return err
	}
	keys = slices.Clone(keys)
	_, err := run(ctx, s, op, func(ctx context.Context) (int64, error) {
		return waitReleaseScript.Run(ctx, s.client, keys, prefix, token, c.User, c.Cost).Int64()
	})
	return err
}

// Waiting implements capgate.Waitlist with waiting.lua, run once per
// countBatch keys (as Count, so a status over many user lanes never holds
// Redis long). It returns an error when counts is shorter than keys, and
// the errors of Store.
func (s *Store) Waiting(ctx context.Context, prefix string, keys []string, counts []int) error {
	const op = "count waiting"
	if len(counts) < len(keys) {
		return fmt.Errorf("%s: %d keys, room for %d counts", op, len(keys), len(counts))
	}
	if len(keys) == 0 {
		return nil
	}
	if err := s.checkSlot(op, keys, prefix); err != nil {
		return err
	}
	return s.countBatched(ctx, op, waitingScript, keys, counts, prefix)
}
