package decide

import (
	"context"
	"fmt"
	"time"

	"github.com/capgate/capgate"
)

// Journal is where a Server records the store leases of the calls it
// holds, so that its next incarnation releases what a killed one left,
// rather than leaving the places taken for lease_seconds. redis.Store is
// one; the memory store needs none (a restart loses its lanes anyway).
type Journal interface {
	// JournalAdd records that token holds leases in keys under name, and
	// keeps the record at least ttl.
	JournalAdd(ctx context.Context, name, token string, keys []string, ttl time.Duration) error
	// JournalRemove forgets token under name.
	JournalRemove(ctx context.Context, name, token string) error
	// JournalTake returns every lease recorded under name (token → keys)
	// and forgets them.
	JournalTake(ctx context.Context, name string) (map[string][]string, error)
}

// journalName is the Server's journal: one per service, named by its own
// task id (one service per API host and task id), whatever task its calls
// name.
func (s *Server) journalName() string { return "decide:" + s.Gate.TaskID }

// Recover releases the leases a previous incarnation of this service (the
// same task id) recorded in the Journal and never released: it was killed.
// Call it before serving: the calls that still run in the app re-register
// (docs/PROTOCOL.md, "A call that already runs") and take new leases. It
// returns how many calls it released.
func (s *Server) Recover(ctx context.Context) (int, error) {
	if s.Journal == nil {
		return 0, nil
	}
	left, err := s.Journal.JournalTake(ctx, s.journalName())
	if err != nil {
		return 0, fmt.Errorf("read the previous incarnation's leases: %w", err)
	}
	n := 0
	var errs []error
	for token, keys := range left {
		if err := s.Gate.Store.Release(ctx, token, keys); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	if len(errs) > 0 {
		return n, fmt.Errorf("release %d of the previous incarnation's %d calls (the rest expire by themselves): %w", len(errs), len(left), errs[0])
	}
	return n, nil
}

// journal records adm's store lease, if it has one, and returns the
// function that forgets it (after the release). A failure is logged: the
// lease then expires by itself after a crash, as before.
func (s *Server) journal(ctx context.Context, adm *capgate.Admission) (forget func()) {
	if s.Journal == nil {
		return func() {}
	}
	token, keys, ok := adm.StoreLease()
	if !ok {
		return func() {}
	}
	ctx = context.WithoutCancel(ctx)
	ttl := max(2*adm.MaxHold(), time.Minute)
	if err := s.Journal.JournalAdd(ctx, s.journalName(), token, keys, ttl); err != nil {
		s.logger().Warn("capgate decide: journal a held call (a crash would leave its place taken for lease_seconds)", "error", err)
		return func() {}
	}
	return func() {
		if err := s.Journal.JournalRemove(ctx, s.journalName(), token); err != nil {
			s.logger().Warn("capgate decide: forget a released call in the journal", "error", err)
		}
	}
}
