package migrate_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/capgate/capgate/internal/migrate"
)

func TestLoadAndPending(t *testing.T) {
	fsys := fstest.MapFS{
		"migrations/0002_more.sql":  {Data: []byte("B")},
		"migrations/0001_first.sql": {Data: []byte("A")},
	}
	ms, err := migrate.Load(fsys)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0].Version != 1 || ms[1].SQL != "B" || migrate.Latest(ms) != 2 {
		t.Fatalf("loaded %+v", ms)
	}
	for have, want := range map[int]int{0: 2, 1: 1, 2: 0} {
		p, err := migrate.Pending(ms, have)
		if err != nil || len(p) != want {
			t.Errorf("Pending(have %d) = %d migrations, %v; want %d", have, len(p), err, want)
		}
	}
	if _, err := migrate.Pending(ms, 3); err == nil || !strings.Contains(err.Error(), "newer than this capgate knows (2)") {
		t.Fatalf("a newer database: %v", err)
	}
	if _, err := migrate.Load(fstest.MapFS{"migrations/x.sql": {}}); err == nil {
		t.Fatal("a name without a version was accepted")
	}
	if _, err := migrate.Load(fstest.MapFS{}); err == nil {
		t.Fatal("no migrations was accepted")
	}
}

// fakeDB records the statements run and answers QueryInt from a map.
type fakeDB struct {
	ran     []string
	answers map[string]int
	failOn  string
}

func (d *fakeDB) Exec(_ context.Context, sql string) error {
	if d.failOn != "" && strings.Contains(sql, d.failOn) {
		return errors.New("boom")
	}
	d.ran = append(d.ran, sql)
	return nil
}

func (d *fakeDB) QueryInt(_ context.Context, sql string) (int, error) {
	n, ok := d.answers[sql]
	if !ok {
		return 0, fmt.Errorf("unexpected query %q", sql)
	}
	return n, nil
}

const readVersion = `SELECT coalesce(max(version), 0) FROM capgate_schema_version`

func TestRun(t *testing.T) {
	fsys := fstest.MapFS{
		"migrations/0001_first.sql": {Data: []byte("CREATE A")},
		"migrations/0002_more.sql":  {Data: []byte("CREATE B")},
	}
	db := &fakeDB{answers: map[string]int{readVersion: 1}}
	if err := migrate.Run(context.Background(), db, fsys); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`CREATE TABLE IF NOT EXISTS capgate_schema_version (version integer NOT NULL)`,
		"CREATE B", `INSERT INTO capgate_schema_version (version) VALUES (2)`,
	}
	if !slices.Equal(db.ran, want) {
		t.Errorf("Run at version 1 ran %q; want %q", db.ran, want)
	}

	db = &fakeDB{answers: map[string]int{readVersion: 0}, failOn: "CREATE B"}
	if err := migrate.Run(context.Background(), db, fsys); err == nil || !strings.Contains(err.Error(), "version 2: boom") {
		t.Errorf("Run with a failing migration = %v; want version 2's error", err)
	}
	db = &fakeDB{answers: map[string]int{readVersion: 3}}
	if err := migrate.Run(context.Background(), db, fsys); err == nil || len(db.ran) != 1 {
		t.Errorf("Run on a newer database = %v, ran %q; want an error and no migration", err, db.ran)
	}
}

func TestVersion(t *testing.T) {
	const hasTable = "HAS TABLE"
	for _, tt := range []struct{ has, version, want int }{{0, 7, 0}, {1, 7, 7}} {
		db := &fakeDB{answers: map[string]int{hasTable: tt.has, readVersion: tt.version}}
		if got, err := migrate.Version(context.Background(), db, hasTable); err != nil || got != tt.want {
			t.Errorf("Version(table %d, version %d) = %d, %v; want %d", tt.has, tt.version, got, err, tt.want)
		}
	}
	if got := migrate.Newest(fstest.MapFS{"migrations/0003_x.sql": {}}); got != 3 {
		t.Errorf("Newest = %d; want 3", got)
	}
	if got := migrate.Newest(fstest.MapFS{}); got != 0 {
		t.Errorf("Newest(no migrations) = %d; want 0", got)
	}
}

// fakeStore is a migrate.Store that fails Migrate on demand.
type fakeStore struct {
	migrateErr error
	closed     bool
}

func (s *fakeStore) Migrate(context.Context) error { return s.migrateErr }
func (s *fakeStore) Close() error                  { s.closed = true; return nil }

func TestOpen(t *testing.T) {
	ctx := context.Background()
	ok := &fakeStore{}
	got, err := migrate.Open(ctx, func(_ context.Context, dsn string) (*fakeStore, error) { return ok, nil }, "db")
	if err != nil || got != ok || ok.closed {
		t.Errorf("Open = %v, %v (closed %v); want the store, open", got, err, ok.closed)
	}
	bad := &fakeStore{migrateErr: errors.New("no rights")}
	got, err = migrate.Open(ctx, func(context.Context, string) (*fakeStore, error) { return bad, nil }, "db")
	if err == nil || got != nil || !bad.closed {
		t.Errorf("Open with a failing Migrate = %v, %v (closed %v); want an error, nil and the store closed", got, err, bad.closed)
	}
	_, err = migrate.Open(ctx, func(context.Context, string) (*fakeStore, error) { return nil, errors.New("bad url") }, "db")
	if err == nil || err.Error() != "bad url" {
		t.Errorf("Open with a failing connect = %v; want its error", err)
	}
}
