package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/capgate/capgate/config"
	"github.com/capgate/capgate/sqlite"
)

// A commit by another process's store (here another Store on the same
// file, as the capacity CLI is) reaches the subscriber.
func TestSubscribeConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.db")
	gw, err := sqlite.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	cli, err := sqlite.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithCancel(t.Context())
	ready, got, done := make(chan struct{}), make(chan int64, 8), make(chan error, 1)
	go func() { done <- gw.SubscribeConfig(ctx, func() { close(ready) }, func(v int64) { got <- v }) }()
	<-ready
	if _, err := cli.Update(ctx, func(*config.Version) (*config.Version, error) {
		return &config.Version{Config: map[string]any{"mode": "off"}, Source: config.SourceCommand}, nil
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the commit was not seen")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("SubscribeConfig at cancel: %v", err)
	}
}
