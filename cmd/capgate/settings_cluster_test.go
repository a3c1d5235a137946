package main

import (
	"flag"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/server"
)

func TestClusterSettings(t *testing.T) {
	st, err := server.LoadSettings(envOf(map[string]string{
		"CAPGATE_REDIS_CLUSTER": "127.0.0.1:7000, 127.0.0.1:7001", "REDIS_PASSWORD": "pw",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if !st.HasRedis() {
		t.Error("a cluster alone: HasRedis is false")
	}
	o := st.RedisOptions()
	if !slices.Equal(o.Cluster, []string{"127.0.0.1:7000", "127.0.0.1:7001"}) || o.URL != "" || o.Sentinels != nil || o.Password != "pw" {
		t.Errorf("RedisOptions with a cluster = %+v", o)
	}
	if p, err := st.LaneKeyPrefix(policy.OCL()); err != nil || p != "{ocl:capacity}" {
		t.Errorf("a cluster's key prefix = %q, %v; want {ocl:capacity} (the cluster layout implied)", p, err)
	}

	st.KeyLayout = "default"
	if _, err := st.LaneKeyPrefix(policy.OCL()); err == nil || !strings.Contains(err.Error(), "--key-layout default can't be used with --redis-cluster") {
		t.Errorf("default layout on a cluster: %v; want it refused", err)
	}

	// The hash-tagged layout on a standalone Redis, chosen by flag.
	st, _ = server.LoadSettings(envOf(map[string]string{"CAPGATE_REDIS_URL": "redis://r:1/0", "CAPGATE_KEY_PREFIX": "app:lanes"}))
	if p, err := st.LaneKeyPrefix(policy.OCL()); err != nil || p != "app:lanes" {
		t.Errorf("default layout prefix = %q, %v; want app:lanes unchanged", p, err)
	}
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	st.LaneFlags(fs)
	if err := fs.Parse([]string{"--key-layout", "cluster"}); err != nil {
		t.Fatal(err)
	}
	if p, err := st.LaneKeyPrefix(policy.OCL()); err != nil || p != "{app:lanes}" {
		t.Errorf("--key-layout cluster prefix = %q, %v; want {app:lanes}", p, err)
	}
	st.KeyLayout = "slots"
	if _, err := st.LaneKeyPrefix(policy.OCL()); err == nil || !strings.Contains(err.Error(), "--key-layout") {
		t.Errorf("an unknown layout: %v", err)
	}
}

// serve refuses the default key layout on a cluster before it starts.
func TestServeRefusesTheDefaultLayoutOnACluster(t *testing.T) {
	cmd := &ServeCommand{Stdout: io.Discard, Stderr: io.Discard, Getenv: func(string) string { return "" }}
	err := cmd.Run(t.Context(), []string{"--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1",
		"--database", "sqlite:" + filepath.Join(t.TempDir(), "c.db"),
		"--redis-cluster", "127.0.0.1:1", "--key-layout", "default"})
	if err == nil || !strings.Contains(err.Error(), "--key-layout default can't be used with --redis-cluster") {
		t.Fatalf("serve --redis-cluster --key-layout default: %v; want it refused", err)
	}
}
