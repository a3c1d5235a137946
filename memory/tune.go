package memory

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/capgate/capgate/tune"
)

var _ tune.Store = (*Store)(nil)

// tuneEntry is one adaptive lane's shared state and the window being
// gathered. Times are nanoseconds since Store.start.
type tuneEntry struct {
	state   []byte
	window  tune.Window
	taken   bool  // a window was ever taken
	at      int64 // when the last window was taken
	expires int64
}

// tune returns key's entry, made if missing; an expired one starts over.
// Requires s.mu held.
func (s *Store) tune(key string, now int64) *tuneEntry {
	if s.tunes == nil {
		s.tunes = map[string]*tuneEntry{}
	}
	e := s.tunes[key]
	if e == nil || now >= e.expires {
		e = &tuneEntry{}
		s.tunes[key] = e
	}
	e.expires = now + int64(tune.StateTTL)
	return e
}

// TuneExchange implements tune.Store by the store's clock. It fails
// only when ctx is done.
func (s *Store) TuneExchange(ctx context.Context, key string, add tune.Window, every time.Duration) (tune.Round, error) {
	if err := ctx.Err(); err != nil {
		return tune.Round{}, fmt.Errorf("tune exchange: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, now := s.clock()
	e := s.tune(key, now)
	e.window = e.window.Add(add)
	r := tune.Round{State: slices.Clone(e.state)}
	if !e.taken || now-e.at >= int64(every) {
		r.Due, r.Window = true, e.window
		e.window, e.taken, e.at = tune.Window{}, true, now
	}
	return r, nil
}

// TuneSave implements tune.Store. It fails only when ctx is done.
func (s *Store) TuneSave(ctx context.Context, key string, state []byte) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("tune save: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, now := s.clock()
	s.tune(key, now).state = slices.Clone(state)
	return nil
}
