package config

import (
	"context"
	"fmt"
	"log/slog"
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

// Notifier announces a saved config change to the other processes
// (the gateways), so it applies there at once instead of when their cache
// expires.
type Notifier interface {
	// NotifyConfig announces that version is the newest config.
	NotifyConfig(ctx context.Context, version int64) error
}

// Subscriber delivers the config changes that other processes
// announce.
type Subscriber interface {
	// SubscribeConfig calls changed for each change announced, until ctx
	// is done or the subscription fails, and returns then (nil when ctx
	// is done). ready, if not nil, is called once the subscription
	// listens.
	SubscribeConfig(ctx context.Context, ready func(), changed func(version int64)) error
	// ConfigChannel names the channel for logs: "Redis pub/sub …",
	// "PostgreSQL LISTEN …".
	ConfigChannel() string
}

// Backoff of Follow's resubscription.
const (
	followRetryMin = 500 * time.Millisecond
	followRetryMax = 15 * time.Second
)

// Follow keeps the cached config in step with the changes sub announces,
// until ctx is done: each one makes the service read the store at once. A
// subscription that fails is made again, backing off; meanwhile Watch's
// poll stays the fallback. A change announced before the subscription
// listens is caught by the read made as it starts listening.
func (s *Service) Follow(ctx context.Context, sub Subscriber) {
	wait := followRetryMin
	loop.Run(ctx, 0, func(ctx context.Context) (time.Duration, bool) {
		err := sub.SubscribeConfig(ctx, func() {
			wait = followRetryMin
			s.logger().Info("Capacity config changes are pushed", slog.String("channel", sub.ConfigChannel()))
			s.reread(ctx)
		}, func(int64) { s.reread(ctx) })
		if ctx.Err() != nil {
			return 0, true
		}
		s.logger().Warn("Capacity config change subscription failed; polling until it is back",
			slog.String("channel", sub.ConfigChannel()), slog.Any("error", err))
		d := wait
		wait = min(2*wait, followRetryMax)
		return d, false
	})
}

// reread makes the config in force the store's latest, now. A refresh
// already running is waited for first (at most ReadTimeout): invalidating
// under it would make it discard what it got, and a read that failed (a
// locked table) would then leave the snapshot from before in force rather
// than the fallback's enforce-as-shadow.
func (s *Service) reread(ctx context.Context) {
	s.mu.Lock()
	running := s.refreshing
	s.mu.Unlock()
	if running != nil {
		t := time.NewTimer(s.readTimeout())
		select {
		case <-running:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	s.Invalidate()
	s.Config(ctx)
}

// notify announces a saved version through every Notifiers; a failure
// only logs a WARNING (the gateways' poll still picks the change up).
func (s *Service) notify(ctx context.Context, version int64) {
	for _, n := range s.Notifiers {
		if err := n.NotifyConfig(ctx, version); err != nil {
			s.logger().Warn(fmt.Sprintf("Capacity config version %d was saved, but announcing it failed; the gateways pick it up within their --config-cache", version),
				slog.Int64("version", version), slog.Any("error", err))
		}
	}
}
