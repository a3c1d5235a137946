package status_test

import (
	"encoding/json"
	"fmt"
	"strings"
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
		{"store answered, nothing in flight", ocl(status.Snapshot{Mode: "shadow", EnforceFor: "aware", Store: status.OK, Lanes: "memory"},
			&status.Lane{Limit: 4, BulkLimit: ptr(3)}, &status.Lane{Limit: 3}, nil, nil, nil),
			`{"mode":"shadow","enforce_for":"aware","enforced":"none","redis":"none: lanes in memory","lanes":"memory",` +
				`"api_heavy":{"in_flight":0,"limit":4,"bulk_limit":3},"es2_knn":{"in_flight":0,"limit":3},` +
				`"lanes_health":"ok","tasks":{},"tiers":{},"users":{}}`},
		{"store answered, calls in flight and waiting, adaptive", ocl(status.Snapshot{Mode: "enforce", EnforceFor: "all", Store: status.OK, Lanes: "redis"},
			&status.Lane{InFlight: 2, Limit: 6, BulkLimit: ptr(5), Waiting: 1, Advised: 6, LimitSource: status.LimitAdaptive},
			&status.Lane{InFlight: 1, Limit: 3, LimitSource: status.LimitStatic},
			map[string]status.Lane{"t1": {InFlight: 2, Limit: 2}},
			map[string]status.Lane{"preview": {InFlight: 1, Limit: 2}, "core": {InFlight: 1, Limit: 4, Waiting: 1}},
			map[string]status.Lane{"pam": {InFlight: 2, Waiting: 1}}),
			`{"mode":"enforce","enforce_for":"all","enforced":"all","redis":"ok","lanes":"redis",` +
				`"api_heavy":{"in_flight":2,"limit":6,"bulk_limit":5,"waiting":1,"advised":6,"limit_source":"adaptive"},` +
				`"es2_knn":{"in_flight":1,"limit":3,"limit_source":"static"},` +
				`"lanes_health":"ok","tasks":{"t1":{"in_flight":2,"limit":2}},` +
				`"tiers":{"core":{"in_flight":1,"limit":4,"waiting":1},"preview":{"in_flight":1,"limit":2}},` +
				`"users":{"pam":{"in_flight":2,"waiting":1}}}`},
		{"store failed: no lanes, whatever is set", ocl(status.Snapshot{Mode: "shadow", EnforceFor: "aware", Store: "count lanes: i/o timeout", Lanes: "redis"},
			&status.Lane{Limit: 4}, nil, map[string]status.Lane{"t1": {}}, nil, nil),
			`{"mode":"shadow","enforce_for":"aware","enforced":"none","redis":"count lanes: i/o timeout","lanes":"redis","lanes_health":"count lanes: i/o timeout"}`},
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

func ptr(n int) *int { return &n }

// ocl lays out st as the OCL policy's lanes do: api_heavy and es2_knn
// shared (nil: left out), then tasks, tiers and users by key.
func ocl(st status.Snapshot, apiHeavy, es2 *status.Lane, tasks, tiers, users map[string]status.Lane) status.Snapshot {
	if apiHeavy != nil {
		st.Shared = append(st.Shared, status.SharedLane{Name: "api_heavy", StatusKey: "api_heavy", Lane: *apiHeavy})
	}
	if es2 != nil {
		st.Shared = append(st.Shared, status.SharedLane{Name: "es2_knn", StatusKey: "es2_knn", Lane: *es2})
	}
	st.Keyed = []status.KeyedLane{
		{Name: "api_heavy_task", StatusKey: "tasks", Scope: "task", PerKeyLimit: true, Entries: tasks},
		{Name: "tier", StatusKey: "tiers", Scope: "key", Key: "tier", PerKeyLimit: true, Entries: tiers},
		{Name: "user", StatusKey: "users", Scope: "key", Key: "user", Entries: users},
	}
	return st
}

// A policy's own lanes under their status keys: a field-keyed lane with
// its limit per key, and no OCL name anywhere.
func TestSnapshotJSONOfAnotherPolicy(t *testing.T) {
	st := status.Snapshot{Mode: "enforce", EnforceFor: "all", Store: status.OK, Lanes: "memory",
		Shared: []status.SharedLane{{Name: "cluster", StatusKey: "cluster", Lane: status.Lane{InFlight: 3, Limit: 8}}},
		Keyed: []status.KeyedLane{
			{Name: "model", StatusKey: "model", Scope: "key", Key: "model", PerKeyLimit: true,
				Entries: map[string]status.Lane{"llama": {InFlight: 2, Limit: 2, Waiting: 1}}},
			{Name: "user", StatusKey: "user", Scope: "key", Key: "user"},
		}}
	b, err := json.Marshal(st)
	want := `{"mode":"enforce","enforce_for":"all","enforced":"all","redis":"none: lanes in memory","lanes":"memory","cluster":{"in_flight":3,"limit":8},` +
		`"lanes_health":"ok","model":{"llama":{"in_flight":2,"limit":2,"waiting":1}},"user":{}}`
	if err != nil || string(b) != want {
		t.Errorf("got %s, %v\nwant %s", b, err, want)
	}
	if got := status.BindingLane(st); got != "model:llama" {
		t.Errorf("binding %q, want model:llama", got)
	}
}

// Why: "Mode shadow, enforced for all" read as a contradiction; who is
// refused now is its own field, "none" outside enforce.
func TestEnforcedNeverContradictsTheMode(t *testing.T) {
	for _, tt := range []struct{ mode, enforceFor, want string }{
		{"shadow", "all", "none"}, {"off", "all", "none"}, {"shadow", "aware", "none"},
		{"enforce", "all", "all"}, {"enforce", "aware", "aware"},
	} {
		if got := status.Enforced(tt.mode, tt.enforceFor); got != tt.want {
			t.Errorf("Enforced(%s, %s) = %q, want %q", tt.mode, tt.enforceFor, got, tt.want)
		}
	}
}

// Paused lanes are in the JSON, with whose calls they refuse, also when
// the store failed (a pause is the config's, not the store's).
func TestPausedInJSON(t *testing.T) {
	paused := []status.Paused{{Lane: "user", Tier: "core", Routes: []string{"$match", "$rerank"},
		Refuses: status.PausedRefuses([]string{"$match", "$rerank"}, "", "core", "")}}
	for _, st := range []status.Snapshot{
		{Mode: "enforce", EnforceFor: "all", Store: status.OK, Lanes: "memory", Paused: paused},
		{Mode: "enforce", EnforceFor: "all", Store: "down", Lanes: "redis", Paused: paused},
	} {
		b, err := json.Marshal(st)
		want := `"paused":[{"lane":"user","tier":"core","routes":["$match","$rerank"],"refuses":"$match and $rerank calls of tier core"}]`
		if err != nil || !strings.Contains(string(b), want) {
			t.Errorf("got %s, %v; want %s in it", b, err, want)
		}
	}
	if got := status.PausedRefuses([]string{"$match"}, "semantic", "", "single_row"); got != "$match calls with semantic (but single_row ones) of every caller" {
		t.Errorf("PausedRefuses = %q", got)
	}
}

// A lane keyed by user lists its busiest keys only: the JSON stays bounded
// however many users have calls, and says what it left out.
func TestKeyedLanesListTheBusiest(t *testing.T) {
	users := map[string]status.Lane{}
	for i := range status.MaxKeysShown + 10 {
		users[fmt.Sprintf("u%03d", i)] = status.Lane{InFlight: 1}
	}
	users["zed"] = status.Lane{InFlight: 5}
	st := ocl(status.Snapshot{Mode: "enforce", EnforceFor: "all", Store: status.OK, Lanes: "redis"}, &status.Lane{Limit: 4}, nil, nil, nil, users)
	st.Keyed[2].Uncounted = 7
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Users   map[string]status.User    `json:"users"`
		LeftOut map[string]status.LeftOut `json:"keys_left_out"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Users) != status.MaxKeysShown || got.Users["zed"].InFlight != 5 {
		t.Errorf("%d users listed (zed: %+v); want the %d busiest, zed among them", len(got.Users), got.Users["zed"], status.MaxKeysShown)
	}
	if lo := got.LeftOut["users"]; lo != (status.LeftOut{Keys: 11 + 7, InFlight: 11, Uncounted: 7}) {
		t.Errorf("keys_left_out.users = %+v; want 11 listed-out keys with 11 calls, and 7 uncounted", lo)
	}
}
