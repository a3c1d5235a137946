package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/capgate/capgate/client"
	"github.com/capgate/capgate/policy"
)

// The tests run inside testing/synctest bubbles: time is fake and jumps
// when every goroutine of the bubble is blocked. The gateway is a real
// httptest.Server speaking HTTP/1.1, over net.Pipe connections instead of
// TCP, because a goroutine blocked on a socket would keep the fake clock
// from moving.

// ocl are the names of the built-in policy, which the fake gateway speaks
// (the X-OCL-Capacity-* headers, X-OCL-Event-Metadata and its
// capacity_aware field, the refusal code capacity_exceeded): the
// Transports of the tests are given them.
var ocl = policy.OCL().Names.Header()

// oclLanes returns the lanes of the OCL policy a $match takes: with
// semantic, the kNN lane (only_if semantic) too.
func oclLanes(semantic bool) []string {
	p := policy.OCL()
	var out []string
	for _, l := range p.LanesOf(p.Route("match")) {
		if l.OnlyIf == "" || semantic {
			out = append(out, l.Name)
		}
	}
	return out
}

// pipeListener is a net.Listener whose connections are net.Pipe pairs made
// by Dial. failDials makes the next dials fail as a refused connection.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once

	mu        sync.Mutex
	failDials int
	dials     int
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}
}

func (l *pipeListener) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	l.mu.Lock()
	l.dials++
	fail := l.failDials > 0
	if fail {
		l.failDials--
	}
	l.mu.Unlock()
	if fail {
		return nil, &net.OpError{Op: "dial", Net: network, Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	}
	srv, cli := net.Pipe()
	select {
	case l.conns <- srv:
		return cli, nil
	case <-l.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// arrival is one request as the gateway saw it.
type arrival struct {
	ID   string // X-Test-ID
	At   time.Duration
	Meta string // the client-metadata header (the OCL policy's)
	Key  string // the idempotency key
	Body string
	// Header is the request's header, for tests of other policies' names.
	Header http.Header
}

// gateway plays the capgate gateway: it records arrivals and concurrency
// and answers with handle.
type gateway struct {
	*httptest.Server
	ln    *pipeListener
	base  *http.Transport
	start time.Time

	mu          sync.Mutex
	arrivals    []arrival
	inFlight    int
	maxInFlight int
	handle      func(w http.ResponseWriter, r *http.Request, n int) // n: this ID's attempt, from 1
}

// newGateway starts a gateway answering with handle (200 "ok" when nil)
// and returns it with a Transport over it. Call inside a synctest bubble.
func newGateway(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, n int)) (*gateway, *client.Transport) {
	t.Helper()
	g := &gateway{ln: newPipeListener(), start: time.Now(), handle: handle}
	g.Server = httptest.NewUnstartedServer(http.HandlerFunc(g.serve))
	g.Listener = g.ln
	g.Start()
	base := &http.Transport{DialContext: g.ln.Dial}
	g.base = base
	t.Cleanup(func() {
		base.CloseIdleConnections()
		g.Close()
	})
	tr := client.NewTransport(base)
	tr.Names = ocl
	tr.Rand = func() float64 { return 0 }
	return g, tr
}

func (g *gateway) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	a := arrival{ID: r.Header.Get("X-Test-ID"), At: time.Since(g.start),
		Meta: r.Header.Get(ocl.Metadata), Key: r.Header.Get(client.DefaultIdempotencyHeader),
		Body: string(body), Header: r.Header.Clone()}
	g.mu.Lock()
	g.arrivals = append(g.arrivals, a)
	n := 0
	for _, b := range g.arrivals {
		if b.ID == a.ID {
			n++
		}
	}
	g.inFlight++
	g.maxInFlight = max(g.maxInFlight, g.inFlight)
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.inFlight--
		g.mu.Unlock()
	}()
	if g.handle == nil {
		admit(w, 4)
		return
	}
	g.handle(w, r, n)
}

// got returns the arrivals so far.
func (g *gateway) got() []arrival {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]arrival(nil), g.arrivals...)
}

// ids returns the IDs of the arrivals in order.
func (g *gateway) ids() []string {
	var ids []string
	for _, a := range g.got() {
		ids = append(ids, a.ID)
	}
	return ids
}

// admit answers as the gateway does for an admitted call.
func admit(w http.ResponseWriter, suggested int) {
	h := w.Header()
	h.Set(ocl.Decision, "admitted")
	h.Set(ocl.Tier, "preview")
	h.Set(ocl.SuggestedConcurrency, strconv.Itoa(suggested))
	h.Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `[]`)
}

// refuse answers with the capacity refusal of the 429.
func refuse(w http.ResponseWriter, scope string, paused bool, retryAfter, suggested int) {
	h := w.Header()
	h.Set(ocl.Decision, "refused")
	h.Set(ocl.Tier, "preview")
	h.Set(ocl.SuggestedConcurrency, strconv.Itoa(suggested))
	h.Set("Retry-After", strconv.Itoa(retryAfter))
	h.Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusTooManyRequests)
	fmt.Fprintf(w, `{"detail": "Matching is busy. Please retry in %d seconds.", "error_code": "capacity_exceeded", "scope": %q, "paused": %t, "retry_after": %d}`,
		retryAfter, scope, paused, retryAfter)
}

// rateLimit answers as an API's own rate limit does (Django REST
// framework's throttle): 429 without error_code.
func rateLimit(w http.ResponseWriter, retryAfter int) {
	w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusTooManyRequests)
	fmt.Fprintf(w, `{"detail": "Request was throttled. Expected available in %d seconds."}`, retryAfter)
}

// outcome is how one call ended.
type outcome struct {
	ID     string
	Status int
	Err    error
	Result client.Result
	At     time.Duration // when it ended, since the gateway started
}

// do sends one heavy call with id through tr and reads the answer.
func do(g *gateway, tr *client.Transport, ctx context.Context, id string, c client.Call) outcome {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.URL+"/concepts/$match/?semantic=true",
		nil)
	if err != nil {
		panic(err)
	}
	return doReq(g, tr, req, id, c)
}

func doReq(g *gateway, tr *client.Transport, req *http.Request, id string, c client.Call) outcome {
	req.Header.Set("X-Test-ID", id)
	resp, res, err := client.NewDoer(tr).Do(req.Context(), req, c)
	o := outcome{ID: id, Err: err, Result: res}
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		o.Status = resp.StatusCode
	}
	o.At = time.Since(g.start)
	return o
}

// goDo starts do in a goroutine; the channel gets its outcome.
func goDo(g *gateway, tr *client.Transport, ctx context.Context, id string, c client.Call) <-chan outcome {
	ch := make(chan outcome, 1)
	go func() { ch <- do(g, tr, ctx, id, c) }()
	return ch
}

func throttled(t *testing.T, err error) *client.ThrottledError {
	t.Helper()
	te, ok := errors.AsType[*client.ThrottledError](err)
	if !ok {
		t.Fatalf("err = %v, want a *ThrottledError", err)
	}
	if !errors.Is(err, client.ErrThrottled) {
		t.Errorf("errors.Is(err, ErrThrottled) = false")
	}
	return te
}
