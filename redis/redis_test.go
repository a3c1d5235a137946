package redis_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/internal/skipnote"
	"github.com/capgate/capgate/lanetest"
	"github.com/capgate/capgate/redis"
)

// TestMain flushes the real Redis database, when there is one, once before
// the tests; every test then works under keys of its own.
func TestMain(m *testing.M) {
	if url := os.Getenv(redis.EnvTestRedisURL); url != "" {
		if err := flush(url); err != nil {
			fmt.Fprintf(os.Stderr, "flush the test Redis %s: %v\n", redis.EnvTestRedisURL, err)
			os.Exit(1)
		}
	}
	if seeds := os.Getenv(redis.EnvTestRedisCluster); seeds != "" {
		if err := flushCluster(strings.Split(seeds, ",")); err != nil {
			fmt.Fprintf(os.Stderr, "flush the test Redis Cluster %s: %v\n", redis.EnvTestRedisCluster, err)
			os.Exit(1)
		}
	}
	skipnote.Main(m)
}

func flush(url string) error {
	opts, err := goredis.ParseURL(url)
	if err != nil {
		return err
	}
	c := goredis.NewClient(opts)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.FlushDB(ctx).Err()
}

func TestStoreMiniredis(t *testing.T) {
	lanetest.RunStore(t, func(t testing.TB) lanetest.Store {
		_, h := openMini(t)
		return h
	})
}

func TestStoreRealRedis(t *testing.T) {
	url := redis.RealRedisURL(t)
	lanetest.RunStore(t, func(t testing.TB) lanetest.Store {
		return openHarness(t, url)
	})
}

// TestScriptSHA1 loads each embedded script into a real Redis: it must
// compile there (not only in miniredis's Lua) and its SHA1, which EVALSHA
// uses, must be Redis's.
func TestScriptSHA1(t *testing.T) {
	h := openHarness(t, redis.RealRedisURL(t))
	for name, sc := range redis.Scripts {
		sum := sha1.Sum([]byte(sc.Src))
		want := hex.EncodeToString(sum[:])
		got, err := h.raw.ScriptLoad(t.Context(), sc.Src).Result()
		if err != nil {
			t.Errorf("SCRIPT LOAD %s: %v", name, err)
			continue
		}
		if got != want || sc.Script.Hash() != want {
			t.Errorf("%s: Redis SHA1 %s, script hash %s, want %s", name, got, sc.Script.Hash(), want)
		}
	}
}

func TestNoScriptFallbackMiniredis(t *testing.T) {
	_, h := openMini(t)
	testNoScriptFallback(t, h)
}

func TestNoScriptFallbackRealRedis(t *testing.T) {
	testNoScriptFallback(t, openHarness(t, redis.RealRedisURL(t)))
}

// testNoScriptFallback flushes the script cache between operations: each
// must load its script again (EVAL after NOSCRIPT) and work.
func testNoScriptFallback(t *testing.T, h harness) {
	keys := []string{lanetest.NewPrefix() + "lane"}
	tok := lanetest.NewToken()
	for step := range 4 {
		if err := h.raw.ScriptFlush(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
		var err error
		switch step {
		case 0:
			var taken bool
			req := capgate.AcquireRequest{Token: tok, Keys: keys, Limits: []int{1}, Lease: time.Minute}
			taken, err = h.Acquire(t.Context(), req, make([]int, 1))
			if err == nil && !taken {
				t.Fatal("acquire not taken")
			}
		case 1:
			var held int
			held, err = h.Renew(t.Context(), tok, keys, time.Minute)
			if err == nil && held != 1 {
				t.Fatalf("renew held %d, want 1", held)
			}
		case 2:
			counts := make([]int, 1)
			err = h.Count(t.Context(), keys, counts)
			if err == nil && counts[0] != 1 {
				t.Fatalf("count %v, want [1]", counts)
			}
		case 3:
			err = h.Release(t.Context(), tok, keys)
		}
		if err != nil {
			t.Fatalf("step %d after SCRIPT FLUSH: %v", step, err)
		}
	}
}

func TestFormatSeconds(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Second:             "1.0",
		100 * time.Millisecond:  "0.1",
		50 * time.Millisecond:   "0.05",
		1500 * time.Millisecond: "1.5",
		2 * time.Second:         "2.0",
	} {
		if got := redis.FormatSeconds(d); got != want {
			t.Errorf("FormatSeconds(%v) = %q, want %q", d, got, want)
		}
	}
	err := &redis.DeadlineError{Deadline: time.Second}
	if got, want := err.Error(), "no answer from Redis within 1.0 s"; got != want {
		t.Errorf("DeadlineError = %q, want %q", got, want)
	}
}

func TestClientOptions(t *testing.T) {
	co, err := redis.ClientOptions(redis.Options{URL: "redis://:s3cret@cache.internal:6380", Password: "other", DB: 4})
	if err != nil {
		t.Fatal(err)
	}
	if co.Addr != "cache.internal:6380" || co.Password != "s3cret" || co.DB != 4 {
		t.Errorf("addr %q password %q db %d; want cache.internal:6380, the URL's password, the fill-in db 4", co.Addr, co.Password, co.DB)
	}
	if co.MaxRetries != -1 || co.DialerRetries != 1 || !co.ContextTimeoutEnabled {
		t.Errorf("retries %d, dial retries %d, context timeouts %v; want -1, 1, true", co.MaxRetries, co.DialerRetries, co.ContextTimeoutEnabled)
	}
	if co.DialTimeout != redis.DefaultTimeout || co.ReadTimeout != redis.DefaultTimeout || co.WriteTimeout != redis.DefaultTimeout {
		t.Errorf("timeouts %v/%v/%v, want %v", co.DialTimeout, co.ReadTimeout, co.WriteTimeout, redis.DefaultTimeout)
	}
	if co.PoolSize != redis.DefaultMaxInFlight {
		t.Errorf("pool size %d, want %d", co.PoolSize, redis.DefaultMaxInFlight)
	}

	co, err = redis.ClientOptions(redis.Options{URL: "redis://cache:6379/2", Password: "fill", DB: 4})
	if err != nil {
		t.Fatal(err)
	}
	if co.Password != "fill" || co.DB != 2 {
		t.Errorf("password %q db %d; want the fill-in password, the URL's db 2", co.Password, co.DB)
	}

	for _, bad := range []redis.Options{
		{URL: "http://:pw@host"},
		{URL: "redis://host", Sentinels: []string{"s:26379"}},
		{},
		{URL: "redis://host", Deadline: -time.Second},
	} {
		if _, err := redis.Open(bad); err == nil {
			t.Errorf("Open(%v): no error", bad)
		} else if s := err.Error(); strings.Contains(s, "pw") {
			t.Errorf("Open error %q shows the password", s)
		}
	}
}

func TestSentinelOptions(t *testing.T) {
	opts := redis.Options{Sentinels: []string{"s1:26379", "s2:26379"}, Password: "s3cret", DB: 3, Timeout: 300 * time.Millisecond}
	fo, err := redis.FailoverOptions(opts)
	if err != nil {
		t.Fatal(err)
	}
	if fo.MasterName != redis.DefaultMasterName || !slices.Equal(fo.SentinelAddrs, opts.Sentinels) {
		t.Errorf("master %q sentinels %v; want %q, %v", fo.MasterName, fo.SentinelAddrs, redis.DefaultMasterName, opts.Sentinels)
	}
	if fo.Password != "s3cret" || fo.SentinelPassword != "s3cret" || fo.DB != 3 {
		t.Errorf("password %q sentinel password %q db %d; want the password on both, db 3", fo.Password, fo.SentinelPassword, fo.DB)
	}
	if fo.MaxRetries != -1 || fo.DialerRetries != 1 || !fo.ContextTimeoutEnabled ||
		fo.DialTimeout != opts.Timeout || fo.ReadTimeout != opts.Timeout || fo.WriteTimeout != opts.Timeout {
		t.Errorf("retries %d/%d, context timeouts %v, timeouts %v/%v/%v; want -1/1, true, %v",
			fo.MaxRetries, fo.DialerRetries, fo.ContextTimeoutEnabled, fo.DialTimeout, fo.ReadTimeout, fo.WriteTimeout, opts.Timeout)
	}

	opts.MasterName = "mymaster"
	s, err := redis.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got, want := s.String(), "redis-sentinel://:xxxxx@s1:26379,s2:26379/3?master=mymaster"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestStringMasksPassword(t *testing.T) {
	for opts, want := range map[*redis.Options]string{
		{URL: "redis://:s3cret@host:6379/1"}:           "redis://:xxxxx@host:6379/1",
		{URL: "redis://user:s3cret@host:6379/1"}:       "redis://user:xxxxx@host:6379/1",
		{URL: "redis://host:6379", Password: "s3cret"}: "redis://:xxxxx@host:6379",
		{URL: "redis://host:6379/0?password=s3cret"}:   "redis://host:6379/0",
		{URL: "redis://host:6379"}:                     "redis://host:6379",
		{Sentinels: []string{"s:1"}}:                   "redis-sentinel://s:1/0?master=default",
	} {
		if got := opts.String(); got != want {
			t.Errorf("String() = %q, want %q", got, want)
		}
	}
}

// TestNewUsesTheCallersClient: New runs on a client it does not own, and
// Close leaves that client open.
func TestNewUsesTheCallersClient(t *testing.T) {
	m, h := openMini(t)
	s, err := redis.New(h.raw, redis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	req := capgate.AcquireRequest{Token: lanetest.NewToken(), Keys: []string{"lane"}, Limits: []int{1}, Lease: time.Minute}
	if taken, err := s.Acquire(t.Context(), req, make([]int, 1)); err != nil || !taken {
		t.Fatalf("Acquire = %v, %v; want true, nil", taken, err)
	}
	if !m.Exists("lane") {
		t.Error("the lease did not reach Redis")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := h.raw.Ping(t.Context()).Err(); err != nil {
		t.Errorf("the caller's client after Close: %v", err)
	}
}
