package config

import (
	"context"
	"time"

	"github.com/capgate/capgate/internal/loop"
)

// readState is how the config service's reads of the store have gone.
type readState struct {
	attempted bool  // a read has finished, well or not
	ok        bool  // a read has succeeded once
	err       error // the last read's error; nil after a success
}

func (r *readState) done(err error) {
	r.attempted = true
	r.err = err
	if err == nil {
		r.ok = true
	}
}

// ReadState is what Service.ReadState reports.
type ReadState struct {
	// Ready is true once a read has finished: the stored config, or the
	// defaults (with enforce as shadow) when it failed, is in force.
	Ready bool
	// Err is the last read's error; nil when it succeeded.
	Err error
	// Version is the version in force as last read or saved; 0 for the
	// defaults.
	Version int64
}

// ReadState reports how the last read of the store went, for health
// checks: a store that can't be read is a state to report, never a reason
// to stop serving.
func (s *Service) ReadState() ReadState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return ReadState{Ready: s.read.attempted, Err: s.read.err, Version: s.version}
}

// minWatchInterval is the shortest interval Watch reads the store at.
const minWatchInterval = time.Second

// Watch keeps the cached config fresh in the background until ctx is done:
// it reads the store at once, then every CacheTTL (at least
// minWatchInterval). So the version in force (and what metrics report of
// it) follows the store rather than the traffic, and a database that was
// down at start is picked up as soon as it answers.
func (s *Service) Watch(ctx context.Context) {
	loop.Every(ctx, max(s.cacheTTL(), minWatchInterval), func(ctx context.Context) { s.Config(ctx) })
}
