package capgate_test

import (
	"testing"

	"github.com/capgate/capgate"
)

func TestKeyLayoutPrefix(t *testing.T) {
	for _, tt := range []struct {
		layout capgate.KeyLayout
		prefix string
		want   string
	}{
		{capgate.KeyLayoutDefault, "", "ocl:capacity"},
		{capgate.KeyLayoutDefault, "ocl:capacity", "ocl:capacity"},
		{"", "app:lanes", "app:lanes"},
		{capgate.KeyLayoutCluster, "", "{ocl:capacity}"},
		{capgate.KeyLayoutCluster, "app:lanes", "{app:lanes}"},
		{capgate.KeyLayoutCluster, "{app}:lanes", "{app}:lanes"}, // already tagged
		{capgate.KeyLayoutCluster, "a{}b", "{a{}b}"},             // an empty tag is none
	} {
		got, err := tt.layout.Prefix(tt.prefix)
		if err != nil || got != tt.want {
			t.Errorf("%q.Prefix(%q) = %q, %v; want %q", tt.layout, tt.prefix, got, err, tt.want)
		}
	}
	if got, err := capgate.KeyLayoutCluster.Prefix("}x"); err == nil {
		t.Errorf("cluster prefix of %q = %q, want an error", "}x", got)
	}
	if _, err := capgate.KeyLayout("slots").Prefix("x"); err == nil {
		t.Error("an unknown layout gave no error")
	}
}

// The default layout keeps the original's keys byte for byte; the cluster
// layout puts every lane of a call in one hash slot.
func TestKeyLayoutLaneKeys(t *testing.T) {
	call := capgate.Call{Endpoint: capgate.EndpointMatch, Rows: 10, Semantic: true, UserID: "alice", Tier: capgate.TierCore}
	cfg := capgate.DefaultConfig(capgate.ModeShadow)
	for _, tt := range []struct {
		layout capgate.KeyLayout
		want   []string
	}{
		{capgate.KeyLayoutDefault, []string{"ocl:capacity:api_heavy", "ocl:capacity:api_heavy_task:t1",
			"ocl:capacity:es2_knn", "ocl:capacity:tier:core", "ocl:capacity:user:alice"}},
		{capgate.KeyLayoutCluster, []string{"{ocl:capacity}:api_heavy", "{ocl:capacity}:api_heavy_task:t1",
			"{ocl:capacity}:es2_knn", "{ocl:capacity}:tier:core", "{ocl:capacity}:user:alice"}},
	} {
		p, err := tt.layout.Prefix(capgate.DefaultKeyPrefix)
		if err != nil {
			t.Fatal(err)
		}
		lanes := capgate.Keys{Prefix: p, TaskID: "t1"}.Plan(cfg, call)
		for i, l := range lanes {
			if l.Key != tt.want[i] {
				t.Errorf("%s layout: lane %s key %q, want %q", tt.layout, l.Name, l.Key, tt.want[i])
			}
		}
		tags := map[string]bool{}
		for _, l := range lanes {
			tags[capgate.HashTag(l.Key)] = true
		}
		if tt.layout == capgate.KeyLayoutCluster && (len(tags) != 1 || tags[""]) {
			t.Errorf("cluster layout: hash tags %v, want one", tags)
		}
	}
}

func TestHashTag(t *testing.T) {
	for key, want := range map[string]string{
		"{ocl:capacity}:user:a": "ocl:capacity",
		"ocl:capacity:user:a":   "",
		"a{b}c{d}":              "b",
		"{}x{y}":                "", // Redis hashes the whole key
		"x{":                    "",
		"{a}}":                  "a",
	} {
		if got := capgate.HashTag(key); got != want {
			t.Errorf("HashTag(%q) = %q, want %q", key, got, want)
		}
	}
}
