package http

import (
	"context"
	"errors"
	"net"
	"net/http/httptrace"
	"sync"
	"time"

	"github.com/capgate/capgate"
)

// A route whose API stops a call when its connection closes (vLLM, TGI,
// llama.cpp's server: on_client_gone: cancel) has its upstream request
// cancelled as soon as its client leaves, and its place freed once the
// upstream connection is closed (the API has then stopped), where hold.go
// keeps the call running to its end. One exception: a call that holds an
// idempotency key and has not started its answer may be retried by a
// client that timed out (the official OpenAI clients retry a timeout), so
// it is held as hold.go holds it, and the retry joins it: the API runs it
// once. The access log says 499 for a call cut so, and its line has error
// "client gone".

// errClientGone is the error of a call cut because its client left.
var errClientGone = errors.New("client gone")

// upstreamCloseWait bounds how long a cut call waits for its upstream
// connection to close before its place is freed anyway.
const upstreamCloseWait = 2 * time.Second

// repeatHolderKey is the context key that marks a call holding an
// idempotency key (the first call of its key: retries may join it).
type repeatHolderKey struct{}

// withRepeatHolder marks ctx's call as holding an idempotency key.
func withRepeatHolder(ctx context.Context) context.Context {
	return context.WithValue(ctx, repeatHolderKey{}, true)
}

// cancelOnLeave returns what decides, when the client of a cancel route's
// call leaves, whether its upstream request is cancelled now: always,
// unless the call holds an idempotency key and its answer has not started
// (hw.started): then it is held, for the retry.
func cancelOnLeave(ctx context.Context, hw *holdWriter) func() bool {
	holder, _ := ctx.Value(repeatHolderKey{}).(bool)
	return func() bool { return !holder || hw.started.Load() }
}

// upstreamConn is the upstream connection a call's request went out on,
// when the transport dialled it (NewTransport's trackedConn).
type upstreamConn struct {
	mu   sync.Mutex
	conn *trackedConn // requires mu held
}

func (u *upstreamConn) get() *trackedConn {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.conn
}

// traceUpstreamConn returns ctx with a trace that records the connection
// the request goes out on.
func traceUpstreamConn(ctx context.Context) (context.Context, *upstreamConn) {
	u := &upstreamConn{}
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		if tc, ok := i.Conn.(*trackedConn); ok {
			u.mu.Lock()
			u.conn = tc
			u.mu.Unlock()
		}
	}}), u
}

// cutDone ends a cancel route's call: when its client left and the
// upstream request was cut for it, it waits (at most upstreamCloseWait)
// for the upstream connection to close — the transport closes it on the
// cancellation, and the API stops the work with it — then says so on the
// call's line and in the access log.
func (h *hold) cutDone(client context.Context, adm *capgate.Admission, up *upstreamConn) {
	h.mu.Lock()
	cut := h.cut
	h.mu.Unlock()
	if !cut {
		return
	}
	if tc := up.get(); tc != nil {
		t := time.NewTimer(upstreamCloseWait)
		select {
		case <-tc.closed:
		case <-t.C:
		}
		t.Stop()
	}
	adm.Interrupt(errClientGone)
	if i := infoFrom(client); i != nil {
		i.gone = true
	}
}

// trackedConn is an upstream connection that says when it is closed.
type trackedConn struct {
	net.Conn
	once   sync.Once
	closed chan struct{}
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { close(c.closed) })
	return err
}

// trackedDial wraps dial so that each connection it makes is a
// trackedConn.
func trackedDial(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &trackedConn{Conn: c, closed: make(chan struct{})}, nil
	}
}
