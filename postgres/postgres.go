// Package postgres is the cluster config store: the config history in a
// PostgreSQL table, capacity_configs, through a pgx connection pool.
// Writers serialize on a transaction-level advisory lock (UpdateLockKey);
// the request-path read is bounded by a context deadline and a
// statement_timeout.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/capgate/capgate/config"
	"github.com/capgate/capgate/internal/migrate"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The advisory lock keys.
const (
	// UpdateLockKey serializes config changes (pg_advisory_xact_lock), the
	// key the original implementation used.
	UpdateLockKey = 275275
	// MigrateLockKey serializes schema migrations.
	MigrateLockKey = 275276
)

// statementMargin is how much earlier the server's statement_timeout fires
// than the context deadline, so a slow read usually ends server-side and
// keeps its connection; the deadline still bounds a stalled connection.
const statementMargin = 20 * time.Millisecond

// Store is a config.Store in PostgreSQL. It is safe for concurrent
// use, also by several processes. Create one with Open.
type Store struct {
	pool *pgxpool.Pool
	host string // for errors
}

var _ config.Store = (*Store)(nil)

// Open connects to the database at url (postgres://…; a search_path
// parameter picks the schema) and brings its schema up to date (Connect,
// then Migrate). It fails if the URL is invalid, the database does not
// answer, or its schema is newer than this capgate knows.
func Open(ctx context.Context, url string) (*Store, error) {
	return migrate.Open(ctx, Connect, url)
}

// Connect returns a store over the database at url without touching it:
// connections are made when first needed, so a database that is down now
// is not an error (reads fail until it answers), and nothing is migrated,
// so a user without DDL rights can run it (see Migrate). It fails only for
// an invalid URL.
func Connect(ctx context.Context, url string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres %s: %w", cfg.ConnConfig.Host, err)
	}
	return &Store{pool: pool, host: cfg.ConnConfig.Host}, nil
}

// Close closes the pool's connections.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// Ping reports whether the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("ping postgres: %w", err)
	}
	return nil
}

const selectColumns = `SELECT id, config::text, previous_config::text, created_by, created_at, source, note, rollback_of FROM capacity_configs`

// Latest returns the newest version, or nil when there is none.
func (s *Store) Latest(ctx context.Context) (*config.Version, error) {
	v, err := latest(ctx, s.pool)
	if err != nil {
		return nil, fmt.Errorf("read latest capacity config: %w", err)
	}
	return v, nil
}

// LatestWithin is Latest, given up after timeout: the read runs in a short
// read-only transaction with SET LOCAL statement_timeout, under a context
// deadline of timeout.
func (s *Store) LatestWithin(ctx context.Context, timeout time.Duration) (*config.Version, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	v, err := s.latestWithin(ctx)
	if err != nil {
		return nil, fmt.Errorf("read latest capacity config within %v: %w", timeout, err)
	}
	return v, nil
}

func (s *Store) latestWithin(ctx context.Context) (*config.Version, error) {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	deadline, _ := ctx.Deadline()
	ms := max((time.Until(deadline) - statementMargin).Milliseconds(), 1)
	if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL statement_timeout = %d", ms)); err != nil {
		return nil, fmt.Errorf("set statement_timeout: %w", err)
	}
	v, err := latest(ctx, tx)
	if err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	return v, nil
}

// Version returns the version id, or nil and no error when there is none.
func (s *Store) Version(ctx context.Context, id int64) (*config.Version, error) {
	vs, err := query(ctx, s.pool, selectColumns+` WHERE id = $1`, id)
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
	vs, err := query(ctx, s.pool, selectColumns+` ORDER BY id DESC LIMIT $1`, max(limit, 1))
	if err != nil {
		return nil, fmt.Errorf("read capacity config history: %w", err)
	}
	return vs, nil
}

// queryer is what reads run on: the pool or a transaction.
type queryer interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func latest(ctx context.Context, q queryer) (*config.Version, error) {
	vs, err := query(ctx, q, selectColumns+` ORDER BY id DESC LIMIT 1`)
	if err != nil || len(vs) == 0 {
		return nil, err
	}
	return &vs[0], nil
}

func query(ctx context.Context, q queryer, sql string, args ...any) ([]config.Version, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return config.ScanVersions(rows, func(t time.Time) (time.Time, error) { return t, nil })
}

// Update runs fn on the latest version in a transaction that holds the
// advisory lock UpdateLockKey, and appends what it returns.
func (s *Store) Update(ctx context.Context, fn func(*config.Version) (*config.Version, error)) (*config.Version, error) {
	var out *config.Version
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, UpdateLockKey); err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		cur, err := latest(ctx, tx)
		if err != nil {
			return fmt.Errorf("read latest: %w", err)
		}
		next, err := fn(cur)
		if err != nil {
			return fnError{err}
		}
		if next == nil {
			return nil
		}
		v := *next
		cols, err := v.Columns()
		if err != nil {
			return err
		}
		err = tx.QueryRow(ctx,
			`INSERT INTO capacity_configs (config, previous_config, created_by, source, note, rollback_of)
			 VALUES ($1::text::jsonb, $2::text::jsonb, $3, $4, $5, $6) RETURNING id, created_at`,
			cols.Config, cols.PreviousConfig, cols.CreatedBy, v.Source, v.Note, cols.RollbackOf).Scan(&v.ID, &v.CreatedAt)
		if err != nil {
			return fmt.Errorf("insert: %w", err)
		}
		v.CreatedAt = v.CreatedAt.UTC()
		// Delivered at commit, to every gateway listening (Follow): the
		// change applies there at once, whoever made it.
		if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, ConfigChannelName, strconv.FormatInt(v.ID, 10)); err != nil {
			return fmt.Errorf("notify: %w", err)
		}
		out = &v
		return nil
	})
	if fe, ok := errors.AsType[fnError](err); ok {
		return nil, fe.err
	}
	if err != nil {
		return nil, fmt.Errorf("update capacity config: %w", err)
	}
	return out, nil
}

// fnError carries the error of Update's fn out of the transaction, so it
// is returned unwrapped.
type fnError struct{ err error }

func (e fnError) Error() string { return e.err.Error() }
func (e fnError) Unwrap() error { return e.err }

// IsConfigError reports whether err is PostgreSQL refusing the connection
// settings in a way no retry heals: a password or user refused (SQLSTATE
// class 28) or a database that does not exist (3D000). A gateway should not
// start on it, unlike on a database that is merely down.
func IsConfigError(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	return strings.HasPrefix(pe.Code, "28") || pe.Code == "3D000"
}
