// Package migrate keeps the schema of both SQL config stores (sqlite,
// postgres) up to date: it reads their embedded migrations, decides which
// ones a database still lacks, runs them and records the version, and
// opens a store with its schema migrated. The transaction, its lock and the
// driver stay with each store, behind DB.
package migrate

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
)

// DB runs statements in one database's driver: a connection pool, or the
// transaction the migrations run in.
type DB interface {
	// Exec runs one statement.
	Exec(ctx context.Context, sql string) error
	// QueryInt runs a query that returns one integer.
	QueryInt(ctx context.Context, sql string) (int, error)
}

// The version table: one row per migration applied.
const (
	createVersionTable = `CREATE TABLE IF NOT EXISTS capgate_schema_version (version integer NOT NULL)`
	readVersion        = `SELECT coalesce(max(version), 0) FROM capgate_schema_version`
)

// Run applies the migrations of fsys that the database lacks, recording
// each in the version table (made if missing). It runs in db, which should
// be a transaction the caller holds a lock in, so that processes starting
// at once don't race; committing stays with the caller. It fails when the
// migrations can't be read, a statement fails, or the database's schema is
// newer than fsys knows.
func Run(ctx context.Context, db DB, fsys fs.FS) error {
	ms, err := Load(fsys)
	if err != nil {
		return fmt.Errorf("load migrations: %w", err)
	}
	if err := db.Exec(ctx, createVersionTable); err != nil {
		return fmt.Errorf("create the version table: %w", err)
	}
	have, err := db.QueryInt(ctx, readVersion)
	if err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	pending, err := Pending(ms, have)
	if err != nil {
		return err
	}
	for _, m := range pending {
		if err := db.Exec(ctx, m.SQL); err != nil {
			return fmt.Errorf("version %d: %w", m.Version, err)
		}
		// The version is a number from a file name, not input: no placeholder
		// needed, and the two drivers write placeholders differently.
		if err := db.Exec(ctx, fmt.Sprintf(`INSERT INTO capgate_schema_version (version) VALUES (%d)`, m.Version)); err != nil {
			return fmt.Errorf("version %d: %w", m.Version, err)
		}
	}
	return nil
}

// Version returns the schema version of the database: 0 when it has no
// version table yet. hasTable is the database's query for whether the
// table capgate_schema_version exists, returning 1 or 0. It fails when the
// database can't be read.
func Version(ctx context.Context, db DB, hasTable string) (int, error) {
	n, err := db.QueryInt(ctx, hasTable)
	if err != nil || n == 0 {
		return 0, err
	}
	return db.QueryInt(ctx, readVersion)
}

// Newest returns the newest version among the migrations of fsys; 0 when
// they can't be read.
func Newest(fsys fs.FS) int {
	ms, err := Load(fsys)
	if err != nil {
		return 0
	}
	return Latest(ms)
}

// Store is a config store that can bring its own schema up to date.
type Store interface {
	Migrate(ctx context.Context) error
	Close() error
}

// Open connects to dsn with connect, then migrates the store, closing it
// when that fails: how each config store opens. It returns connect's or
// Migrate's error.
func Open[S Store](ctx context.Context, connect func(context.Context, string) (S, error), dsn string) (S, error) {
	s, err := connect(ctx, dsn)
	if err != nil {
		var zero S
		return zero, err
	}
	if err := s.Migrate(ctx); err != nil {
		s.Close()
		var zero S
		return zero, err
	}
	return s, nil
}

// Migration is one schema change, from a file named NNNN_what.sql.
type Migration struct {
	Version int
	SQL     string
}

// Load returns the migrations/*.sql files of fsys in version order. It
// fails when there are none or a name has no version number.
func Load(fsys fs.FS) ([]Migration, error) {
	names, err := fs.Glob(fsys, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var ms []Migration
	for _, name := range names {
		base := strings.TrimPrefix(name, "migrations/")
		num, _, _ := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if err != nil {
			return nil, fmt.Errorf("migration %s: no version number", base)
		}
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		ms = append(ms, Migration{Version: v, SQL: string(b)})
	}
	if len(ms) == 0 {
		return nil, errors.New("no migrations embedded")
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	return ms, nil
}

// Latest returns the newest version of ms (sorted, as Load returns them).
func Latest(ms []Migration) int { return ms[len(ms)-1].Version }

// Pending returns the migrations newer than have, the version a database
// is at. A database newer than every migration is an error: this binary
// doesn't know its schema.
func Pending(ms []Migration, have int) ([]Migration, error) {
	if known := Latest(ms); have > known {
		return nil, fmt.Errorf("the database schema is version %d, newer than this capgate knows (%d): upgrade capgate", have, known)
	}
	i := sort.Search(len(ms), func(i int) bool { return ms[i].Version > have })
	return ms[i:], nil
}
