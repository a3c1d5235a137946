package skipnote

import (
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func TestOneLinePerSuite(t *testing.T) {
	reset()
	t.Cleanup(reset)
	for range 3 {
		t.Run("redis", func(t *testing.T) { Skip(t, "the Redis tests", "set CAPGATE_TEST_REDIS_URL=redis://127.0.0.1:6379/15") })
	}
	t.Run("pg", func(t *testing.T) { Skip(t, "the PostgreSQL tests", "set CAPGATE_TEST_POSTGRES_URL=postgres://…") })
	want := []string{
		"SKIP ./internal/skipnote: the PostgreSQL tests (1 test): set CAPGATE_TEST_POSTGRES_URL=postgres://… to run them",
		"SKIP ./internal/skipnote: the Redis tests (3 tests): set CAPGATE_TEST_REDIS_URL=redis://127.0.0.1:6379/15 to run them",
	}
	if got := Lines(); !slices.Equal(got, want) {
		t.Errorf("lines\n%q\nwant\n%q", got, want)
	}
}

// The heartbeat writes a line every period, naming the package and how
// long its tests have run, and nothing once stopped.
func TestHeartbeat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var b strings.Builder
		stop := heartbeatTo(&b, 30*time.Second, "./slow")
		time.Sleep(65 * time.Second)
		stop()
		time.Sleep(time.Minute)
		want := "… ./slow: tests still running (30s)\n… ./slow: tests still running (1m0s)\n"
		if b.String() != want {
			t.Errorf("heartbeat wrote %q; want %q", b.String(), want)
		}
	})
}
