package capgate

import "testing"

func TestDegradedLimit(t *testing.T) {
	for _, c := range []struct {
		lane     LaneName
		limit, n int
		want     int
	}{
		{LaneAPIHeavy, 6, 3, 2},
		{LaneAPIHeavy, 7, 3, 2}, // rounded down
		{LaneES2KNN, 2, 3, 1},   // at least 1
		{LaneTier, 0, 3, 0},     // paused stays paused
		{LaneTier, 5, 1, 5},
		{LaneTier, 5, 0, 5}, // never counted: as one gateway
		{LaneUser, 2, 3, 2}, // exact: a user's calls on this gateway
		{LaneTask, 2, 3, 2}, // this gateway's own lane
	} {
		if got := degradedLimit(Lane{Name: c.lane, Limit: c.limit}, c.n); got != c.want {
			t.Errorf("%s limit %d over %d gateways: %d, want %d", c.lane, c.limit, c.n, got, c.want)
		}
	}
}
