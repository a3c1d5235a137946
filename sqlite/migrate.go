package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"

	"github.com/capgate/capgate/internal/migrate"
)

//go:embed migrations/*.sql
var migrations embed.FS

// SchemaVersion is the newest schema version this package knows.
func SchemaVersion() int { return migrate.Newest(migrations) }

// DatabaseVersion returns the schema version of the database: 0 when
// capgate's tables are not there yet. It fails when the file can't be
// read.
func (s *Store) DatabaseVersion(ctx context.Context) (int, error) {
	have, err := migrate.Version(ctx, sqlDB{s.db},
		`SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'capgate_schema_version'`)
	if err != nil {
		return 0, fmt.Errorf("sqlite %s: read schema version: %w", s.path, err)
	}
	return have, nil
}

// Migrate applies the migrations the database lacks, in one write
// transaction, so two processes opening a new file at once don't race. It
// fails if the file can't be written, or its schema is newer than this
// capgate knows.
func (s *Store) Migrate(ctx context.Context) error {
	if err := s.migrate(ctx); err != nil {
		return fmt.Errorf("open sqlite %s: migrate: %w", s.path, err)
	}
	return nil
}

func (s *Store) migrate(ctx context.Context) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback()
	if err := migrate.Run(ctx, sqlDB{tx}, migrations); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// sqlDB is a migrate.DB over a database or a transaction.
type sqlDB struct {
	q interface {
		ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
		QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	}
}

func (d sqlDB) Exec(ctx context.Context, query string) error {
	_, err := d.q.ExecContext(ctx, query)
	return err
}

func (d sqlDB) QueryInt(ctx context.Context, query string) (int, error) {
	var n int
	err := d.q.QueryRowContext(ctx, query).Scan(&n)
	return n, err
}
