package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capgate/capgate/config"
	"github.com/capgate/capgate/configtest"
	"github.com/capgate/capgate/settings"
	"github.com/capgate/capgate/sqlite"
)

// MustOpen opens a store in a new file under tb's temp dir.
func MustOpen(tb testing.TB) *sqlite.Store {
	tb.Helper()
	return mustOpenPath(tb, filepath.Join(tb.TempDir(), "capgate.db"))
}

func mustOpenPath(tb testing.TB, path string) *sqlite.Store {
	tb.Helper()
	s, err := sqlite.Open(context.Background(), path)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	return s
}

func TestConformance(t *testing.T) {
	configtest.Run(t, func(tb testing.TB) config.Store { return MustOpen(tb) })
}

func TestReopenKeepsTheHistory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "..", "capgate.db")
	ctx := context.Background()
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	v := configtest.Append(t, s, settings.Default(nil, settings.ModeOff).Doc())
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpenPath(t, path)
	got, err := s.Latest(ctx)
	if err != nil || got == nil || got.ID != v.ID {
		t.Fatalf("Latest after reopening = %+v, %v; want version %d", got, err, v.ID)
	}
}

func TestNewerSchemaIsAnError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "capgate.db")
	s := mustOpenPath(t, path)
	_ = s
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`INSERT INTO capgate_schema_version (version) VALUES (999)`); err != nil {
		t.Fatal(err)
	}
	_, err = sqlite.Open(context.Background(), path)
	if err == nil || !strings.Contains(err.Error(), "schema is version 999, newer than this capgate knows") {
		t.Fatalf("Open of a newer schema: %v; want a clear error", err)
	}
}

// TestTwoStoresShareAFile: two stores on one file (as the CLI and a
// gateway) write and read at once without "database is locked".
func TestTwoStoresShareAFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "capgate.db")
	a, b := mustOpenPath(t, path), mustOpenPath(t, path)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := range 40 {
		store := a
		if i%2 == 1 {
			store = b
		}
		wg.Go(func() {
			_, err := store.Update(ctx, func(*config.Version) (*config.Version, error) {
				return &config.Version{Config: map[string]any{"i": i}, Source: "command"}, nil
			})
			errs <- err
		})
		wg.Go(func() {
			_, err := store.LatestWithin(ctx, 10*time.Second) // generous: this is about locks, not speed
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := configtest.Rows(t, a); n != 40 {
		t.Fatalf("%d rows; want 40", n)
	}
}
