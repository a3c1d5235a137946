package config_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capgate/capgate/config"
	"github.com/capgate/capgate/settings"
)

// slowStore is a config store in memory whose reads can be held, as a
// read in flight on a loaded database is.
type slowStore struct {
	flakyStore
	armed atomic.Bool        // the next read is held (and disarms)
	hold  chan chan struct{} // a held read sends itself here, then waits for release
}

func (s *slowStore) LatestWithin(ctx context.Context, d time.Duration) (*config.Version, error) {
	v, err := s.Latest(ctx)
	// Only an armed read is held, and it waits for the test to take it: a
	// send that gave up when the test was not yet receiving (a loaded
	// machine) let the read through and left the test waiting forever.
	if s.armed.CompareAndSwap(true, false) {
		release := make(chan struct{})
		s.hold <- release
		<-release
	}
	return v, err
}

// With no cache (--config-cache 0: "read on every call"), a call that
// arrives after a change gets it, even while a read that began before the
// change is still in flight: it must not be handed that read's answer, nor
// the last snapshot.
func TestNoCacheNeverServesAReadThatBeganBeforeTheCall(t *testing.T) {
	store := &slowStore{hold: make(chan chan struct{})}
	doc := func(seconds int) *config.Version {
		c := settings.Default(nil, settings.ModeEnforce)
		c.Wait.MaxSeconds = seconds
		return &config.Version{ID: int64(seconds + 1), Config: c.Doc()}
	}
	store.set(false, doc(0))
	svc := config.NewService(store, settings.ModeEnforce)
	svc.CacheTTL = -1
	if got := svc.Config(t.Context()).Wait.MaxSeconds; got != 0 {
		t.Fatalf("first read: max_seconds %d; want 0", got)
	}

	// A read begins (a waiting call's re-check), reads version 1 and is
	// held; then another process saves max_seconds 20.
	old := make(chan settings.Config)
	store.armed.Store(true)
	go func() { old <- svc.Config(context.Background()) }()
	release := <-store.hold
	store.set(false, doc(20))

	// A call arriving now reads the change, whatever is in flight.
	if got := svc.Config(t.Context()).Wait.MaxSeconds; got != 20 {
		t.Errorf("a call after the change: max_seconds %d; want 20", got)
	}
	close(release)
	if got := (<-old).Wait.MaxSeconds; got != 0 {
		t.Errorf("the held read: max_seconds %d; want the 0 it read", got)
	}
	if got := svc.Config(t.Context()).Wait.MaxSeconds; got != 20 {
		t.Errorf("after the held read ended: max_seconds %d; want 20", got)
	}
}
