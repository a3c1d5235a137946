package config

import (
	"database/sql"
	"fmt"
	"time"

	"github.com/capgate/capgate/internal/jsontree"
)

// The capacity_configs row both SQL stores (sqlite, postgres) keep: how a
// Version is written to its columns (Version.Columns) and read back
// (ScanVersions). It is here, beside Version, so the two stores share one
// row format; the SQL and the driver stay with each store.

// VersionRows is what a query's result offers in both drivers
// (database/sql's *sql.Rows, pgx.Rows). Closing it stays with the caller.
type VersionRows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// ScanVersions reads the versions of rows, whose columns are, in order: id,
// config and previous_config (JSON text, previous_config NULL when
// unknown), created_by (NULL when unknown), created_at, source and note.
// created_at is scanned into a T, which createdAt turns into a time, made
// UTC. It returns the first error scanning, decoding or reading a row.
func ScanVersions[T any](rows VersionRows, createdAt func(T) (time.Time, error)) ([]Version, error) {
	var vs []Version
	for rows.Next() {
		var (
			v        Version
			cfg      string
			prev, by sql.NullString
			at       T
			rollback sql.NullInt64
		)
		if err := rows.Scan(&v.ID, &cfg, &prev, &by, &at, &v.Source, &v.Note, &rollback); err != nil {
			return nil, err
		}
		var err error
		if v.Config, err = jsontree.ParseObject([]byte(cfg)); err != nil {
			return nil, fmt.Errorf("version %d: config: %w", v.ID, err)
		}
		if prev.Valid {
			if v.PreviousConfig, err = jsontree.ParseObject([]byte(prev.String)); err != nil {
				return nil, fmt.Errorf("version %d: previous_config: %w", v.ID, err)
			}
		}
		v.CreatedBy = by.String
		v.RollbackOf = rollback.Int64
		t, err := createdAt(at)
		if err != nil {
			return nil, fmt.Errorf("version %d: created_at: %w", v.ID, err)
		}
		v.CreatedAt = t.UTC()
		vs = append(vs, v)
	}
	return vs, rows.Err()
}

// VersionColumns are a version's values to insert: its JSON documents as
// text, NULL for an unknown previous config, NULL for an empty CreatedBy,
// NULL for a RollbackOf of 0.
type VersionColumns struct {
	Config         string
	PreviousConfig sql.NullString
	CreatedBy      sql.NullString
	RollbackOf     sql.NullInt64
}

// Columns returns v's columns. It fails when a document can't be encoded.
func (v *Version) Columns() (VersionColumns, error) {
	cfg, err := jsontree.Encode(v.Config)
	if err != nil {
		return VersionColumns{}, fmt.Errorf("config: %w", err)
	}
	c := VersionColumns{Config: cfg, CreatedBy: sql.NullString{String: v.CreatedBy, Valid: v.CreatedBy != ""},
		RollbackOf: sql.NullInt64{Int64: v.RollbackOf, Valid: v.RollbackOf != 0}}
	if v.PreviousConfig != nil {
		if c.PreviousConfig.String, err = jsontree.Encode(v.PreviousConfig); err != nil {
			return VersionColumns{}, fmt.Errorf("previous_config: %w", err)
		}
		c.PreviousConfig.Valid = true
	}
	return c, nil
}
