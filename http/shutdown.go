package http

import (
	"context"
	"errors"
)

// ErrShutdown is the error of a call cut short because the gateway shut
// down before it ended: its ocl_capacity line has error "shutdown".
var ErrShutdown = errors.New("shutdown")

// shutdownKey is the context key of the gateway's cut context.
type shutdownKey struct{}

// WithShutdown returns ctx carrying cut, a context done when the gateway
// stops waiting for the calls in flight (its shutdown timeout passed, or a
// second signal came). The gateway's server sets it on every request's
// context (http.Server.BaseContext). When cut is done, a call still
// running is cut: its upstream request is cancelled, even a counted call's
// (which otherwise outlives its client), its line says error "shutdown",
// and its leases are released as the handler returns.
func WithShutdown(ctx, cut context.Context) context.Context {
	return context.WithValue(ctx, shutdownKey{}, cut)
}

// shutdownOf returns the cut context of ctx, nil when there is none.
func shutdownOf(ctx context.Context) context.Context {
	cut, _ := ctx.Value(shutdownKey{}).(context.Context)
	return cut
}

// cutShort reports whether the gateway cut the call of ctx short.
func cutShort(ctx context.Context) bool {
	cut := shutdownOf(ctx)
	return cut != nil && cut.Err() != nil
}
