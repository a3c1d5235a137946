package decide_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/capgate/capgate/decide"
	"github.com/capgate/capgate/settings"
)

// The connection is the lease, exactly (docs/PROTOCOL.md): these tests
// speak the protocol on raw sockets, over TCP and a unix socket.

// rawCall is one call sent on a raw connection.
type rawCall struct {
	conn net.Conn
	br   *bufio.Reader
	d    decide.Decision
}

// dialCall sends call on a new connection to addr, followed by extra, and
// reads its decision.
func dialCall(t *testing.T, network, addr, call string, extra []byte) *rawCall {
	t.Helper()
	conn, err := net.DialTimeout(network, addr, waitLimit)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(waitLimit))
	req := fmt.Sprintf("POST /v1/calls HTTP/1.1\r\nHost: capgate\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(call), call)
	if _, err := conn.Write(append([]byte(req), extra...)); err != nil {
		t.Fatal(err)
	}
	rc := &rawCall{conn: conn, br: bufio.NewReader(conn)}
	resp, err := http.ReadResponse(rc.br, nil)
	if err != nil {
		t.Fatalf("read the answer's head: %v", err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	rc.br = bufio.NewReader(resp.Body)
	if line := rc.line(t); line == nil {
		t.Fatal("no decision line")
	} else if err := json.Unmarshal(line, &rc.d); err != nil {
		t.Fatalf("decision %q: %v", line, err)
	}
	return rc
}

// line returns the next JSON line of the answer, skipping blank ones; nil
// at its end.
func (c *rawCall) line(t *testing.T) []byte {
	t.Helper()
	for {
		b, err := c.br.ReadBytes('\n')
		if len(bytes.TrimSpace(b)) > 0 {
			return b
		}
		if err != nil {
			return nil
		}
	}
}

// awaitProbes reads n of the blank lines the service writes once it saw
// the client's EOF: proof that it looked, and took the connection as open.
func (c *rawCall) awaitProbes(t *testing.T, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		b, err := c.br.ReadBytes('\n')
		if err != nil {
			t.Fatalf("waiting for the service's probe %d: %v", i+1, err)
		}
		if len(bytes.TrimSpace(b)) > 0 {
			t.Fatalf("got line %q, want a blank probe", b)
		}
	}
}

func (c *rawCall) halfClose(t *testing.T) {
	t.Helper()
	type closeWriter interface{ CloseWrite() error }
	if err := c.conn.(closeWriter).CloseWrite(); err != nil {
		t.Fatal(err)
	}
}

// leaseEnv is a decision service on TCP and on a unix socket, core users
// at one call, held at most 60 s.
func leaseEnv(t *testing.T) (e *env, addrs map[string]string) {
	e = newEnv(t, "", func(c *settings.Config) { c.MaxHoldSeconds = 60 })
	u, err := url.Parse(e.url)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := decide.Listen(decide.UnixPrefix+t.TempDir()+"/d.sock", "", false, decide.SocketOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hs := decide.NewHTTPServer(e.srv, e.gate.Logger)
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { hs.Close() })
	return e, map[string]string{"tcp": u.Host, "unix": ln.Addr().String()}
}

// TestHalfCloseIsNotAClose: a client that sends its call and shuts its
// side for writing still holds its place; closing the connection then
// frees it. (Before: net/http took the EOF for a close and freed it.)
func TestHalfCloseIsNotAClose(t *testing.T) {
	for _, network := range []string{"tcp", "unix"} {
		t.Run(network, func(t *testing.T) {
			e, addrs := leaseEnv(t)
			addr := addrs[network]
			first := dialCall(t, network, addr, call("1"), nil)
			if !first.d.Held {
				t.Fatalf("first: %+v, want held", first.d)
			}
			first.halfClose(t)
			first.awaitProbes(t, 2) // seen the EOF, written twice: the connection is open
			if second := dialCall(t, network, addr, call("2"), nil); second.d.Decision != "refused" {
				t.Errorf("after the first half-closed: %+v, want refused (its place is held)", second.d)
			}
			e.sink.Wait(t, 1, waitLimit) // the refusal's line
			first.conn.Close()
			e.sink.Wait(t, 2, waitLimit) // the first's line: written at its release
			if third := dialCall(t, network, addr, call("3"), nil); third.d.Decision != "admitted" {
				t.Errorf("after the first closed: %+v, want admitted", third.d)
			}
		})
	}
}

// TestBytesAfterTheCallKeepTheWatch: bytes after the call (a pipelined
// request, a stray CRLF) are ignored and the service keeps watching: a
// close still frees the place at once, and a half-close after them still
// holds it. (Before: net/http stopped watching at the first such byte, and
// the place outlived the close until max_hold_seconds.)
func TestBytesAfterTheCallKeepTheWatch(t *testing.T) {
	for _, network := range []string{"tcp", "unix"} {
		t.Run(network, func(t *testing.T) {
			e, addrs := leaseEnv(t)
			addr := addrs[network]
			first := dialCall(t, network, addr, call("1"), []byte("\r\n"))
			if !first.d.Held {
				t.Fatalf("first: %+v, want held", first.d)
			}
			if _, err := first.conn.Write([]byte("GET /v1/calls HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
				t.Fatal(err)
			}
			first.conn.Close()
			e.sink.Wait(t, 1, waitLimit) // its line, at its release: the close was seen
			second := dialCall(t, network, addr, call("2"), []byte("\r\nx"))
			if second.d.Decision != "admitted" || !second.d.Held {
				t.Fatalf("after the first closed: %+v, want admitted and held", second.d)
			}
			second.halfClose(t)
			second.awaitProbes(t, 2)
			if third := dialCall(t, network, addr, call("3"), nil); third.d.Decision != "refused" {
				t.Errorf("the second half-closed after stray bytes: %+v, want refused (its place is held)", third.d)
			}
			second.conn.Close()
			e.sink.Wait(t, 3, waitLimit)
			if fourth := dialCall(t, network, addr, call("4"), nil); fourth.d.Decision != "admitted" {
				t.Errorf("after the second closed: %+v, want admitted", fourth.d)
			}
		})
	}
}

// TestServeShutdownEndsHeldCalls: Serve's shutdown ends a held call with
// {"released":"shutdown"} and waits for its handler (which net/http no
// longer tracks once the connection is taken over) before it returns; a
// waiting call is ended when the timeout passes.
func TestServeShutdownEndsHeldCalls(t *testing.T) {
	e := newEnv(t, "", func(c *settings.Config) { c.Wait.MaxSeconds = 60 })
	sig := waitSignal{started: make(chan struct{}, 1)}
	e.gate.Observer = sig
	ln, err := decide.Listen(decide.UnixPrefix+t.TempDir()+"/d.sock", "", false, decide.SocketOptions{})
	if err != nil {
		t.Fatal(err)
	}
	srv := decide.NewServer(e.gate)
	ctx, cancel := context.WithCancel(t.Context())
	served := make(chan error, 1)
	go func() { served <- decide.Serve(ctx, srv, ln, 200*time.Millisecond, e.gate.Logger) }()
	addr := ln.Addr().String()
	held := dialCall(t, "unix", addr, call("1"), nil)
	if !held.d.Held {
		t.Fatalf("%+v: want held", held.d)
	}
	// A second call of the user waits: no line until the shutdown.
	waiter, err := net.Dial("unix", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	body := call("2")
	fmt.Fprintf(waiter, "POST /v1/calls HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	awaitSignal(t, sig.started)
	cancel()
	var end decide.End
	if line := held.line(t); line == nil || json.Unmarshal(line, &end) != nil || end.Released != "shutdown" {
		t.Errorf("the held call's end: %q, want released: shutdown", line)
	}
	timer := time.NewTimer(waitLimit)
	defer timer.Stop()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-timer.C:
		t.Fatal("Serve did not return after its shutdown timeout")
	}
}
