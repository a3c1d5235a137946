package redis_test

import (
	"testing"
	"time"

	"github.com/capgate/capgate/lanetest"
	"github.com/capgate/capgate/redis"
	"github.com/capgate/capgate/repeat"
)

func TestRepeatsMiniredis(t *testing.T) {
	lanetest.RunRepeats(t, func(t testing.TB) (lanetest.RepeatStore, func(time.Duration)) {
		m, h := openMini(t)
		now := time.Now()
		m.SetTime(now) // TIME, which repeatbytes.lua reads, moves with the TTLs
		return h.Store, func(d time.Duration) {
			now = now.Add(d)
			m.SetTime(now)
			m.FastForward(d)
		}
	})
}

func TestRepeatsRealRedis(t *testing.T) {
	url := redis.RealRedisURL(t)
	lanetest.RunRepeats(t, func(t testing.TB) (lanetest.RepeatStore, func(time.Duration)) {
		return openHarness(t, url).Store, nil
	})
}

// TestRepeatsCluster runs the suite on a Redis Cluster: each entry is a
// single-key script in its own slot, the answers' count under one tag.
func TestRepeatsCluster(t *testing.T) {
	seeds := redis.RealRedisCluster(t)
	lanetest.RunRepeats(t, func(t testing.TB) (lanetest.RepeatStore, func(time.Duration)) {
		return openClusterHarness(t, seeds, redis.Options{}).Store, nil
	})
}

// Each entry is a key of its own slot: its hash tag is its id, whatever
// the lane prefix (a cluster layout's braces are dropped).
func TestRepeatKeysHaveASlotEach(t *testing.T) {
	for _, prefix := range []string{"", "{ocl:capacity}", "app"} {
		s, err := redis.Open(redis.Options{URL: "redis://127.0.0.1:1", KeyPrefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		k := redis.RepeatKey(s, "abc123")
		if redis.HashTag(k) != "abc123" {
			t.Errorf("prefix %q: key %q hashes on %q; want its id", prefix, k, redis.HashTag(k))
		}
		_ = s.Close()
	}
}

// On a cluster the entries of many ids spread over the masters.
func TestRepeatsSpreadOverTheCluster(t *testing.T) {
	seeds := redis.RealRedisCluster(t)
	h := openClusterHarness(t, seeds, redis.Options{})
	ctx := t.Context()
	slots := map[int64]bool{}
	for range 20 {
		id := lanetest.NewToken()
		if _, ok, err := h.ClaimRepeat(ctx, id, capgateEntry(lanetest.NewToken()), time.Minute, false); err != nil || !ok {
			t.Fatalf("claim = %v, %v", ok, err)
		}
		slot, err := h.raw.ClusterKeySlot(ctx, redis.RepeatKey(h.Store, id)).Result()
		if err != nil {
			t.Fatal(err)
		}
		slots[slot] = true
		if n, err := h.raw.Exists(ctx, redis.RepeatKey(h.Store, id)).Result(); err != nil || n != 1 {
			t.Fatalf("entry not found: %v, %v", n, err)
		}
	}
	if len(slots) < 10 {
		t.Fatalf("20 entries in %d slots; want each in its own", len(slots))
	}
}

func capgateEntry(tok string) repeat.Entry {
	return repeat.Entry{Token: tok, CID: "c", Fingerprint: "f"}
}
