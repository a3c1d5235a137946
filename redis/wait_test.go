package redis_test

import (
	"encoding/json"
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

// SetTicketExpiry rewrites the ticket's expiry in <prefix>:wait:t (see
// waitpass.lua).
func (h harness) SetTicketExpiry(t testing.TB, prefix, token string, d time.Duration) {
	t.Helper()
	key := prefix + ":wait:t"
	raw, err := h.raw.HGet(t.Context(), key, token).Result()
	if err != nil {
		t.Fatalf("ticket %s under %s: %v", token, prefix, err)
	}
	var tk map[string]any
	if err := json.Unmarshal([]byte(raw), &tk); err != nil {
		t.Fatal(err)
	}
	exp := h.now(t) + d.Milliseconds()
	tk["e"] = exp
	b, err := json.Marshal(tk)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.raw.HSet(t.Context(), key, token, b).Err(); err != nil {
		t.Fatal(err)
	}
	if err := h.raw.ZAdd(t.Context(), prefix+":wait:e", goredis.Z{Score: float64(exp), Member: token}).Err(); err != nil {
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
