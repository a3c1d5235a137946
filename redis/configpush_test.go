package redis_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/capgate/capgate/config"
	"github.com/capgate/capgate/redis"
)

var (
	_ config.Notifier   = (*redis.ConfigChannel)(nil)
	_ config.Subscriber = (*redis.ConfigChannel)(nil)
)

// A version published on the channel reaches its subscribers, and only
// those of the same key prefix.
func TestConfigChannel(t *testing.T) {
	m := miniredis.RunT(t)
	s, err := redis.Open(redis.Options{URL: "redis://" + m.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(t.Context())
	ready, got, done := make(chan struct{}), make(chan int64, 1), make(chan error, 1)
	go func() {
		done <- redis.NewConfigChannel(s, "app").SubscribeConfig(ctx, func() { close(ready) }, func(v int64) { got <- v })
	}()
	<-ready
	if n, err := redis.NewConfigChannel(s, "other").Publish(ctx, 6); err != nil || n != 0 {
		t.Errorf("another prefix: %d subscribers, %v", n, err)
	}
	if n, err := redis.NewConfigChannel(s, "app").Publish(ctx, 7); err != nil || n != 1 {
		t.Errorf("publish: %d subscribers, %v", n, err)
	}
	select {
	case v := <-got:
		if v != 7 {
			t.Errorf("got version %d, want 7", v)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no version received")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("SubscribeConfig at cancel: %v", err)
	}
}

// BenchmarkConfigPush is the push's latency: a version published to its
// arrival at a subscriber (the gateway then reads the config once). On the
// real Redis with CAPGATE_TEST_REDIS_URL, else miniredis.
func BenchmarkConfigPush(b *testing.B) {
	url := os.Getenv("CAPGATE_TEST_REDIS_URL")
	if url == "" {
		url = "redis://" + miniredis.RunT(b).Addr()
	}
	s, err := redis.Open(redis.Options{URL: url})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ch := redis.NewConfigChannel(s, "bench:"+b.Name())
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	ready, got := make(chan struct{}), make(chan int64, 1)
	go func() { _ = ch.SubscribeConfig(ctx, func() { close(ready) }, func(v int64) { got <- v }) }()
	<-ready
	b.ResetTimer()
	for i := range b.N {
		if _, err := ch.Publish(ctx, int64(i)); err != nil {
			b.Fatal(err)
		}
		<-got
	}
}
