package http_test

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"
	"time"

	capgatehttp "github.com/capgate/capgate/http"
)

// An upstream may start its answer before it has read the whole request
// body (a stream that answers as the upload arrives, or an API that
// answers at once and never reads the body). The gateway passes the
// answer on at once and goes on sending the body: net/http's server would
// otherwise read the rest of the body itself when the answer starts (and
// close it under the transport still sending it, which cut the upstream
// connection mid-answer).
func TestAnswerStartsBeforeTheBodyEnds(t *testing.T) {
	firstChunk := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The upstream reads its body while it answers, as such APIs do.
		if err := http.NewResponseController(w).EnableFullDuplex(); err != nil {
			t.Errorf("upstream: %v", err)
		}
		buf := make([]byte, 5)
		if _, err := io.ReadFull(r.Body, buf); err != nil {
			t.Errorf("upstream: first chunk: %v", err)
			return
		}
		close(firstChunk)
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write([]byte("data: one\n\n"))
		http.NewResponseController(w).Flush()
		rest, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("upstream: the rest of the body: %v", err)
			return
		}
		w.Write([]byte("data: " + strconv.Itoa(len(buf)+len(rest)) + "\n\n"))
	}))
	t.Cleanup(up.Close)
	e := newEnv(t, nil, func(c *capgatehttp.GatewayConfig) { c.Upstream, _ = url.Parse(up.URL) })

	pr, pw := io.Pipe()
	req, err := http.NewRequestWithContext(t.Context(), "POST", e.front.URL+"/upload/", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Token t-pam")
	sawFirst := make(chan struct{})
	go func() {
		pw.Write([]byte("hello"))
		<-firstChunk
		// The rest only once the answer has begun, as a client streaming
		// in step with its answer would.
		select {
		case <-sawFirst:
		case <-t.Context().Done():
		}
		pw.Write([]byte(" world, and the rest"))
		pw.Close()
	}()
	got := make(chan *http.Response, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			close(got)
			return
		}
		got <- resp
	}()
	var resp *http.Response
	select {
	case resp = <-got:
	case <-time.After(waitLimit):
		pw.CloseWithError(io.ErrUnexpectedEOF)
		t.Fatal("the answer did not start while the body was still being sent")
	}
	if resp == nil {
		return
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if ev := readEvent(t, br); ev != "data: one\n" {
		t.Errorf("first event %q", ev)
	}
	close(sawFirst)
	if ev := readEvent(t, br); ev != "data: 25\n" {
		t.Errorf("second event %q; want the whole body's 25 bytes read by the upstream", ev)
	}
}
