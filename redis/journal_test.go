package redis_test

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"

	"github.com/capgate/capgate/redis"
)

func TestJournalWriteMiniredis(t *testing.T) {
	_, h := openMini(t)
	testJournalWrite(t, h)
}

func TestJournalWriteRealRedis(t *testing.T) {
	testJournalWrite(t, openHarness(t, redis.RealRedisURL(t)))
}

// testJournalWrite: a batch adds and forgets records in one write, keeps
// the journal ttl when it adds, and a journal emptied is gone; JournalRead
// reads back what the batches left, and leaves it.
func testJournalWrite(t *testing.T, h harness) {
	ctx := t.Context()
	name := "gateway:task-j:127.0.0.1:8080"
	key := h.JournalKey(name)
	h.Delete(t, key)
	if err := h.JournalWrite(ctx, name, nil, nil, time.Minute); err != nil {
		t.Fatalf("an empty batch: %v", err)
	}
	add := map[string][]string{"t1": {"ocl:capacity:api_heavy", "ocl:capacity:user:ada"}, "t2": {"ocl:capacity:api_heavy"}}
	if err := h.JournalWrite(ctx, name, add, nil, time.Minute); err != nil {
		t.Fatal(err)
	}
	if ttl := h.TTL(t, key); ttl <= 50*time.Second || ttl > time.Minute {
		t.Errorf("ttl after adding: %v, want about 1m", ttl)
	}
	// One batch adds t3 and forgets t1 (a token both added and forgotten
	// never reaches a batch: the gateway drops the pair).
	if err := h.JournalWrite(ctx, name, map[string][]string{"t3": {"ocl:capacity:bulk"}}, []string{"t1"}, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if ttl := h.TTL(t, key); ttl <= 110*time.Second {
		t.Errorf("ttl after the second batch: %v, want about 2m", ttl)
	}
	// Forgetting alone leaves the ttl as it is.
	if err := h.JournalWrite(ctx, name, nil, []string{"t-never-added"}, time.Second); err != nil {
		t.Fatal(err)
	}
	if ttl := h.TTL(t, key); ttl <= 110*time.Second {
		t.Errorf("ttl after a removal alone: %v, want it kept", ttl)
	}
	want := map[string][]string{"t2": {"ocl:capacity:api_heavy"}, "t3": {"ocl:capacity:bulk"}}
	got, err := h.JournalRead(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.EqualFunc(got, want, slices.Equal) {
		t.Errorf("read %v, want %v", got, want)
	}
	got, err = h.JournalTake(ctx, name) // what JournalRead left
	if err != nil {
		t.Fatal(err)
	}
	if !maps.EqualFunc(got, want, slices.Equal) {
		t.Errorf("taken %v, want %v", got, want)
	}
	// Forgetting every record leaves no journal.
	if err := h.JournalWrite(ctx, name, map[string][]string{"t4": {"ocl:capacity:bulk"}}, nil, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := h.JournalWrite(ctx, name, nil, []string{"t4"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if n, err := h.raw.Exists(ctx, key).Result(); err != nil || n != 0 {
		t.Errorf("journal emptied: exists %d (%v), want gone", n, err)
	}
}

// TestJournalKey: the journal's key joins the store's key prefix and the
// journal's name with one ":", so that "gateway:…" never runs into the
// prefix ("ocl:capacitygateway:…").
func TestJournalKey(t *testing.T) {
	m := miniredis.RunT(t)
	for _, c := range []struct{ prefix, want string }{
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
		if got := s.JournalKey("gateway:t1"); got != c.want {
			t.Errorf("prefix %q: JournalKey = %q, want %q", c.prefix, got, c.want)
		}
	}
	s, _ := openMiniCluster(t, redis.Options{})
	if got := s.JournalKey("gateway:t1"); !strings.HasSuffix(got, "}:gateway:t1") {
		t.Errorf("on a cluster: JournalKey = %q, want the tagged prefix, then \":gateway:t1\"", got)
	}
}
