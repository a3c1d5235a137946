package lanetest

import (
	"testing"

	"github.com/capgate/capgate/status"
)

// SharedLane returns the shared lane name of st (OCL: api_heavy,
// es2_knn), failing tb when st has none.
func SharedLane(tb testing.TB, st status.Snapshot, name string) status.Lane {
	tb.Helper()
	l, ok := st.SharedLane(name)
	if !ok {
		tb.Fatalf("status %+v has no shared lane %s", st, name)
	}
	return l
}

// Entries returns the entries of the keyed lane name of st (OCL:
// api_heavy_task, tier, user), failing tb when st has none.
func Entries(tb testing.TB, st status.Snapshot, name string) map[string]status.Lane {
	tb.Helper()
	kl, ok := st.KeyedLane(name)
	if !ok {
		tb.Fatalf("status %+v has no keyed lane %s", st, name)
	}
	return kl.Entries
}

// Int returns a pointer to n, for a status.Lane's BulkLimit.
func Int(n int) *int { return &n }
