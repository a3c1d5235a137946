package decide

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

// request is one HTTP/1.1 request written by hand.
type request struct {
	method, target, proto string
	headers               []string
	body                  string
	noLength              bool
	keepAlive             bool
}

func (q request) raw() string {
	var b strings.Builder
	method, proto := q.method, q.proto
	if method == "" {
		method = "POST"
	}
	if proto == "" {
		proto = "HTTP/1.1"
	}
	fmt.Fprintf(&b, "%s %s %s\r\nHost: api.test\r\n", method, q.target, proto)
	for _, h := range q.headers {
		b.WriteString(h + "\r\n")
	}
	if !q.noLength {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(q.body))
	}
	if !q.keepAlive {
		b.WriteString("Connection: close\r\n")
	}
	b.WriteString("\r\n" + q.body)
	return b.String()
}

// reply is one response read.
type reply struct {
	status int
	header http.Header
	body   string
}

// sendCtx writes raw to addr and reads up to want responses (1xx skipped).
func sendCtx(ctx context.Context, addr, raw string, want int) ([]reply, error) {
	var d net.Dialer
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
	var out []reply
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
		out = append(out, reply{resp.StatusCode, resp.Header, string(b)})
	}
	return out, nil
}

// send is sendCtx failing t on a connection error, returning the statuses.
func send(t *testing.T, addr, raw string, want int) []int {
	t.Helper()
	replies, err := sendCtx(t.Context(), addr, raw, want)
	if err != nil {
		t.Fatal(err)
	}
	statuses := make([]int, len(replies))
	for i, r := range replies {
		statuses[i] = r.status
	}
	return statuses
}
