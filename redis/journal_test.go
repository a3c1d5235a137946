package redis_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"

	"github.com/capgate/capgate/internal/randhex"
	"github.com/capgate/capgate/journal"
	"github.com/capgate/capgate/journaltest"
	"github.com/capgate/capgate/redis"
)

var _ journal.Store = (*redis.Store)(nil)

// The journal's conformance suite on miniredis, its clock (the scripts'
// TIME) moved by the suite.
func TestJournalStoreMiniredis(t *testing.T) {
	journaltest.Run(t, func(t testing.TB) (journal.Store, func(time.Duration)) {
		m, h := openMini(t)
		now := time.Now()
		m.SetTime(now)
		return h.Store, func(d time.Duration) {
			now = now.Add(d)
			m.SetTime(now)
		}
	})
}

// On a real Redis the suite waits out the liveness it lets lapse; each
// test has a key prefix of its own.
func TestJournalStoreRealRedis(t *testing.T) {
	url := redis.RealRedisURL(t)
	journaltest.Run(t, func(t testing.TB) (journal.Store, func(time.Duration)) {
		s, err := redis.Open(redis.Options{URL: url, KeyPrefix: "jt" + randhex.String(4), Deadline: 20 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s, time.Sleep // the bound under test is Redis's clock
	})
}

// On a Redis Cluster every script's keys (a roster and a journal) are one
// slot's: the prefix's hash tag.
func TestJournalStoreCluster(t *testing.T) {
	seeds := redis.RealRedisCluster(t)
	journaltest.Run(t, func(t testing.TB) (journal.Store, func(time.Duration)) {
		h := openClusterHarness(t, seeds, redis.Options{KeyPrefix: "jt" + randhex.String(4)})
		return h.Store, time.Sleep // the bound under test is Redis's clock
	})
}

// TestJournalKeys: a group's keys join the store's key prefix and the
// group with one ":" ("gateway:…" never runs into the prefix), are
// outside the lane prefix, and on a cluster carry the prefix's tag first,
// so that a roster and a journal share one slot whatever the group holds.
func TestJournalKeys(t *testing.T) {
	m := miniredis.RunT(t)
	for _, c := range []struct{ prefix, base string }{
		{"", "capgate:journal:gateway:t1"},
		{"acme:cap", "capgate:journal:acme:cap:gateway:t1"},
		{"acme:cap:", "capgate:journal:acme:cap:gateway:t1"},
	} {
		client := goredis.NewClient(&goredis.Options{Addr: m.Addr()})
		t.Cleanup(func() { client.Close() })
		s, err := redis.New(client, redis.Options{KeyPrefix: c.prefix})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := s.JournalRoster("gateway:t1"), c.base+":live"; got != want {
			t.Errorf("prefix %q: JournalRoster = %q, want %q", c.prefix, got, want)
		}
		if got, want := s.JournalKey("gateway:t1", "ab12"), c.base+":ab12"; got != want {
			t.Errorf("prefix %q: JournalKey = %q, want %q", c.prefix, got, want)
		}
	}
	s, _ := openMiniCluster(t, redis.Options{})
	group := "gateway:{odd}:[::1]:8080" // a task id with braces of its own
	roster, key := s.JournalRoster(group), s.JournalKey(group, "ab12")
	if !strings.HasSuffix(roster, "}:"+group+":live") || redis.HashTag(roster) != redis.HashTag(key) ||
		redis.HashTag(key) != redis.HashTag(s.KeyPrefix()) {
		t.Errorf("on a cluster: roster %q, journal %q: want both under the lanes' tag %q", roster, key, redis.HashTag(s.KeyPrefix()))
	}
}

func TestJournalExpiryMiniredis(t *testing.T) {
	_, h := openMini(t)
	testJournalExpiry(t, h)
}

func TestJournalExpiryRealRedis(t *testing.T) {
	testJournalExpiry(t, openHarness(t, redis.RealRedisURL(t)))
}

// testJournalExpiry: a journal is kept ttl when a batch adds (a removal
// alone leaves its ttl), the roster at least keep (never shortened), and
// a goodbye with records keeps the roster as long as the journal it
// leads to. A journal left by an earlier version at the group's own key
// is left alone.
func testJournalExpiry(t *testing.T, h harness) {
	ctx := t.Context()
	group := "gateway:t-" + randhex.String(4) + ":127.0.0.1:8080"
	roster, key := h.JournalRoster(group), h.JournalKey(group, "a")
	legacy := strings.TrimSuffix(roster, ":live")
	if err := h.raw.HSet(ctx, legacy, "old-token", `["ocl:capacity:api_heavy"]`).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := h.JournalRenew(ctx, group, "a", time.Hour, 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	if ttl := h.TTL(t, roster); ttl <= 9*time.Minute || ttl > 10*time.Minute {
		t.Errorf("roster ttl %v, want about 10m", ttl)
	}
	if _, err := h.JournalRenew(ctx, group, "b", time.Hour, time.Minute); err != nil {
		t.Fatal(err)
	}
	if ttl := h.TTL(t, roster); ttl <= 9*time.Minute {
		t.Errorf("roster ttl %v after a shorter keep, want it kept", ttl)
	}
	if err := h.JournalWrite(ctx, group, "a", map[string][]string{"t1": {"k"}}, nil, 20*time.Minute); err != nil {
		t.Fatal(err)
	}
	if ttl := h.TTL(t, key); ttl <= 19*time.Minute || ttl > 20*time.Minute {
		t.Errorf("journal ttl %v, want about 20m", ttl)
	}
	if err := h.JournalWrite(ctx, group, "a", nil, []string{"t-never"}, time.Second); err != nil {
		t.Fatal(err)
	}
	if ttl := h.TTL(t, key); ttl <= 19*time.Minute {
		t.Errorf("journal ttl %v after a removal alone, want it kept", ttl)
	}
	if err := h.JournalLeave(ctx, group, "a"); err != nil {
		t.Fatal(err)
	}
	if ttl := h.TTL(t, roster); ttl <= 19*time.Minute {
		t.Errorf("roster ttl %v after a goodbye with records, want the journal's (about 20m)", ttl)
	}
	if n, err := h.raw.HLen(ctx, legacy).Result(); err != nil || n != 1 {
		t.Errorf("the earlier version's journal: %d records (%v), want it left alone", n, err)
	}
	h.Delete(t, legacy)
}

// TestJournalOnAClosedStore: every operation fails with the store's error,
// never a panic.
func TestJournalOnAClosedStore(t *testing.T) {
	_, h := openMini(t)
	_ = h.Close()
	ctx := context.Background()
	if _, err := h.JournalRenew(ctx, "g", "a", time.Second, time.Minute); err == nil {
		t.Error("renew on a closed store: no error")
	}
	if _, _, err := h.JournalRead(ctx, "g", "a"); err == nil {
		t.Error("read on a closed store: no error")
	}
	if err := h.JournalForget(ctx, "g", "a", []string{"t"}); err == nil {
		t.Error("forget on a closed store: no error")
	}
	if err := h.JournalLeave(ctx, "g", "a"); err == nil {
		t.Error("leave on a closed store: no error")
	}
}
