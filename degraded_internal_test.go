package capgate

import "testing"

func TestDegradedLimit(t *testing.T) {
	for _, c := range []struct {
		lane     string
		limit, n int
		want     int
	}{
		{"api_heavy", 6, 3, 2},
		{"api_heavy", 7, 3, 2}, // rounded down
		{"es2_knn", 2, 3, 1},   // at least 1
		{"tier", 0, 3, 0},      // paused stays paused
		{"tier", 5, 1, 5},
		{"tier", 5, 0, 5},           // never counted: as one gateway
		{"user", 2, 3, 2},           // exact: a user's calls on this gateway
		{"api_heavy_task", 2, 3, 2}, // this gateway's own lane
	} {
		if got := degradedLimit(oclLane(c.lane, c.limit), c.n); got != c.want {
			t.Errorf("%s limit %d over %d gateways: %d, want %d", c.lane, c.limit, c.n, got, c.want)
		}
	}
}
