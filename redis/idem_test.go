package redis_test

import (
	"testing"
	"time"

	"github.com/capgate/capgate/lanetest"
	"github.com/capgate/capgate/redis"
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
