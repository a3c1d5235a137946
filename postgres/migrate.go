package postgres

import (
	"context"
	"embed"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/capgate/capgate/internal/migrate"
)

//go:embed migrations/*.sql
var migrations embed.FS

// SchemaVersion is the newest schema version this package knows.
func SchemaVersion() int { return migrate.Newest(migrations) }

// DatabaseVersion returns the schema version of the database: 0 when
// capgate's tables are not there yet. It fails when the database can't be
// read.
func (s *Store) DatabaseVersion(ctx context.Context) (int, error) {
	have, err := migrate.Version(ctx, pgDB{s.pool}, `SELECT (to_regclass('capgate_schema_version') IS NOT NULL)::int`)
	if err != nil {
		return 0, fmt.Errorf("postgres %s: read schema version: %w", s.host, err)
	}
	return have, nil
}

// Migrate applies the migrations the database lacks, in one transaction
// holding the advisory lock MigrateLockKey, so gateways starting at once
// don't race. It fails when the database does not answer, or its schema is
// newer than this capgate knows.
func (s *Store) Migrate(ctx context.Context) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, MigrateLockKey); err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		return migrate.Run(ctx, pgDB{tx}, migrations)
	})
	if err != nil {
		return fmt.Errorf("open postgres %s: migrate: %w", s.host, err)
	}
	return nil
}

// pgDB is a migrate.DB over a pool or a transaction.
type pgDB struct {
	q interface {
		Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
		QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	}
}

func (d pgDB) Exec(ctx context.Context, sql string) error {
	_, err := d.q.Exec(ctx, sql)
	return err
}

func (d pgDB) QueryInt(ctx context.Context, sql string) (int, error) {
	var n int
	err := d.q.QueryRow(ctx, sql).Scan(&n)
	return n, err
}
