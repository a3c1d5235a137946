package config_test

import (
	"database/sql"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/capgate/capgate/config"
)

// fakeRows hands out rows of column values, as a driver's Scan would.
type fakeRows struct {
	rows [][]any
	i    int
	err  error
}

func (r *fakeRows) Next() bool { r.i++; return r.i <= len(r.rows) }
func (r *fakeRows) Err() error { return r.err }

func (r *fakeRows) Scan(dest ...any) error {
	row := r.rows[r.i-1]
	for i, d := range dest {
		switch d := d.(type) {
		case *sql.NullString:
			if err := d.Scan(row[i]); err != nil {
				return err
			}
		case *sql.NullInt64:
			if err := d.Scan(row[i]); err != nil {
				return err
			}
		default:
			reflect.ValueOf(d).Elem().Set(reflect.ValueOf(row[i]))
		}
	}
	return nil
}

func TestVersionColumnsThenScanVersions(t *testing.T) {
	at := time.Date(2026, 11, 30, 23, 0, 0, 123456000, time.FixedZone("x", 3600))
	v := config.Version{
		ID: 7, Config: map[string]any{"es2_knn": json.Number("3"), "note": "<a&b>"},
		PreviousConfig: map[string]any{"es2_knn": json.Number("2")},
		CreatedBy:      "alice", CreatedAt: at.UTC(), Source: config.SourceAPI, Note: "n", RollbackOf: 3,
	}
	cols, err := v.Columns()
	if err != nil {
		t.Fatal(err)
	}
	if cols.Config != `{"es2_knn":3,"note":"<a&b>"}` || cols.PreviousConfig != (sql.NullString{String: `{"es2_knn":2}`, Valid: true}) ||
		cols.CreatedBy != (sql.NullString{String: "alice", Valid: true}) || cols.RollbackOf != (sql.NullInt64{Int64: 3, Valid: true}) {
		t.Fatalf("Columns = %+v", cols)
	}
	bare, err := (&config.Version{Config: map[string]any{}}).Columns()
	if err != nil || bare.PreviousConfig.Valid || bare.CreatedBy.Valid || bare.RollbackOf.Valid {
		t.Fatalf("Columns(no previous, no creator) = %+v, %v; want NULLs", bare, err)
	}

	rows := &fakeRows{rows: [][]any{
		{int64(7), cols.Config, cols.PreviousConfig.String, "alice", at.Format(time.RFC3339Nano), "api", "n", int64(3)},
		{int64(8), `{}`, nil, nil, at.Format(time.RFC3339Nano), "command", "", nil},
	}}
	vs, err := config.ScanVersions(rows, func(s string) (time.Time, error) { return time.Parse(time.RFC3339Nano, s) })
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 2 || !reflect.DeepEqual(vs[0], v) {
		t.Fatalf("ScanVersions = %+v; want first %+v", vs, v)
	}
	if vs[0].CreatedAt.Location() != time.UTC {
		t.Errorf("created_at in %v; want UTC", vs[0].CreatedAt.Location())
	}
	if vs[1].PreviousConfig != nil || vs[1].CreatedBy != "" {
		t.Errorf("NULL columns gave %+v; want no previous config and no creator", vs[1])
	}
}

func TestScanVersionsErrors(t *testing.T) {
	parse := func(s string) (time.Time, error) { return time.Parse(time.RFC3339Nano, s) }
	for _, tt := range []struct {
		row  []any
		want string
	}{
		{[]any{int64(1), `[1]`, nil, nil, "2026-01-01T00:00:00Z", "api", "", nil}, "version 1: config: "},
		{[]any{int64(2), `{}`, `{`, nil, "2026-01-01T00:00:00Z", "api", "", nil}, "version 2: previous_config: "},
		{[]any{int64(3), `{}`, nil, nil, "yesterday", "api", "", nil}, "version 3: created_at: "},
	} {
		_, err := config.ScanVersions(&fakeRows{rows: [][]any{tt.row}}, parse)
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("ScanVersions(%v) = %v; want an error starting %q", tt.row, err, tt.want)
		}
	}
	boom := errors.New("connection lost")
	if _, err := config.ScanVersions(&fakeRows{err: boom}, parse); !errors.Is(err, boom) {
		t.Errorf("ScanVersions with a read error = %v; want it", err)
	}
}
