package postgres

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/capgate/capgate/config"
)

// ConfigChannelName is the NOTIFY channel of config changes: Update
// notifies it with the new version's id in the same transaction.
const ConfigChannelName = "capgate_config"

var _ config.Subscriber = (*Store)(nil)

// ConfigChannel names the channel for logs.
func (s *Store) ConfigChannel() string {
	return "PostgreSQL LISTEN " + ConfigChannelName + " on " + s.host
}

// SubscribeConfig listens on ConfigChannelName, on a connection of its
// own taken out of the pool, and calls changed for each version notified,
// until ctx is done or the connection fails.
func (s *Store) SubscribeConfig(ctx context.Context, ready func(), changed func(version int64)) error {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("listen: %w", err)
	}
	conn := pc.Hijack() // never back into the pool while listening
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+ConfigChannelName); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("listen: %w", err)
	}
	if ready != nil {
		ready()
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("wait for notification: %w", err)
		}
		v, _ := strconv.ParseInt(n.Payload, 10, 64)
		changed(v)
	}
}
