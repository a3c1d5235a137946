// Package sqlite is the embedded config store: the config history in one
// SQLite file (modernc.org/sqlite, no cgo). The file is created if missing
// and kept in WAL mode with a busy timeout, so the capgate CLI and running
// gateways can use it at once.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver

	"github.com/capgate/capgate/config"
	"github.com/capgate/capgate/internal/migrate"
)

// DefaultBusyTimeout is how long a statement waits for another connection's
// write lock before it fails with "database is locked".
const DefaultBusyTimeout = 10 * time.Second

// timeFormat is how created_at is stored: fixed width, so it sorts.
const timeFormat = "2006-01-02T15:04:05.000000Z07:00"

// Store is a config.Store in a SQLite file. It is safe for
// concurrent use, also with other processes on the same file: writers take
// the file's write lock (BEGIN IMMEDIATE), readers never wait for them
// (WAL). Create one with Open.
type Store struct {
	db     *sql.DB
	path   string
	writer chan struct{} // the in-process writers' lock, so writers queue here and not in SQLite's busy loop

	// Now stamps created_at. Default time.Now.
	Now func() time.Time
}

var _ config.Store = (*Store)(nil)

// Open opens the SQLite database at path, creating it if missing, and
// brings its schema up to date (Connect, then Migrate). It fails if the
// file can't be opened, or its schema is newer than this capgate knows.
func Open(ctx context.Context, path string) (*Store, error) {
	return migrate.Open(ctx, Connect, path)
}

// Connect returns a store over the SQLite database at path without
// touching the file: it is opened (and created if missing) when first
// used, and nothing is migrated (see Migrate).
func Connect(_ context.Context, path string) (*Store, error) {
	if path == "" {
		return nil, errors.New("open sqlite: no path")
	}
	dsn := fmt.Sprintf("file:%s?_pragma=busy_timeout(%d)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate",
		path, DefaultBusyTimeout.Milliseconds())
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	return &Store{db: db, path: path, writer: make(chan struct{}, 1)}, nil
}

// Path returns the database file's path.
func (s *Store) Path() string { return s.path }

// Close closes the database.
func (s *Store) Close() error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close sqlite %s: %w", s.path, err)
	}
	return nil
}

// Ping reports whether the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return fmt.Errorf("ping sqlite %s: %w", s.path, err)
	}
	return nil
}

func (s *Store) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

const selectColumns = `SELECT id, config, previous_config, created_by, created_at, source, note, rollback_of FROM capacity_configs`

// queryer is what reads run on: the database or a transaction.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// Latest returns the newest version, or nil when there is none.
func (s *Store) Latest(ctx context.Context) (*config.Version, error) {
	return latest(ctx, s.db)
}

// LatestWithin is Latest, given up after timeout (a context deadline;
// SQLite interrupts the statement).
func (s *Store) LatestWithin(ctx context.Context, timeout time.Duration) (*config.Version, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return latest(ctx, s.db)
}

func latest(ctx context.Context, q queryer) (*config.Version, error) {
	vs, err := query(ctx, q, selectColumns+` ORDER BY id DESC LIMIT 1`)
	if err != nil {
		return nil, fmt.Errorf("read latest capacity config: %w", err)
	}
	if len(vs) == 0 {
		return nil, nil
	}
	return &vs[0], nil
}

// Version returns the version id, or nil and no error when there is none.
func (s *Store) Version(ctx context.Context, id int64) (*config.Version, error) {
	vs, err := query(ctx, s.db, selectColumns+` WHERE id = ?`, id)
	if err != nil {
		return nil, fmt.Errorf("read capacity config version %d: %w", id, err)
	}
	if len(vs) == 0 {
		return nil, nil
	}
	return &vs[0], nil
}

// History returns up to limit versions, newest first.
func (s *Store) History(ctx context.Context, limit int) ([]config.Version, error) {
	vs, err := query(ctx, s.db, selectColumns+` ORDER BY id DESC LIMIT ?`, max(limit, 1))
	if err != nil {
		return nil, fmt.Errorf("read capacity config history: %w", err)
	}
	return vs, nil
}

func query(ctx context.Context, q queryer, sqlText string, args ...any) ([]config.Version, error) {
	rows, err := q.QueryContext(ctx, sqlText, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return config.ScanVersions(rows, func(s string) (time.Time, error) { return time.Parse(time.RFC3339Nano, s) })
}

// Update runs fn on the latest version inside a write transaction (BEGIN
// IMMEDIATE) and appends what it returns.
func (s *Store) Update(ctx context.Context, fn func(*config.Version) (*config.Version, error)) (*config.Version, error) {
	select {
	case s.writer <- struct{}{}:
		defer func() { <-s.writer }()
	case <-ctx.Done():
		return nil, fmt.Errorf("update capacity config: %w", ctx.Err())
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("update capacity config: begin: %w", err)
	}
	defer tx.Rollback()
	cur, err := latest(ctx, tx)
	if err != nil {
		return nil, fmt.Errorf("update capacity config: %w", err)
	}
	next, err := fn(cur)
	if err != nil || next == nil {
		return nil, err
	}
	v := *next
	cols, err := v.Columns()
	if err != nil {
		return nil, fmt.Errorf("update capacity config: %w", err)
	}
	v.CreatedAt = s.now().UTC().Truncate(time.Microsecond)
	err = tx.QueryRowContext(ctx,
		`INSERT INTO capacity_configs (config, previous_config, created_by, created_at, source, note, rollback_of)
		 VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id`,
		cols.Config, cols.PreviousConfig, cols.CreatedBy, v.CreatedAt.Format(timeFormat), v.Source, v.Note, cols.RollbackOf).Scan(&v.ID)
	if err != nil {
		return nil, fmt.Errorf("update capacity config: insert: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("update capacity config: commit: %w", err)
	}
	return &v, nil
}
