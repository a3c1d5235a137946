package settings

import (
	"context"
	"sync"
)

// Source gives the config in force (to a capgate.Gate, the metrics, the
// status page): a config.Service over a config store, or a Fixed. Config
// never fails: a source that cannot read its store returns its last known
// config (or the defaults) with enforce turned into shadow.
type Source interface {
	Config(ctx context.Context) Config
}

// Fixed is a config source that holds one config, replaced with Set or
// changed in place with Edit: for library users without a config store,
// tests and demos. Safe for concurrent use.
type Fixed struct {
	mu sync.RWMutex
	c  Config // requires mu held
}

// NewFixed returns a source holding c.
func NewFixed(c Config) *Fixed { return &Fixed{c: c} }

// Config returns the config held.
func (f *Fixed) Config(context.Context) Config {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.c
}

// Set replaces the config held.
func (f *Fixed) Set(c Config) {
	f.mu.Lock()
	f.c = c
	f.mu.Unlock()
}

// Edit changes the config held with fn, which runs under the lock: a
// read-modify-write no Config call sees half done.
func (f *Fixed) Edit(fn func(c *Config)) {
	f.mu.Lock()
	fn(&f.c)
	f.mu.Unlock()
}
