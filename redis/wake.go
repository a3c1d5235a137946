package redis

import (
	"context"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// wakeBuffer is how many pub/sub messages the subscription buffers before
// go-redis holds up reading; the dispatcher never blocks, so it stays near
// empty.
const wakeBuffer = 1024

// Watch implements capgate.Waitlist. Grants to this Store's tickets are
// published on <prefix>:wake:<instance>; the Store subscribes to that
// channel on its first Watch under prefix (one pub/sub connection per
// Store, started lazily, in the background: Watch never waits on Redis).
// Whenever the subscription is confirmed (at first, and after go-redis
// reconnects it) every waiter on the channel is woken to check its ticket,
// since a grant published meanwhile was lost. It fails only when ctx is
// done or the Store is closed.
func (s *Store) Watch(ctx context.Context, prefix, token string) (<-chan struct{}, func(), error) {
	const op = "watch waitlist"
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", op, err)
	}
	select {
	case <-s.closed:
		return nil, nil, fmt.Errorf("%s: %w", op, ErrClosed)
	default:
	}
	channel := s.wakeChannel(prefix)
	wake := make(chan struct{}, 1)

	s.wmu.Lock()
	if s.watchers == nil {
		s.watchers = make(map[string]map[string]chan struct{})
		s.subscribed = make(map[string]bool)
	}
	if s.watchers[channel] == nil {
		s.watchers[channel] = make(map[string]chan struct{})
	}
	s.watchers[channel][token] = wake
	if s.ps == nil {
		s.ps = s.client.Subscribe(context.WithoutCancel(ctx)) // no I/O without channels
		s.dispatched = make(chan struct{})
		go s.dispatch(s.ps.ChannelWithSubscriptions(goredis.WithChannelSize(wakeBuffer)))
	}
	ps, subscribe := s.ps, !s.subscribed[channel]
	s.subscribed[channel] = true
	s.wmu.Unlock()

	if subscribe {
		go func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.Deadline)
			defer cancel()
			if err := ps.Subscribe(sctx, channel); err != nil {
				// Try again on the next Watch; the waiters pump meanwhile.
				s.wmu.Lock()
				delete(s.subscribed, channel)
				s.wmu.Unlock()
			}
		}()
	}
	return wake, func() {
		s.wmu.Lock()
		if s.watchers[channel][token] == wake {
			delete(s.watchers[channel], token)
		}
		s.wmu.Unlock()
	}, nil
}

// dispatch hands the wake-ups to the waiters until the subscription
// closes.
func (s *Store) dispatch(msgs <-chan any) {
	defer close(s.dispatched)
	for m := range msgs {
		switch m := m.(type) {
		case *goredis.Message:
			s.wake(m.Channel, m.Payload)
		case *goredis.Subscription:
			if m.Kind == "subscribe" {
				s.wake(m.Channel, "")
			}
		}
	}
}

// wake wakes token's waiter on channel, or every waiter on it when token
// is "". It never blocks.
func (s *Store) wake(channel, token string) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	for tok, ch := range s.watchers[channel] {
		if token == "" || tok == token {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

// closeWake closes the subscription and waits up to closeGrace for the
// dispatcher to end.
func (s *Store) closeWake() {
	s.wmu.Lock()
	ps, done := s.ps, s.dispatched
	s.wmu.Unlock()
	if ps == nil {
		return
	}
	_ = ps.Close()
	t := time.NewTimer(closeGrace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}
