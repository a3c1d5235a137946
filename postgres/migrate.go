package postgres

import (
	"context"
	"embed"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/capgate/capgate/internal/migrate"
)

//go:embed migrations/*.sql
var migrations embed.FS

// SchemaVersion is the newest schema version this package knows.
func SchemaVersion() int {
	ms, err := migrate.Load(migrations)
	if err != nil {
		return 0
	}
	return migrate.Latest(ms)
}

// DatabaseVersion returns the schema version of the database: 0 when
// capgate's tables are not there yet. It fails when the database can't be
// read.
func (s *Store) DatabaseVersion(ctx context.Context) (int, error) {
	var exists bool
	if err := s.pool.QueryRow(ctx, `SELECT to_regclass('capgate_schema_version') IS NOT NULL`).Scan(&exists); err != nil {
		return 0, fmt.Errorf("postgres %s: read schema version: %w", s.host, err)
	}
	if !exists {
		return 0, nil
	}
	var have int
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM capgate_schema_version`).Scan(&have); err != nil {
		return 0, fmt.Errorf("postgres %s: read schema version: %w", s.host, err)
	}
	return have, nil
}

// Migrate applies the migrations the database lacks, in one transaction
// holding the advisory lock MigrateLockKey, so gateways starting at once
// don't race. It fails when the database does not answer, or its schema is
// newer than this capgate knows.
func (s *Store) Migrate(ctx context.Context) error {
	ms, err := migrate.Load(migrations)
	if err != nil {
		return fmt.Errorf("load migrations: %w", err)
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, MigrateLockKey); err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS capgate_schema_version (version integer NOT NULL)`); err != nil {
			return err
		}
		var have int
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM capgate_schema_version`).Scan(&have); err != nil {
			return fmt.Errorf("read schema version: %w", err)
		}
		pending, err := migrate.Pending(ms, have)
		if err != nil {
			return err
		}
		for _, m := range pending {
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return fmt.Errorf("version %d: %w", m.Version, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO capgate_schema_version (version) VALUES ($1)`, m.Version); err != nil {
				return fmt.Errorf("version %d: %w", m.Version, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("open postgres %s: migrate: %w", s.host, err)
	}
	return nil
}
