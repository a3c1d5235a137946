package main

import (
	"context"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/capgate/capgate/server"
	"github.com/capgate/capgate/settings"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestLoadSettings(t *testing.T) {
	st, err := server.LoadSettings(envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	if st.Database != "sqlite:capgate.db" || st.Mode != settings.ModeShadow || st.CacheTTL != 10*time.Second ||
		st.ReadTimeout != 500*time.Millisecond || st.HasRedis() || st.RedisTimeout != 500*time.Millisecond ||
		st.RedisDeadline != time.Second || st.RedisRetry != 15*time.Second || st.RedisMaster != "default" || st.TaskID == "" {
		t.Errorf("defaults = %+v", st)
	}

	st, err = server.LoadSettings(envOf(map[string]string{
		"CAPGATE_DATABASE": "postgres://db/x", "CAPACITY_LIMIT_MODE": "enforce", "CAPACITY_CONFIG_CACHE_SECONDS": "2.5",
		"CAPACITY_CONFIG_READ_TIMEOUT_MS": "200", "REDIS_HOST": "cache", "REDIS_PORT": "6380", "REDIS_DB": "2",
		"REDIS_PASSWORD": "p@ss", "REDIS_SENTINELS": "s1:26379; s2:26379", "REDIS_SENTINELS_MASTER": "mymaster",
		"CAPACITY_REDIS_TIMEOUT_SECONDS": "0.25", "CAPACITY_TASK_ID": "task7",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if st.Database != "postgres://db/x" || st.Mode != settings.ModeEnforce || st.CacheTTL != 2500*time.Millisecond ||
		st.ReadTimeout != 200*time.Millisecond || st.Redis != "redis://:p%40ss@cache:6380/2" || st.RedisTimeout != 250*time.Millisecond ||
		st.TaskID != "task7" {
		t.Errorf("from the environment = %+v", st)
	}
	if o := st.RedisOptions(); o.URL != "" || len(o.Sentinels) != 2 || o.Sentinels[1] != "s2:26379" || o.MasterName != "mymaster" || o.Password != "p@ss" {
		t.Errorf("RedisOptions with Sentinels = %+v", o)
	}

	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	st.ConfigFlags(fs)
	st.LaneFlags(fs)
	if err := fs.Parse([]string{"--database", "sqlite:a.db", "--mode", "off", "--config-cache", "0s", "--redis", "redis://r:1/0", "--redis-sentinels", ""}); err != nil {
		t.Fatal(err)
	}
	if st.Database != "sqlite:a.db" || st.Mode != settings.ModeOff || st.RedisOptions().URL != "redis://r:1/0" {
		t.Errorf("flags over the environment = %+v", st)
	}
	if svc := st.NewConfigService(nil, nil); svc.CacheTTL >= 0 {
		t.Errorf("--config-cache 0: service CacheTTL %v; want reading on every call", svc.CacheTTL)
	}

	_, err = server.LoadSettings(envOf(map[string]string{"CAPACITY_CONFIG_CACHE_SECONDS": "ten", "REDIS_HOST": "h", "REDIS_PORT": "x", "CAPACITY_REDIS_RETRY_SECONDS": "-1"}))
	for _, want := range []string{`CAPACITY_CONFIG_CACHE_SECONDS="ten"`, `REDIS_PORT="x"`, `CAPACITY_REDIS_RETRY_SECONDS="-1"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("bad environment error = %v; want it to name %s", err, want)
		}
	}
}

func TestOpenConfigStoreSchemes(t *testing.T) {
	dir := t.TempDir()
	for _, db := range []string{"sqlite:" + dir + "/a.db", "sqlite://" + dir + "/b.db"} {
		s, err := server.OpenConfigStore(context.Background(), db)
		if err != nil {
			t.Errorf("server.OpenConfigStore(%s): %v", db, err)
			continue
		}
		s.Close()
	}
	if _, err := server.OpenConfigStore(context.Background(), "mysql://u:secret@h/db"); err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("server.OpenConfigStore(mysql://…) = %v; want an error that doesn't show the password", err)
	}
}
