package config_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/capgate/capgate/config"
	"github.com/capgate/capgate/settings"
)

// flakyStore is a config store in memory whose reads fail while down is
// set: a database another process writes to, that may be down.
type flakyStore struct {
	mu     sync.Mutex
	down   bool
	latest *config.Version
}

var errDown = errors.New("connection refused")

func (s *flakyStore) Latest(context.Context) (*config.Version, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return nil, errDown
	}
	return s.latest, nil
}

func (s *flakyStore) LatestWithin(ctx context.Context, _ time.Duration) (*config.Version, error) {
	return s.Latest(ctx)
}
func (s *flakyStore) History(context.Context, int) ([]config.Version, error) { return nil, nil }
func (s *flakyStore) Update(context.Context, func(*config.Version) (*config.Version, error)) (*config.Version, error) {
	return nil, errors.New("read only")
}
func (s *flakyStore) Ping(context.Context) error { return nil }
func (s *flakyStore) Close() error               { return nil }

func (s *flakyStore) set(down bool, v *config.Version) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down, s.latest = down, v
}

func TestWatchFollowsTheStoreWithoutTraffic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &flakyStore{down: true}
		svc := config.NewService(store, settings.ModeEnforce)
		svc.CacheTTL = 5 * time.Second
		if st := svc.ReadState(); st.Ready {
			t.Fatalf("ReadState before any read = %+v; want not ready", st)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { svc.Watch(ctx); close(done) }()
		synctest.Wait()

		// Down at start: ready on the defaults, enforce as shadow, the error reported.
		st := svc.ReadState()
		if !st.Ready || !errors.Is(st.Err, errDown) || st.Version != 0 {
			t.Errorf("ReadState with the store down = %+v; want ready, the error, version 0", st)
		}
		if m := svc.Config(ctx).Mode; m != settings.ModeShadow {
			t.Errorf("mode with the store down = %q; want shadow", m)
		}

		// The database comes up with a version written by another process:
		// the next background read takes it, with no call made.
		cfg := settings.Default(nil, settings.ModeEnforce).Doc()
		store.set(false, &config.Version{ID: 7, Config: cfg})
		time.Sleep(5 * time.Second) // the fake clock of the bubble
		synctest.Wait()
		st = svc.ReadState()
		if st.Err != nil || st.Version != 7 {
			t.Errorf("ReadState after the store came up = %+v; want no error, version 7", st)
		}
		if m := svc.Config(ctx).Mode; m != settings.ModeEnforce {
			t.Errorf("mode after the store came up = %q; want enforce", m)
		}
		cancel()
		<-done
	})
}
