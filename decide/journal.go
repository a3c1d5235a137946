package decide

import (
	"context"
	"fmt"
	"sync"
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
// task id and its Instance (its listen address), whatever task its calls
// name. Two live services never share one: they can't listen on one
// address, and a restarted one listens where its predecessor did.
func (s *Server) journalName() string {
	if s.Instance == "" {
		return "decide:" + s.Gate.TaskID
	}
	return "decide:" + s.Gate.TaskID + ":" + s.Instance
}

// DefaultRecoverDelay is how long after start a Server releases its
// predecessor's leases: longer than the Python client takes to re-register
// a running call (every 0.25 s).
const DefaultRecoverDelay = time.Second

// Recover takes the leases a previous incarnation of this service (the
// same task id) recorded in the Journal and never released — it was killed
// — and releases them after delay, in the background; release waits for
// that and says how many calls it released. Call it before serving: what
// it takes must be the predecessor's alone. The calls still running in the
// app re-register meanwhile (docs/PROTOCOL.md, "A call that already runs")
// and take new leases: for delay such a call is counted twice, the safe
// side (releasing first would let it run uncounted until it re-registered),
// and the places of calls that ended are freed after delay, not
// lease_seconds.
func (s *Server) Recover(ctx context.Context, delay time.Duration) (release func() (int, error), err error) {
	if s.Journal == nil {
		return func() (int, error) { return 0, nil }, nil
	}
	left, err := s.Journal.JournalTake(ctx, s.journalName())
	if err != nil {
		return nil, fmt.Errorf("read the previous incarnation's leases: %w", err)
	}
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done(): // shutting down: release now
		}
		n, err := s.Gate.ReleaseLeft(context.WithoutCancel(ctx), left)
		done <- result{n, err}
	}()
	var once sync.Once
	var res result
	return func() (int, error) {
		once.Do(func() { res = <-done })
		return res.n, res.err
	}, nil
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
