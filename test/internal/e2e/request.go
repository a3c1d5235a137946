package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Request is one HTTP/1.1 request written by hand, so it can carry what
// net/http's client would never send.
type Request struct {
	Method, Target, Proto string // Method "" is POST, Proto "" HTTP/1.1
	Headers               []string
	Body                  string
	NoLength              bool // send no Content-Length (the headers frame the body)
	KeepAlive             bool // omit Connection: close (pipelining)
}

// Raw returns the request as sent.
func (q Request) Raw() string {
	var b strings.Builder
	method, proto := q.Method, q.Proto
	if method == "" {
		method = "POST"
	}
	if proto == "" {
		proto = "HTTP/1.1"
	}
	fmt.Fprintf(&b, "%s %s %s\r\nHost: api.test\r\n", method, q.Target, proto)
	for _, h := range q.Headers {
		b.WriteString(h + "\r\n")
	}
	if !q.NoLength {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(q.Body))
	}
	if !q.KeepAlive {
		b.WriteString("Connection: close\r\n")
	}
	b.WriteString("\r\n" + q.Body)
	return b.String()
}

// Reply is one response read.
type Reply struct {
	Status int
	Header http.Header
	Body   string
}

// Send writes raw to addr and reads the responses (1xx skipped) until the
// connection closes or want of them arrived, for at most 60 s.
func Send(ctx context.Context, addr, raw string, want int) ([]Reply, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := io.WriteString(conn, raw); err != nil {
		return nil, err
	}
	br := bufio.NewReader(conn)
	var out []Reply
	for len(out) < want {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			break
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 100 && resp.StatusCode < 200 {
			continue
		}
		out = append(out, Reply{resp.StatusCode, resp.Header, string(b)})
	}
	return out, nil
}

// Statuses is Send failing t on a connection error; it returns the
// statuses read.
func Statuses(t testing.TB, addr, raw string, want int) []int {
	t.Helper()
	replies, err := Send(t.Context(), addr, raw, want)
	if err != nil {
		t.Fatal(err)
	}
	statuses := make([]int, len(replies))
	for i, r := range replies {
		statuses[i] = r.Status
	}
	return statuses
}
