package redis_test

import (
	"testing"

	"github.com/capgate/capgate/lanetest"
	"github.com/capgate/capgate/redis"
)

// BenchmarkWakeSameGateway: the release and the waiter on one Store.
func BenchmarkWakeSameGateway(b *testing.B) {
	s := benchStore(b, redis.RealRedisURL(b))
	lanetest.BenchWake(b, s, s)
}

// BenchmarkWakeOtherGateway: the release on one Store, the waiter on
// another (two gateways on one Redis): the grant reaches it by pub/sub.
func BenchmarkWakeOtherGateway(b *testing.B) {
	url := redis.RealRedisURL(b)
	lanetest.BenchWake(b, benchStore(b, url), benchStore(b, url))
}
