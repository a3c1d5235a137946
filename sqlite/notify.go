package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/capgate/capgate/config"
)

// DataVersionInterval is how often SubscribeConfig asks SQLite whether
// another connection committed.
const DataVersionInterval = 250 * time.Millisecond

var _ config.Subscriber = (*Store)(nil)

// ConfigChannel names the channel for logs.
func (s *Store) ConfigChannel() string {
	return "SQLite data_version of " + s.path + " every " + DataVersionInterval.String()
}

// SubscribeConfig calls changed whenever another connection (another
// process, the capacity CLI) committed to the database, until ctx is done
// or the connection fails. SQLite has no notifications; a database file is
// shared by processes of one host, so a connection of its own asks SQLite's
// commit counter (PRAGMA data_version, which reads no table) every
// DataVersionInterval. The version passed to changed is 0: unknown.
func (s *Store) SubscribeConfig(ctx context.Context, ready func(), changed func(version int64)) error {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("sqlite %s: data_version: %w", s.path, err)
	}
	defer conn.Close()
	read := func() (int64, error) {
		var v int64
		err := conn.QueryRowContext(ctx, `PRAGMA data_version`).Scan(&v)
		return v, err
	}
	last, err := read()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("sqlite %s: data_version: %w", s.path, err)
	}
	if ready != nil {
		ready()
	}
	t := time.NewTicker(DataVersionInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		v, err := read()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("sqlite %s: data_version: %w", s.path, err)
		}
		if v != last {
			last = v
			changed(0)
		}
	}
}
