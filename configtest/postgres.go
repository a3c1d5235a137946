package configtest

import (
	"context"
	"net/url"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/capgate/capgate/internal/randhex"
	"github.com/capgate/capgate/internal/skipnote"
)

// PostgresURLEnv names the PostgreSQL the tests run against, e.g.
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable.
const PostgresURLEnv = "CAPGATE_TEST_POSTGRES_URL"

// PostgresSchema makes a new schema for tb in the test database, drops it
// in tb.Cleanup, and returns a URL whose search_path is that schema. It
// skips tb when CAPGATE_TEST_POSTGRES_URL is not set.
func PostgresSchema(tb testing.TB) string {
	tb.Helper()
	base := os.Getenv(PostgresURLEnv)
	if base == "" {
		skipnote.Skip(tb, "the PostgreSQL tests", "set "+PostgresURLEnv+"='postgres://postgres@127.0.0.1:5432/test?sslmode=disable'")
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		tb.Fatalf("connect to %s: %v", PostgresURLEnv, err)
	}
	defer conn.Close(ctx)
	schema := "capgate_test_" + randhex.String(6)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		tb.Fatalf("create schema: %v", err)
	}
	tb.Cleanup(func() {
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			tb.Errorf("connect to drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			tb.Errorf("drop schema %s: %v", schema, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		tb.Fatalf("parse %s: %v", PostgresURLEnv, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}
