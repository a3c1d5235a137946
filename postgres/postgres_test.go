package postgres_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/capgate/capgate/config"
	"github.com/capgate/capgate/configtest"
	"github.com/capgate/capgate/postgres"
	"github.com/capgate/capgate/settings"
)

// MustOpen opens a store in a schema of its own.
func MustOpen(tb testing.TB) *postgres.Store {
	tb.Helper()
	return mustOpenURL(tb, configtest.PostgresSchema(tb))
}

func mustOpenURL(tb testing.TB, u string) *postgres.Store {
	tb.Helper()
	s, err := postgres.Open(context.Background(), u)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	configtest.Run(t, func(tb testing.TB) config.Store { return MustOpen(tb) })
}

func TestOpenTwiceAndNewerSchema(t *testing.T) {
	u := configtest.PostgresSchema(t)
	ctx := context.Background()
	s := mustOpenURL(t, u)
	v := configtest.Append(t, s, settings.Default(nil, settings.ModeOff).Doc())
	again := mustOpenURL(t, u)
	if got, err := again.Latest(ctx); err != nil || got == nil || got.ID != v.ID {
		t.Fatalf("Latest through a second store = %+v, %v; want version %d", got, err, v.ID)
	}
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `INSERT INTO capgate_schema_version (version) VALUES (999)`); err != nil {
		t.Fatal(err)
	}
	_, err = postgres.Open(ctx, u)
	if err == nil || !strings.Contains(err.Error(), "schema is version 999, newer than this capgate knows") {
		t.Fatalf("Open of a newer schema: %v; want a clear error", err)
	}
}

// TestLockedTable: original §1.16. Another connection holding an ACCESS
// EXCLUSIVE lock on capacity_configs costs a refresh at most the read
// timeout; the caller gets the last known config (enforce as shadow), and
// reads work again once the lock is gone.
func TestLockedTable(t *testing.T) {
	u := configtest.PostgresSchema(t)
	store := mustOpenURL(t, u)
	s, clock, _, logs := configtest.Service(store)
	s.ReadTimeout = 200 * time.Millisecond
	ctx := context.Background()
	if _, err := s.Save(ctx, config.Edit{Set: configtest.Doc(t, `{"es2_knn":1,"mode":"enforce"}`), Source: "api"}); err != nil {
		t.Fatal(err)
	}

	locker, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close(ctx)
	tx, err := locker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE capacity_configs IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}

	for range 2 { // twice: a connection the first timeout spoiled must not make the second read hang
		clock.Advance(config.DefaultCacheTTL)
		start := time.Now()
		got := s.Config(ctx)
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("a refresh with the table locked took %v; want about the 200ms read timeout", d)
		}
		if es2 := configtest.Number(t, got, "es2_knn"); got.Mode != settings.ModeShadow || es2 != 1 {
			t.Errorf("Config with the table locked = mode %s, es2_knn %d; want the last known config as shadow", got.Mode, es2)
		}
	}
	if n := logs.Count("WARN"); n != 2 {
		t.Errorf("logs = %q; want two WARNINGs", logs.Records())
	}

	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	clock.Advance(config.DefaultCacheTTL)
	if got := s.Config(ctx); got.Mode != settings.ModeEnforce || configtest.Number(t, got, "es2_knn") != 1 {
		t.Errorf("Config after the lock is gone = %+v; want enforce and es2_knn 1", got)
	}
	if err := store.Ping(ctx); err != nil {
		t.Errorf("Ping after the lock: %v", err)
	}
	if n := logs.Count("WARN"); n != 2 {
		t.Errorf("logs = %q; want no new WARNING", logs.Records())
	}
}
