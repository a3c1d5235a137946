package server

import (
	"context"
	"fmt"
	"time"

	"github.com/capgate/capgate/journal"
	"github.com/capgate/capgate/redis"
)

// openJournal opens the journal of this process's gateway or decision
// service in group (its kind, task id and listen address), when its lanes
// are in Redis: the calls' leases are recorded, so that once this process
// is dead another of its group releases them, hold after it started at
// the earliest (package journal). It is closed, after the calls have
// ended and before the gate and the stores close, by Server.Close. With
// in-process lanes (they end with the process) it returns nil.
func (s *Server) openJournal(ctx context.Context, group string, hold time.Duration) (*journal.Journal, error) {
	rs, ok := s.Lanes.(*redis.Store)
	if !ok {
		return nil, nil
	}
	j, err := journal.Open(ctx, journal.Options{Store: rs, Group: group, Release: s.Gate.ReleaseLeft, Hold: hold,
		Logger: s.logger})
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	s.closers = append(s.closers, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), s.storeDeadline())
		defer cancel()
		return j.Close(ctx)
	})
	return j, nil
}
