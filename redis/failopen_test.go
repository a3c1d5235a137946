package redis_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/lanetest"
	"github.com/capgate/capgate/redis"
)

// socketTimeout is far longer than any deadline in these tests, so a test
// that returns in time shows the deadline did it, not the socket.
const socketTimeout = 30 * time.Second

// within fails t unless the call took no longer than max.
func within(t *testing.T, what string, start time.Time, max time.Duration) {
	t.Helper()
	if took := time.Since(start); took > max {
		t.Errorf("%s took %v, want at most %v", what, took, max)
	}
}

func openHung(t *testing.T, opts redis.Options) (*redis.Store, *hungServer) {
	t.Helper()
	srv := newHungServer(t)
	opts.URL = "redis://" + srv.Addr
	opts.Timeout = socketTimeout
	s, err := redis.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, srv
}

func acquireReq() capgate.AcquireRequest {
	return capgate.AcquireRequest{Token: lanetest.NewToken(), Keys: []string{lanetest.NewPrefix() + "lane"}, Limits: []int{5}, Lease: time.Minute}
}

func TestHungRedisFailsAtTheDeadline(t *testing.T) {
	s, _ := openHung(t, redis.Options{Deadline: 100 * time.Millisecond})
	for name, op := range map[string]func(context.Context) error{
		"acquire": func(ctx context.Context) error {
			_, err := s.Acquire(ctx, acquireReq(), make([]int, 1))
			return err
		},
		"renew": func(ctx context.Context) error {
			_, err := s.Renew(ctx, lanetest.NewToken(), []string{"k"}, time.Minute)
			return err
		},
		"release": func(ctx context.Context) error { return s.Release(ctx, lanetest.NewToken(), []string{"k"}) },
		"count":   func(ctx context.Context) error { return s.Count(ctx, []string{"k"}, make([]int, 1)) },
		"keys": func(ctx context.Context) error {
			_, err := s.Keys(ctx, "k")
			return err
		},
		"ping": s.Ping,
	} {
		start := time.Now()
		err := op(t.Context())
		if took := time.Since(start); took < 100*time.Millisecond {
			t.Errorf("%s returned after %v, before the deadline", name, took)
		}
		within(t, name, start, 2*time.Second) // the socket would wait 30 s
		if err == nil || err.Error() != "no answer from Redis within 0.1 s" {
			t.Errorf("%s: error %q, want exactly %q", name, err, "no answer from Redis within 0.1 s")
		}
		var de *redis.DeadlineError
		if !errors.As(err, &de) {
			t.Errorf("%s: error %T is not a *DeadlineError", name, err)
		}
	}
}

// TestHungSentinelFailsAtTheDeadline: master discovery through a Sentinel
// that never answers is bounded by the deadline too.
func TestHungSentinelFailsAtTheDeadline(t *testing.T) {
	srv := newHungServer(t)
	s, err := redis.Open(redis.Options{Sentinels: []string{srv.Addr}, Deadline: 100 * time.Millisecond, Timeout: socketTimeout})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = s.Ping(t.Context())
	within(t, "ping through a hung Sentinel", start, 2*time.Second)
	if err == nil || err.Error() != "no answer from Redis within 0.1 s" {
		t.Errorf("error %q, want the deadline error", err)
	}

	// The discovery still hangs, holding go-redis's own lock: Close must
	// not wait for it.
	start = time.Now()
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	within(t, "Close while a Sentinel hangs", start, time.Second)
}

// TestFullQueueIsBusyOnlyAtTheDeadline: an operation that finds the queue
// full waits for a place; one that gets none within the deadline fails with
// ErrBusy (back-pressure, not a *DeadlineError, which the gate would take
// for a failed Redis).
func TestFullQueueIsBusyOnlyAtTheDeadline(t *testing.T) {
	s, srv := openHung(t, redis.Options{MaxInFlight: 1, MaxQueued: 1, Deadline: 200 * time.Millisecond})
	queued, hold := make(chan struct{}, 1), make(chan struct{})
	// The queued operation keeps its place until the test lets go.
	redis.SetTestHookQueued(s, func() { queued <- struct{}{}; <-hold })

	results := make(chan error, 2)
	go func() { results <- s.Ping(t.Context()) }() // in flight, hangs
	<-srv.Got
	go func() { results <- s.Ping(t.Context()) }() // queued
	<-queued

	start := time.Now()
	_, err := s.Acquire(t.Context(), acquireReq(), make([]int, 1))
	if took := time.Since(start); took < 200*time.Millisecond {
		t.Errorf("an operation behind a full queue returned after %v, before the deadline", took)
	}
	within(t, "an operation behind a full queue", start, 2*time.Second)
	var de *redis.DeadlineError
	if !errors.Is(err, capgate.ErrBusy) || errors.As(err, &de) {
		t.Errorf("error %v, want ErrBusy", err)
	}
	close(hold)
	for range 2 {
		if err := <-results; !errors.As(err, &de) {
			t.Errorf("a held operation got %v, want the deadline error", err)
		}
	}
}

// TestFullQueueWaitsForAPlace: operations behind a full queue get through
// once Redis answers again; one whose caller gives up while it waits for a
// place returns at once and is never sent.
func TestFullQueueWaitsForAPlace(t *testing.T) {
	m, _ := openMini(t)
	p := newProxy(t, m.Addr())
	s, err := redis.Open(redis.Options{URL: "redis://" + p.Addr, MaxInFlight: 1, MaxQueued: 1, Deadline: time.Minute, Timeout: socketTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Ping(t.Context()); err != nil { // connect before pausing
		t.Fatal(err)
	}
	queued, full := make(chan struct{}, 4), make(chan struct{}, 4)
	redis.SetTestHookQueued(s, func() { queued <- struct{}{} })
	redis.SetTestHookFull(s, func() { full <- struct{}{} })

	p.Pause()
	results := make(chan error, 4)
	go func() { results <- s.Ping(t.Context()) }() // in flight, held by the proxy
	<-p.Held
	go func() { results <- s.Ping(t.Context()) }() // queued
	<-queued
	waiting := make(chan error, 1)
	go func() { // waits for a place
		_, err := s.Acquire(t.Context(), acquireReq(), make([]int, 1))
		waiting <- err
	}()
	<-full
	ctx, cancel := context.WithCancel(t.Context())
	gone := make(chan error, 1)
	go func() { // waits for a place, then gives up
		_, err := s.Acquire(ctx, capgate.AcquireRequest{Token: lanetest.NewToken(), Keys: []string{"given-up"}, Limits: []int{5}, Lease: time.Minute}, make([]int, 1))
		gone <- err
	}()
	<-full
	cancel()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Errorf("a caller that gave up got %v, want context.Canceled", err)
	}

	p.Resume()
	for range 2 {
		if err := <-results; err != nil {
			t.Errorf("ping: %v", err)
		}
	}
	if err := <-waiting; err != nil {
		t.Errorf("the acquire that waited for a place: %v", err)
	}
	if m.Exists("given-up") {
		t.Error("the acquire whose caller gave up was sent")
	}
}

// TestGivenUpWhileQueuedIsNeverSent: the first operation is held up on its
// way to the server; the second waits in the queue and its caller gives up;
// once the first is through, a third runs, and the second never does.
func TestGivenUpWhileQueuedIsNeverSent(t *testing.T) {
	m, _ := openMini(t)
	p := newProxy(t, m.Addr())
	s, err := redis.Open(redis.Options{URL: "redis://" + p.Addr, MaxInFlight: 1, Deadline: time.Minute, Timeout: socketTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	queued := make(chan struct{}, 1)
	redis.SetTestHookQueued(s, func() { queued <- struct{}{} })
	if err := s.Ping(t.Context()); err != nil { // connect first
		t.Fatal(err)
	}

	p.Pause()
	first := make(chan error, 1)
	ctx1, cancel1 := context.WithCancel(t.Context())
	defer cancel1()
	go func() { first <- s.Ping(ctx1) }()
	<-p.Held

	second := make(chan error, 1)
	ctx2, cancel2 := context.WithCancel(t.Context())
	req := acquireReq()
	req.Force = true
	go func() {
		_, err := s.Acquire(ctx2, req, make([]int, 1))
		second <- err
	}()
	<-queued
	cancel2()
	if err := <-second; !errors.Is(err, context.Canceled) {
		t.Fatalf("the queued caller that gave up got %v, want context.Canceled", err)
	}

	p.Resume()
	if err := <-first; err != nil {
		t.Fatalf("first operation: %v", err)
	}
	third := acquireReq()
	if _, err := s.Acquire(t.Context(), third, make([]int, 1)); err != nil {
		t.Fatalf("third operation: %v", err)
	}
	if err := s.Ping(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !m.Exists(third.Keys[0]) {
		t.Error("the third operation did not run")
	}
	if m.Exists(req.Keys[0]) {
		t.Error("the operation whose caller gave up in the queue was sent")
	}
}

// TestGivenUpBeforeSendingSendsNothing: a caller whose context is already
// done sends nothing, even with a free slot.
func TestGivenUpBeforeSendingSendsNothing(t *testing.T) {
	m, h := openMini(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	before := m.CommandCount()
	req := acquireReq()
	if _, err := h.Acquire(ctx, req, make([]int, 1)); !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want context.Canceled", err)
	}
	if got := m.CommandCount(); got != before {
		t.Errorf("the server got %d commands, want none", got-before)
	}
}

func TestCloseDoesNotWaitForAHungCall(t *testing.T) {
	s, srv := openHung(t, redis.Options{Deadline: time.Minute})
	result := make(chan error, 1)
	go func() { result <- s.Ping(t.Context()) }()
	<-srv.Got

	start := time.Now()
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	within(t, "Close", start, time.Second)
	if err := <-result; !errors.Is(err, redis.ErrClosed) {
		t.Errorf("the hung call got %v, want ErrClosed", err)
	}
	within(t, "the hung call", start, time.Second)
	if err := s.Ping(t.Context()); !errors.Is(err, redis.ErrClosed) {
		t.Errorf("a call after Close got %v, want ErrClosed", err)
	}
}

// TestRedisDownFailsFast: nothing listens, so the dial fails at once and
// the error is wrapped with the operation.
func TestRedisDownFailsFast(t *testing.T) {
	down, err := redis.Open(redis.Options{URL: "redis://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close()
	start := time.Now()
	_, err = down.Acquire(t.Context(), acquireReq(), make([]int, 1))
	within(t, "acquire on a closed port", start, time.Second)
	var de *redis.DeadlineError
	if err == nil || errors.As(err, &de) || !strings.HasPrefix(err.Error(), "acquire lanes: ") {
		t.Errorf("error %q, want a dial error wrapped with the operation", err)
	}
}

// TestSentAcquireIsAwaited: a caller that gives up after its acquire was
// sent still learns that it took the lease, so it can give it back.
func TestSentAcquireIsAwaited(t *testing.T) {
	m, _ := openMini(t)
	p := newProxy(t, m.Addr())
	s, err := redis.Open(redis.Options{URL: "redis://" + p.Addr, Deadline: time.Minute, Timeout: socketTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Ping(t.Context()); err != nil {
		t.Fatal(err)
	}
	p.Pause()
	ctx, cancel := context.WithCancel(t.Context())
	req := acquireReq()
	type answer struct {
		taken bool
		err   error
	}
	done := make(chan answer, 1)
	go func() {
		taken, err := s.Acquire(ctx, req, make([]int, 1))
		done <- answer{taken, err}
	}()
	<-p.Held // sent
	cancel()
	p.Resume()
	if a := <-done; !a.taken || a.err != nil {
		t.Fatalf("acquire sent, then given up: taken %v, error %v; want the lease reported", a.taken, a.err)
	}
	if !m.Exists(req.Keys[0]) {
		t.Fatal("no lease in Redis")
	}
}

// TestOnlyThePlainClientRunsOnTheCallersGoroutine: the client Open makes
// for a Redis URL returns by the context's deadline by itself, so its
// commands run on the caller's goroutine; Sentinel discovery can block past
// it, and a client given to New is of unknown settings, so theirs run on a
// goroutine of their own.
func TestOnlyThePlainClientRunsOnTheCallersGoroutine(t *testing.T) {
	plain, err := redis.Open(redis.Options{URL: "redis://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	sentinel, err := redis.Open(redis.Options{Sentinels: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer sentinel.Close()
	cluster, err := redis.Open(redis.Options{Cluster: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	client := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	given, err := redis.New(client, redis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !redis.Direct(plain) || redis.Direct(sentinel) || redis.Direct(cluster) || redis.Direct(given) {
		t.Errorf("direct: URL %v, Sentinel %v, Cluster %v, New %v; want true, false, false, false",
			redis.Direct(plain), redis.Direct(sentinel), redis.Direct(cluster), redis.Direct(given))
	}
}

// TestQueueDeadlineIsBusyNotARedisFailure: of two operations cut off by
// the deadline, the one on the wire is Redis's failure (a *DeadlineError
// only) and the one that spent it in this process's queue is back-pressure
// (a *DeadlineError that matches ErrBusy), so the gate does not open its
// skip window for it.
func TestQueueDeadlineIsBusyNotARedisFailure(t *testing.T) {
	s, srv := openHung(t, redis.Options{MaxInFlight: 1, MaxQueued: 1, Deadline: 200 * time.Millisecond})
	queued := make(chan struct{}, 1)
	redis.SetTestHookQueued(s, func() { queued <- struct{}{} })
	sent, waited := make(chan error, 1), make(chan error, 1)
	go func() { sent <- s.Ping(t.Context()) }() // in flight, hangs
	<-srv.Got
	go func() { waited <- s.Ping(t.Context()) }() // queued behind it
	<-queued
	var de *redis.DeadlineError
	if err := <-sent; !errors.As(err, &de) || errors.Is(err, capgate.ErrBusy) || de.Queued {
		t.Errorf("the operation on the wire got %v, want Redis's own deadline error", err)
	}
	err := <-waited
	if !errors.As(err, &de) || !de.Queued || !errors.Is(err, capgate.ErrBusy) {
		t.Errorf("the queued operation got %v, want a queued deadline error matching ErrBusy", err)
	}
	if err == nil || err.Error() != "no answer from Redis within 0.2 s" {
		t.Errorf("error text %q", err)
	}
}
