// Package mock holds func-field stand-ins for capgate's interfaces, used to
// inject faults around a real implementation in tests.
package mock

import (
	"context"
	"time"

	"github.com/capgate/capgate"
)

var _ capgate.LaneStore = (*LaneStore)(nil)

// LaneStore calls its func fields where set and the wrapped Base
// otherwise, so a test can make one operation fail or hang while the rest
// behave as the real store does. It offers what Base offers (Caps): Base's
// waitlist, idempotency, adaptive state, deadline, kind and key prefix,
// called directly, not through the func fields; CapsFn declares others.
type LaneStore struct {
	Base capgate.LaneStore

	AcquireFn func(ctx context.Context, req capgate.AcquireRequest, counts []int) (bool, error)
	RenewFn   func(ctx context.Context, token string, keys []string, lease time.Duration) (int, error)
	ReleaseFn func(ctx context.Context, token string, keys []string) error
	CountFn   func(ctx context.Context, keys []string, counts []int) error
	KeysFn    func(ctx context.Context, prefix string) ([]string, error)
	PingFn    func(ctx context.Context) error
	// CapsFn, if set, declares what the store offers instead of Base: a
	// test's store of unknown kind, or without a waitlist.
	CapsFn func() capgate.StoreCaps
}

// Acquire calls AcquireFn or Base.Acquire.
func (s *LaneStore) Acquire(ctx context.Context, req capgate.AcquireRequest, counts []int) (bool, error) {
	if s.AcquireFn != nil {
		return s.AcquireFn(ctx, req, counts)
	}
	return s.Base.Acquire(ctx, req, counts)
}

// Renew calls RenewFn or Base.Renew.
func (s *LaneStore) Renew(ctx context.Context, token string, keys []string, lease time.Duration) (int, error) {
	if s.RenewFn != nil {
		return s.RenewFn(ctx, token, keys, lease)
	}
	return s.Base.Renew(ctx, token, keys, lease)
}

// Release calls ReleaseFn or Base.Release.
func (s *LaneStore) Release(ctx context.Context, token string, keys []string) error {
	if s.ReleaseFn != nil {
		return s.ReleaseFn(ctx, token, keys)
	}
	return s.Base.Release(ctx, token, keys)
}

// Count calls CountFn or Base.Count.
func (s *LaneStore) Count(ctx context.Context, keys []string, counts []int) error {
	if s.CountFn != nil {
		return s.CountFn(ctx, keys, counts)
	}
	return s.Base.Count(ctx, keys, counts)
}

// Keys calls KeysFn or Base.Keys.
func (s *LaneStore) Keys(ctx context.Context, prefix string) ([]string, error) {
	if s.KeysFn != nil {
		return s.KeysFn(ctx, prefix)
	}
	return s.Base.Keys(ctx, prefix)
}

// Ping calls PingFn or Base.Ping.
func (s *LaneStore) Ping(ctx context.Context) error {
	if s.PingFn != nil {
		return s.PingFn(ctx)
	}
	return s.Base.Ping(ctx)
}

// Caps calls CapsFn or forwards Base's set (Base.Caps; none without a
// Base): a wrapped store waits, joins repeats and keeps adaptive limits as
// Base does.
func (s *LaneStore) Caps() capgate.StoreCaps {
	if s.CapsFn != nil {
		return s.CapsFn()
	}
	if s.Base == nil {
		return capgate.StoreCaps{}
	}
	return s.Base.Caps()
}
