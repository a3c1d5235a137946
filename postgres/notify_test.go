package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/capgate/capgate/config"
)

// A saved version is notified to the listeners, at commit.
func TestSubscribeConfig(t *testing.T) {
	s := MustOpen(t)
	ctx, cancel := context.WithCancel(t.Context())
	ready, got, done := make(chan struct{}), make(chan int64, 8), make(chan error, 1)
	go func() { done <- s.SubscribeConfig(ctx, func() { close(ready) }, func(v int64) { got <- v }) }()
	<-ready
	v, err := s.Update(ctx, func(*config.Version) (*config.Version, error) {
		return &config.Version{Config: map[string]any{"mode": "off"}, Source: config.SourceCommand}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Other tests' schemas share the channel: wait for this version.
	timeout := time.After(10 * time.Second)
	for found := false; !found; {
		select {
		case id := <-got:
			found = id == v.ID
		case <-timeout:
			t.Fatalf("version %d not notified", v.ID)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("SubscribeConfig at cancel: %v", err)
	}
}

// BenchmarkConfigNotify is the push's latency on PostgreSQL: a version
// saved (Update, its NOTIFY delivered at commit) to its arrival at a
// listener.
func BenchmarkConfigNotify(b *testing.B) {
	s := MustOpen(b)
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	ready, got := make(chan struct{}), make(chan int64, 64)
	go func() { _ = s.SubscribeConfig(ctx, func() { close(ready) }, func(v int64) { got <- v }) }()
	<-ready
	b.ResetTimer()
	for range b.N {
		v, err := s.Update(ctx, func(*config.Version) (*config.Version, error) {
			return &config.Version{Config: map[string]any{"mode": "off"}, Source: config.SourceCommand}, nil
		})
		if err != nil {
			b.Fatal(err)
		}
		for id := int64(0); id != v.ID; {
			id = <-got // other tests' schemas share the channel
		}
	}
}
