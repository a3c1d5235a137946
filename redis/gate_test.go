package redis_test

import (
	"testing"

	"github.com/capgate/capgate/lanetest"
	"github.com/capgate/capgate/redis"
)

func TestGateMiniredis(t *testing.T) {
	lanetest.RunGate(t, func(t testing.TB) lanetest.Store {
		_, h := openMini(t)
		return h
	})
}

func TestGateRealRedis(t *testing.T) {
	url := redis.RealRedisURL(t)
	lanetest.RunGate(t, func(t testing.TB) lanetest.Store {
		return openHarness(t, url)
	})
}
