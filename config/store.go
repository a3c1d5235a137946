package config

import (
	"context"
	"time"

	"github.com/capgate/capgate/internal/jsontree"
	"github.com/capgate/capgate/settings"
)

// The sources of a config version.
const (
	SourceAPI     = "api"     // the staff API
	SourceCommand = "command" // the capgate capacity CLI
)

// Version is one row of the config history (table capacity_configs).
// The newest version is the config in force; with none, the defaults.
type Version struct {
	ID             int64          // assigned by the store, increasing
	Config         map[string]any // the complete config this version put in force
	PreviousConfig map[string]any // the config in force before it; nil if unknown
	CreatedBy      string         // who made the change; "" if unknown
	CreatedAt      time.Time      // set by the store on insert
	Source         string         // SourceAPI or SourceCommand
	Note           string         // free text; "" for none
	RollbackOf     int64          // the version this one restored (a rollback); 0 for any other change
}

// Diff returns what the version changed: its Config against its
// PreviousConfig (all of Config when that is unknown).
func (v *Version) Diff() settings.Diff {
	var prev any
	if v.PreviousConfig != nil {
		prev = v.PreviousConfig
	}
	return settings.Diff(jsontree.Diff(prev, v.Config))
}

// VersionReader is a Store that reads any one version, for a
// rollback (Service.Rollback). The sqlite and postgres stores are
// ones.
type VersionReader interface {
	// Version returns the version id, or nil and no error when there is
	// none.
	Version(ctx context.Context, id int64) (*Version, error)
}

// Store keeps the config history, append-only. Implementations
// (sqlite, postgres) decode stored JSON keeping numbers exact, as
// json.Number. Every method is safe for concurrent use, also by several
// processes sharing one database. Any error but the one fn returns from
// Update is a store failure.
type Store interface {
	// Latest returns the newest version, or nil and no error when there is
	// none. It returns an error when the database can't be read or a row
	// can't be decoded.
	Latest(ctx context.Context) (*Version, error)

	// LatestWithin is Latest for the request path: the read gives up after
	// timeout, by a context deadline and, where the database has one, a
	// statement timeout, so neither a locked table nor a stalled connection
	// holds the caller longer. A read that gave up returns an error
	// wrapping context.DeadlineExceeded or the database's timeout error.
	LatestWithin(ctx context.Context, timeout time.Duration) (*Version, error)

	// History returns up to limit versions, newest first (limit < 1 means
	// 1). It returns an error when the database can't be read.
	History(ctx context.Context, limit int) ([]Version, error)

	// Update is a serialized read-modify-append: while holding the writers'
	// lock (PostgreSQL pg_advisory_xact_lock, SQLite BEGIN IMMEDIATE), it
	// reads the latest version (nil when none) and calls fn with it. When fn
	// returns a version, Update appends it, setting its ID and CreatedAt,
	// and returns it; when fn returns nil, nothing is appended and Update
	// returns nil, nil. An error from fn is returned as is (match it with
	// errors.Is/As) and nothing is appended. Other errors are store
	// failures, wrapped; then nothing was appended either.
	Update(ctx context.Context, fn func(latest *Version) (*Version, error)) (*Version, error)

	// Ping reports whether the database answers.
	Ping(ctx context.Context) error

	// Close releases the store's connections. It returns the first error.
	Close() error
}
