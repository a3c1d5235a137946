package sqlite

import (
	"context"
	"fmt"

	"github.com/capgate/capgate/internal/migrate"
)

// SchemaVersion is the newest schema version this package knows.
func SchemaVersion() int {
	ms, err := migrate.Load(migrations)
	if err != nil {
		return 0
	}
	return migrate.Latest(ms)
}

// DatabaseVersion returns the schema version of the database: 0 when
// capgate's tables are not there yet. It fails when the file can't be
// read.
func (s *Store) DatabaseVersion(ctx context.Context) (int, error) {
	var n int
	if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'capgate_schema_version'`).Scan(&n); err != nil {
		return 0, fmt.Errorf("sqlite %s: read schema version: %w", s.path, err)
	}
	if n == 0 {
		return 0, nil
	}
	var have int
	if err := s.db.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM capgate_schema_version`).Scan(&have); err != nil {
		return 0, fmt.Errorf("sqlite %s: read schema version: %w", s.path, err)
	}
	return have, nil
}

// Migrate applies the migrations the database lacks, in one write
// transaction, so two processes opening a new file at once don't race. It
// fails if the file can't be written, or its schema is newer than this
// capgate knows.
func (s *Store) Migrate(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("open sqlite %s: %w", s.path, err)
		}
	}()
	ms, err := migrate.Load(migrations)
	if err != nil {
		return fmt.Errorf("load migrations: %w", err)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate: begin: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS capgate_schema_version (version INTEGER NOT NULL)`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	var have int
	if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM capgate_schema_version`).Scan(&have); err != nil {
		return fmt.Errorf("migrate: read schema version: %w", err)
	}
	pending, err := migrate.Pending(ms, have)
	if err != nil {
		return err
	}
	for _, m := range pending {
		if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
			return fmt.Errorf("migrate to version %d: %w", m.Version, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO capgate_schema_version (version) VALUES (?)`, m.Version); err != nil {
			return fmt.Errorf("migrate to version %d: %w", m.Version, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate: commit: %w", err)
	}
	return nil
}
