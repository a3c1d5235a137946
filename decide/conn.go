package decide

import (
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"time"
)

// callConn is the connection of one call once its body is read. The
// service takes it over from net/http (Hijack), writes the answer itself
// and watches the connection: net/http's own watch takes a half-close for
// a close, and stops at the first byte past the request, after which a
// close goes unseen (docs/PROTOCOL.md, "The connection is the lease").
//
// A read returning EOF says only that the client will send no more: a
// half-close (shutdown(SHUT_WR)) or a close. The watch then tells them
// apart by writing: a chunk holding one blank line, which a reader of
// JSON lines skips. A closed connection fails the write (a unix socket at
// once; TCP at the second write, after the peer's reset), a half-closed
// one takes it.
type callConn struct {
	conn net.Conn

	mu     sync.Mutex // serializes writes
	head   bool       // the response's head is written; requires mu
	closed bool       // the service closed the connection; requires mu

	gone     chan struct{} // closed when the client closed the connection
	goneOnce sync.Once
	ended    chan struct{} // closed when the service is done with the connection
	headOut  chan struct{} // closed when the head is written: probes may follow
}

// writeTimeout bounds each write: a client that stops reading is taken as
// gone rather than left to block the handler.
const writeTimeout = 10 * time.Second

// probeDelays are the waits before each probe after the client's EOF; the
// last repeats. The first two find a TCP close within milliseconds.
var probeDelays = []time.Duration{0, 2 * time.Millisecond, 10 * time.Millisecond, 50 * time.Millisecond, 200 * time.Millisecond, time.Second}

// probe is a chunk of one blank line.
var probe = []byte("1\r\n\n\r\n")

func newCallConn(conn net.Conn) *callConn {
	c := &callConn{conn: conn, gone: make(chan struct{}), ended: make(chan struct{}), headOut: make(chan struct{})}
	_ = conn.SetDeadline(time.Time{})
	go c.watch()
	return c
}

func (c *callConn) setGone() { c.goneOnce.Do(func() { close(c.gone) }) }

// watch reads the connection to its end, ignoring any bytes (a pipelined
// request, a stray CRLF: the call is decided, the connection only tells
// when it ends), then probes it until a write fails or the service is done.
func (c *callConn) watch() {
	buf := make([]byte, 512)
	for {
		_, err := c.conn.Read(buf)
		if err == nil {
			continue
		}
		if !errors.Is(err, io.EOF) {
			c.setGone() // a reset, or the service closed it
			return
		}
		break
	}
	// Probes go after the head (until then the answer comes within the
	// store's deadline, or the head is sent as the call queues), each
	// schedule from its start.
	select {
	case <-c.headOut:
	case <-c.ended:
		return
	}
	for i := 0; ; i++ {
		t := time.NewTimer(probeDelays[min(i, len(probeDelays)-1)])
		select {
		case <-t.C:
		case <-c.ended:
			t.Stop()
			return
		}
		if !c.probe() {
			c.setGone()
			return
		}
	}
}

// probe writes a blank line; false when the write failed.
func (c *callConn) probe() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return true
	}
	return c.writeLocked(probe) == nil
}

// writeHead writes the response's head, if not yet written; waitSeconds >
// 0 adds the Capgate-Wait-Seconds header.
func (c *callConn) writeHead(waitSeconds int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.headLocked(waitSeconds)
}

func (c *callConn) headLocked(waitSeconds int) error {
	if c.head {
		return nil
	}
	c.head = true
	close(c.headOut)
	b := make([]byte, 0, 256)
	b = append(b, "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nCache-Control: no-store\r\n"...)
	if waitSeconds > 0 {
		b = append(b, HeaderWaitSeconds+": "...)
		b = strconv.AppendInt(b, int64(waitSeconds), 10)
		b = append(b, "\r\n"...)
	}
	b = append(b, "Date: "...)
	b = time.Now().UTC().AppendFormat(b, "Mon, 02 Jan 2006 15:04:05 GMT")
	b = append(b, "\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"...)
	return c.writeLocked(b)
}

// writeLine writes line (ending in a newline) as one chunk, after the
// head if needed.
func (c *callConn) writeLine(line []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.headLocked(0); err != nil {
		return err
	}
	b := make([]byte, 0, len(line)+16)
	b = strconv.AppendInt(b, int64(len(line)), 16)
	b = append(b, "\r\n"...)
	b = append(b, line...)
	b = append(b, "\r\n"...)
	return c.writeLocked(b)
}

func (c *callConn) writeLocked(b []byte) error {
	if c.closed {
		return net.ErrClosed
	}
	_ = c.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, err := c.conn.Write(b)
	return err
}

// finish ends the answer (when the client is still there to read its end:
// finished) and closes the connection.
func (c *callConn) finish(finished bool) {
	c.mu.Lock()
	if finished && c.head && !c.closed {
		_ = c.writeLocked([]byte("0\r\n\r\n"))
	}
	c.closed = true
	c.mu.Unlock()
	close(c.ended)
	_ = c.conn.Close()
}
