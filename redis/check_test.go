package redis_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"

	"github.com/capgate/capgate/internal/skipnote"
	"github.com/capgate/capgate/redis"
)

func checkConfig(t *testing.T, o redis.Options) error {
	t.Helper()
	s, err := redis.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	return s.CheckConfig(t.Context())
}

// Why: a Redis that refused the settings for good (a wrong password, a DB
// index out of range) started "ready" and failed open for ever.
func TestCheckConfig(t *testing.T) {
	m := miniredis.RunT(t)
	if err := checkConfig(t, redis.Options{URL: "redis://" + m.Addr() + "/2"}); err != nil {
		t.Errorf("a good Redis: %v", err)
	}
	m.RequireAuth("right")
	for _, u := range []string{"redis://" + m.Addr() + "/0", "redis://:wrong@" + m.Addr() + "/0"} {
		if err := checkConfig(t, redis.Options{URL: u}); !isConfigError(err, "") {
			t.Errorf("%s with a password required: %v", u, err)
		}
	}
	if err := checkConfig(t, redis.Options{URL: "redis://:right@" + m.Addr() + "/0"}); err != nil {
		t.Errorf("the right password: %v", err)
	}
	// Down is not a configuration error: the store fails open.
	addr := m.Addr()
	m.Close()
	if err := checkConfig(t, redis.Options{URL: "redis://" + addr + "/0"}); err != nil {
		t.Errorf("down: %v", err)
	}
}

// A DB index out of range and a cluster client against a standalone
// Redis, on the real one (miniredis takes any DB index).
func TestCheckConfigRealRedis(t *testing.T) {
	u := os.Getenv("CAPGATE_TEST_REDIS_URL")
	if u == "" {
		skipnote.Skip(t, "the real-Redis tests", "set CAPGATE_TEST_REDIS_URL=redis://127.0.0.1:6379/15 (a database the tests may flush)")
	}
	host := strings.TrimPrefix(u, "redis://")
	host, _, _ = strings.Cut(host, "/")
	if _, h, ok := strings.Cut(host, "@"); ok {
		host = h
	}
	if err := checkConfig(t, redis.Options{URL: "redis://" + host + "/99"}); !isConfigError(err, "DB index") {
		t.Errorf("DB 99: %v", err)
	}
	if err := checkConfig(t, redis.Options{Cluster: []string{host}}); !isConfigError(err, "cluster") {
		t.Errorf("--redis-cluster on a standalone Redis: %v", err)
	}
}

func isConfigError(err error, want string) bool {
	var ce *redis.ConfigError
	return errors.As(err, &ce) && strings.Contains(err.Error(), want)
}
