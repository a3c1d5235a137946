package sqlite

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/capgate/capgate"
)

// migration is one embedded schema change, named NNNN_what.sql.
type migration struct {
	version int
	sql     string
}

// loadMigrations returns the embedded migrations in version order.
func loadMigrations() ([]migration, error) {
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, name := range names {
		base := strings.TrimPrefix(name, "migrations/")
		num, _, _ := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if err != nil {
			return nil, fmt.Errorf("migration %s: no version number", base)
		}
		b, err := fs.ReadFile(migrations, name)
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, sql: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	return ms, nil
}

// SchemaVersion is the newest schema version this package knows.
func SchemaVersion() int {
	ms, err := loadMigrations()
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].version
}

// migrate applies the migrations the database lacks, in one write
// transaction, so two processes opening a new file at once don't race.
func (s *Store) migrate(ctx context.Context) error {
	ms, err := loadMigrations()
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
	if known := ms[len(ms)-1].version; have > known {
		return fmt.Errorf("the database schema is version %d, newer than this capgate knows (%d): upgrade capgate", have, known)
	}
	for _, m := range ms {
		if m.version <= have {
			continue
		}
		if _, err := tx.ExecContext(ctx, m.sql); err != nil {
			return fmt.Errorf("migrate to version %d: %w", m.version, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO capgate_schema_version (version) VALUES (?)`, m.version); err != nil {
			return fmt.Errorf("migrate to version %d: %w", m.version, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate: commit: %w", err)
	}
	return nil
}

// encode returns a config document as compact JSON.
func encode(doc map[string]any) (string, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		return "", err
	}
	return strings.TrimSuffix(buf.String(), "\n"), nil
}

// decode parses a stored JSON object, numbers as json.Number.
func decode(text string) (map[string]any, error) {
	v, err := capgate.ParseDoc([]byte(text))
	if err != nil {
		return nil, err
	}
	if v == nil {
		return nil, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("not a JSON object")
	}
	return m, nil
}
