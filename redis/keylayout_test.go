package redis_test

import (
	"testing"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/lanetest"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/redis"
	"github.com/capgate/capgate/settings"
)

func TestKeyLayoutPrefix(t *testing.T) {
	for _, tt := range []struct {
		layout redis.KeyLayout
		prefix string
		want   string
	}{
		{redis.KeyLayoutDefault, "", policy.DefaultKeyPrefix}, // "capgate": a gateway passes its policy's
		{redis.KeyLayoutDefault, "ocl:capacity", "ocl:capacity"},
		{"", "app:lanes", "app:lanes"},
		{redis.KeyLayoutCluster, "", "{" + policy.DefaultKeyPrefix + "}"},
		{redis.KeyLayoutCluster, "ocl:capacity", "{ocl:capacity}"},
		{redis.KeyLayoutCluster, "app:lanes", "{app:lanes}"},
		{redis.KeyLayoutCluster, "{app}:lanes", "{app}:lanes"}, // already tagged
		{redis.KeyLayoutCluster, "a{}b", "{a{}b}"},             // an empty tag is none
	} {
		got, err := tt.layout.Prefix(tt.prefix)
		if err != nil || got != tt.want {
			t.Errorf("%q.Prefix(%q) = %q, %v; want %q", tt.layout, tt.prefix, got, err, tt.want)
		}
	}
	if got, err := redis.KeyLayoutCluster.Prefix("}x"); err == nil {
		t.Errorf("cluster prefix of %q = %q, want an error", "}x", got)
	}
	if _, err := redis.KeyLayout("slots").Prefix("x"); err == nil {
		t.Error("an unknown layout gave no error")
	}
}

// The default layout keeps the original's keys byte for byte; the cluster
// layout puts every lane of a call in one hash slot.
func TestKeyLayoutLaneKeys(t *testing.T) {
	call := lanetest.OCLCall("match", 10, true, false, "alice", "core")
	cfg := settings.Default(nil, settings.ModeShadow)
	for _, tt := range []struct {
		layout redis.KeyLayout
		want   []string
	}{
		{redis.KeyLayoutDefault, []string{"ocl:capacity:api_heavy", "ocl:capacity:api_heavy_task:t1",
			"ocl:capacity:es2_knn", "ocl:capacity:tier:core", "ocl:capacity:user:alice"}},
		{redis.KeyLayoutCluster, []string{"{ocl:capacity}:api_heavy", "{ocl:capacity}:api_heavy_task:t1",
			"{ocl:capacity}:es2_knn", "{ocl:capacity}:tier:core", "{ocl:capacity}:user:alice"}},
	} {
		p, err := tt.layout.Prefix("ocl:capacity") // the OCL policy's key prefix
		if err != nil {
			t.Fatal(err)
		}
		lanes := capgate.Keys{Prefix: p, TaskID: "t1"}.AppendPlan(nil, cfg, &call, cfg.Policy().TierIndex(call.Tier))
		if len(lanes) != len(tt.want) {
			t.Fatalf("%s layout: %d lanes, want %d", tt.layout, len(lanes), len(tt.want))
		}
		for i, l := range lanes {
			if l.Key != tt.want[i] {
				t.Errorf("%s layout: lane %s key %q, want %q", tt.layout, l.Name, l.Key, tt.want[i])
			}
		}
		tags := map[string]bool{}
		for _, l := range lanes {
			tags[redis.HashTag(l.Key)] = true
		}
		if tt.layout == redis.KeyLayoutCluster && (len(tags) != 1 || tags[""]) {
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
		if got := redis.HashTag(key); got != want {
			t.Errorf("HashTag(%q) = %q, want %q", key, got, want)
		}
	}
}
