package redis_test

import (
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/capgate/capgate/lanetest"
	"github.com/capgate/capgate/redis"
)

func TestWaitlistMiniredis(t *testing.T) {
	lanetest.RunWaitlist(t, func(t testing.TB) lanetest.WaitStore {
		_, h := openMini(t)
		return h
	})
}

func TestWaitlistRealRedis(t *testing.T) {
	url := redis.RealRedisURL(t)
	lanetest.RunWaitlist(t, func(t testing.TB) lanetest.WaitStore {
		return openHarness(t, url)
	})
}

// SetTicketExpiry sets the ticket's expiry in <prefix>:wait:e, the one
// place it is kept (see waitpass.lua).
func (h harness) SetTicketExpiry(t testing.TB, prefix, token string, d time.Duration) {
	t.Helper()
	key := prefix + ":wait:e"
	if _, err := h.raw.ZScore(t.Context(), key, token).Result(); err != nil {
		t.Fatalf("ticket %s under %s: %v", token, prefix, err)
	}
	if err := h.raw.ZAdd(t.Context(), key, goredis.Z{Score: float64(h.now(t) + d.Milliseconds()), Member: token}).Err(); err != nil {
		t.Fatal(err)
	}
}

// TestWaitlistCluster runs the waitlist conformance on a real Redis
// Cluster: the waitlist's keys sit under the hash-tagged prefix, in the
// lanes' slot, so every script stays on one node.
func TestWaitlistCluster(t *testing.T) {
	seeds := redis.RealRedisCluster(t)
	lanetest.RunWaitlist(t, func(t testing.TB) lanetest.WaitStore {
		return openClusterHarness(t, seeds, redis.Options{})
	})
}
