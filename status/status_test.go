package status_test

import (
	"encoding/json"
	"testing"

	"github.com/capgate/capgate/status"
)

// The wire shape of GET /capacity/status/: the staff API, the status page
// and the CLI read it.
func TestSnapshotJSON(t *testing.T) {
	for _, tt := range []struct {
		name string
		s    status.Snapshot
		want string
	}{
		{"store answered, nothing in flight", status.Snapshot{Mode: "shadow", EnforceFor: "aware", Store: status.OK, Lanes: "memory",
			APIHeavy: &status.APIHeavy{Limit: 4, BulkLimit: 3}, ES2KNN: &status.Lane{Limit: 3}},
			`{"mode":"shadow","enforce_for":"aware","redis":"ok","lanes":"memory",` +
				`"api_heavy":{"in_flight":0,"limit":4,"bulk_limit":3},"es2_knn":{"in_flight":0,"limit":3},` +
				`"lanes_health":"ok","tasks":{},"tiers":{},"users":{}}`},
		{"store answered, calls in flight and waiting, adaptive", status.Snapshot{Mode: "enforce", EnforceFor: "all", Store: status.OK, Lanes: "redis",
			APIHeavy: &status.APIHeavy{InFlight: 2, Limit: 6, BulkLimit: 5, Waiting: 1, Advised: 6, LimitSource: status.LimitAdaptive},
			ES2KNN:   &status.Lane{InFlight: 1, Limit: 3, LimitSource: status.LimitStatic},
			Tasks:    map[string]status.Lane{"t1": {InFlight: 2, Limit: 2}},
			Tiers:    map[string]status.Lane{"preview": {InFlight: 1, Limit: 2}, "core": {InFlight: 1, Limit: 4, Waiting: 1}},
			Users:    map[string]status.User{"pam": {InFlight: 2, Waiting: 1}}},
			`{"mode":"enforce","enforce_for":"all","redis":"ok","lanes":"redis",` +
				`"api_heavy":{"in_flight":2,"limit":6,"bulk_limit":5,"waiting":1,"advised":6,"limit_source":"adaptive"},` +
				`"es2_knn":{"in_flight":1,"limit":3,"limit_source":"static"},` +
				`"lanes_health":"ok","tasks":{"t1":{"in_flight":2,"limit":2}},` +
				`"tiers":{"core":{"in_flight":1,"limit":4,"waiting":1},"preview":{"in_flight":1,"limit":2}},` +
				`"users":{"pam":{"in_flight":2,"waiting":1}}}`},
		{"store failed: no lanes, whatever is set", status.Snapshot{Mode: "shadow", EnforceFor: "aware", Store: "count lanes: i/o timeout", Lanes: "redis",
			APIHeavy: &status.APIHeavy{Limit: 4}, Tasks: map[string]status.Lane{"t1": {}}},
			`{"mode":"shadow","enforce_for":"aware","redis":"count lanes: i/o timeout","lanes":"redis","lanes_health":"count lanes: i/o timeout"}`},
	} {
		b, err := json.Marshal(tt.s)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if string(b) != tt.want {
			t.Errorf("%s:\n got %s\nwant %s", tt.name, b, tt.want)
		}
	}
}
