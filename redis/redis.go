// Package redis is the lane store for a cluster of gateways: the leases
// live in Redis (standalone, behind Sentinel, or a Redis Cluster), one
// sorted set per lane,
// changed only by the Lua scripts embedded beside this file, which read the
// time from Redis's own clock.
//
// The store is built to fail open: it has its own client, with
// short timeouts and no retries; every operation has an overall deadline
// that bounds the caller whatever Redis, DNS or Sentinel do; the
// operations in flight are bounded, with a short queue behind them; and
// nothing waits on a hung call, Close included.
//
// It is also a capgate.Waitlist: waiting tickets live in Redis beside the
// lanes (waitpass.lua), shared by every gateway, and grants wake a
// gateway's waiters through one pub/sub connection per Store (wake.go),
// opened on its first waiter.
package redis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/capgate/capgate"
)

// Client is the part of a go-redis client the store uses: a
// *goredis.Client (standalone or failover) and a *goredis.ClusterClient
// satisfy it. On a cluster, every key of one call must hash to one slot
// (KeyLayoutCluster sees to it).
type Client interface {
	goredis.Scripter
	Pipelined(ctx context.Context, fn func(goredis.Pipeliner) error) ([]goredis.Cmder, error)
	Scan(ctx context.Context, cursor uint64, match string, count int64) *goredis.ScanCmd
	Ping(ctx context.Context) *goredis.StatusCmd
	Subscribe(ctx context.Context, channels ...string) *goredis.PubSub
	Publish(ctx context.Context, channel string, message any) *goredis.IntCmd
}

// ErrClosed is returned by operations on a closed Store.
var ErrClosed = errors.New("the Redis lane store is closed")

// DeadlineError is returned when Redis gave no answer within the
// operation deadline (Options.Deadline), whether the time went on the
// queue, DNS, Sentinel discovery, the connection or the command. Its text
// is exactly "no answer from Redis within 1.0 s" (the deadline in seconds,
// with at least one decimal), and it is returned as is, not wrapped, so the
// text can be logged as the call's error.
//
// Queued is set when the time went on this process's own load rather
// than on Redis: the operation expired in the queue, was sent with less
// than half the deadline left, or Redis answered other operations of this
// Store while it was out. Then the error also matches capgate.ErrBusy:
// back-pressure from the gateway's own load (a flood), not a sign that
// Redis failed, and the gate must not open its skip window for it.
type DeadlineError struct {
	Deadline time.Duration
	Queued   bool
}

// Is makes a queued deadline match capgate.ErrBusy.
func (e *DeadlineError) Is(target error) bool {
	return e.Queued && target == capgate.ErrBusy
}

func (e *DeadlineError) Error() string {
	return "no answer from Redis within " + formatSeconds(e.Deadline) + " s"
}

// Timeout reports true, as net.Error timeouts do.
func (e *DeadlineError) Timeout() bool { return true }

// Store is a capgate.LaneStore in Redis. Every method is safe for
// concurrent use and follows the same rules:
//
//   - a caller whose ctx is already done sends nothing and gets the
//     context's error;
//   - at most MaxInFlight operations are sent at once; up to MaxQueued more
//     wait in order for a slot, and an operation that finds the queue full
//     waits for a place in it. One that gets no place within the deadline
//     fails with an error wrapping capgate.ErrBusy (this process's own
//     load, not a failed Redis); one still queued at the deadline, or
//     sent with less than half the deadline left and cut off by it, gets
//     a *DeadlineError with Queued set, which matches capgate.ErrBusy too
//     (a flood of this process's calls, not Redis failing); one whose
//     caller gives up while it waits is never sent;
//   - the caller gets an answer within the deadline: past it, a
//     *DeadlineError. With the client Open makes for a Redis URL, the
//     command runs on the caller's goroutine: that client bounds the dial,
//     the pool and the socket by the operation's context deadline, and
//     Close closes its connections, so nothing waits longer. With a
//     client given to New, or Sentinel or Cluster discovery (which can
//     block past a context deadline), the command runs on its own
//     goroutine, which keeps its slot until the client truly returns, so a
//     hung Redis can fill the slots (then calls wait at most the deadline)
//     but never holds up a caller longer. A caller that gives up while its
//     command is on the wire gets the context's error at once on its own
//     goroutine, or when the command ends (by the deadline) on the
//     caller's;
//   - Acquire, once sent, is awaited to its answer or the deadline even if
//     the caller gives up meanwhile, so that a lease it took is reported
//     (capgate.LaneStore);
//   - other errors are wrapped with the operation ("acquire lanes: ...").
//
// Make one with Open, or New to use a client of your own; the zero value
// is not usable. After Close, every operation fails with ErrClosed.
type Store struct {
	client Client
	closer io.Closer // the client Open made; nil with New
	// direct: commands run on the caller's goroutine, because the client
	// returns by the context's deadline on its own and Close unblocks it
	// (Open's client for a Redis URL).
	direct      bool
	opts        Options // with defaults
	deadlineErr error   // Redis's own: the command was on the wire
	queuedErr   error   // the gateway's own queue took the time

	// answered is when an operation last got Redis's answer (Unix ns):
	// a deadline is Redis's failure only if nothing answered meanwhile.
	answered atomic.Int64

	slots     chan struct{} // one per operation sent
	queue     chan struct{} // one per operation waiting for a slot
	closed    chan struct{}
	closeOnce sync.Once

	instance   string // names this Store's wake channels
	wmu        sync.Mutex
	watchers   map[string]map[string]chan struct{} // channel → token → waiter; requires wmu held
	subscribed map[string]bool                     // channels subscribed to; requires wmu held
	ps         *goredis.PubSub                     // the wake subscription, once a waiter watched; requires wmu held
	dispatched chan struct{}                       // closed when the dispatcher ends

	// testHookQueued, when set, is called as an operation starts to wait
	// for a slot; testHookFull as one starts to wait for a place in the
	// queue.
	testHookQueued func()
	testHookFull   func()
}

var _ capgate.LaneStore = (*Store)(nil)

// Open validates opts and makes the store with a client of its own,
// configured for failing open: socket and connect timeouts of
// opts.Timeout, no retries, context deadlines honoured on the socket, RESP2
// without client identity or maintenance notifications, a pool of
// opts.MaxInFlight connections; the Sentinel connections get the same
// timeouts and the password. Open does not connect: a Redis that is down
// makes operations fail, not Open. It fails only on invalid options.
func Open(opts Options) (*Store, error) {
	o, err := opts.withDefaults()
	if err == nil && o.URL == "" && len(o.Sentinels) == 0 && len(o.Cluster) == 0 {
		err = errors.New("set a Redis URL, Sentinels or a Redis Cluster")
	}
	if err == nil {
		_, err = keyPrefix(o, len(o.Cluster) > 0)
	}
	if err != nil {
		return nil, fmt.Errorf("open Redis lane store: %w", err)
	}
	var (
		c      Client
		closer io.Closer
	)
	switch {
	case len(o.Cluster) > 0:
		c, closer = newClusterClient(o)
	case len(o.Sentinels) > 0:
		fc := goredis.NewFailoverClient(o.failoverOptions())
		c, closer = fc, fc
	default:
		co, err := o.clientOptions()
		if err != nil {
			return nil, fmt.Errorf("open Redis lane store: %w", err)
		}
		sc := goredis.NewClient(co)
		c, closer = sc, sc
	}
	s := newStore(c, o)
	s.closer = closer
	// Only the plain client has no discovery step that ignores the
	// context (Sentinel's master lookup and the cluster's layout load
	// can hang past it, holding a lock).
	s.direct = len(o.Cluster) == 0 && len(o.Sentinels) == 0
	return s, nil
}

// New makes a store that uses client, which stays the caller's: Close does
// not close it. Only the bounds of opts (Deadline, MaxInFlight, MaxQueued)
// apply; the address and timeouts are the client's, and so are its retries:
// a *goredis.ClusterClient of the caller's resends on network errors and
// reloads its layout only on redirects, unlike the one Open makes. It fails only on
// invalid options.
func New(client Client, opts Options) (*Store, error) {
	o, err := opts.withDefaults()
	if err == nil {
		_, cluster := client.(clusterScanner)
		_, err = keyPrefix(o, cluster)
	}
	if err != nil {
		return nil, fmt.Errorf("new Redis lane store: %w", err)
	}
	return newStore(client, o), nil
}

func newStore(c Client, o Options) *Store {
	return &Store{
		client:      c,
		opts:        o,
		deadlineErr: &DeadlineError{Deadline: o.Deadline},
		queuedErr:   &DeadlineError{Deadline: o.Deadline, Queued: true},
		slots:       make(chan struct{}, o.MaxInFlight),
		queue:       make(chan struct{}, o.MaxQueued),
		closed:      make(chan struct{}),
		instance:    newInstanceID(),
	}
}

// String describes the store's Redis for logs, password masked.
func (s *Store) String() string { return s.opts.String() }

// Caps implements capgate.LaneStore: the store is a waitlist, keeps
// idempotency entries and adaptive state, bounds each operation by
// Options.Deadline (with its default; the gate times its own waits on the
// store by it), says which Redis it is on (kind) and lays out its own
// keys (KeyPrefix).
func (s *Store) Caps() capgate.StoreCaps {
	return capgate.StoreCaps{Waitlist: s, Idempotency: s, Adaptive: s,
		Deadline: s.opts.Deadline, Bounded: true, Kind: s.kind(), KeyPrefix: s.KeyPrefix()}
}

// kind says where the lanes live, for status: "redis", "redis-sentinel"
// or "redis-cluster".
func (s *Store) kind() string {
	switch {
	case len(s.opts.Sentinels) > 0:
		return "redis-sentinel"
	case len(s.opts.Cluster) > 0:
		return "redis-cluster"
	}
	return "redis"
}

// closeGrace is how long Close waits for the client to close.
const closeGrace = 100 * time.Millisecond

// Close makes every later operation fail with ErrClosed, returns the
// callers that are waiting at once, and closes the client if Open made it.
// It never waits on a hung call: go-redis's own Close waits for a hung
// dial or Sentinel discovery, so Close gives it closeGrace (100ms) and then
// leaves it to finish in the background, returning nil. Otherwise it
// returns the client's error.
func (s *Store) Close() error {
	var err error
	s.closeOnce.Do(func() {
		close(s.closed) // from now on no operation starts
		s.closeWake()
		if s.closer == nil {
			return
		}
		done := make(chan error, 1)
		go func() { done <- s.closer.Close() }()
		timer := time.NewTimer(closeGrace)
		defer timer.Stop()
		select {
		case err = <-done:
		case <-timer.C:
		}
	})
	if err != nil {
		return fmt.Errorf("close Redis lane store: %w", err)
	}
	return nil
}

// errExpired tells run that the deadline passed while queued.
var errExpired = errors.New("deadline passed in the queue")

// enter takes a slot for one operation, waiting for a place in the queue
// and then in the queue, until ctx is done, the deadline's timer
// (expired) fires or the store closes. Expiry before a place in the queue
// is ErrBusy; in the queue, errExpired. expired is called only when a wait
// begins, so an operation that finds a free slot makes no timer.
func (s *Store) enter(ctx context.Context, expired func() <-chan time.Time) error {
	select {
	case <-s.closed:
		return ErrClosed
	default:
	}
	select {
	case s.slots <- struct{}{}:
		return nil
	default:
	}
	if cap(s.queue) == 0 {
		return capgate.ErrBusy // no queue: shed at once
	}
	select {
	case s.queue <- struct{}{}:
	default:
		// A full queue is back-pressure from this process's own load, not
		// a sign that Redis failed: wait for a place, as long as the
		// deadline and the caller allow. Only a wait that outlasts the
		// deadline gives up, with ErrBusy.
		if s.testHookFull != nil {
			s.testHookFull()
		}
		select {
		case s.queue <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		case <-expired():
			return capgate.ErrBusy
		case <-s.closed:
			return ErrClosed
		}
	}
	defer func() { <-s.queue }()
	if s.testHookQueued != nil {
		s.testHookQueued()
	}
	select {
	case s.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-expired():
		return errExpired
	case <-s.closed:
		return ErrClosed
	}
}

// leave gives back a slot taken by enter.
func (s *Store) leave() { <-s.slots }

type result[T any] struct {
	v   T
	err error
}

// run runs fn as one operation named op, with the rules of Store: queue
// bound, deadline, a caller that gave up sends nothing. fn runs on its own
// goroutine with a context that carries the deadline; it must not touch
// memory the caller keeps using.
func run[T any](ctx context.Context, s *Store, op string, fn func(context.Context) (T, error)) (T, error) {
	return runOp(ctx, s, op, false, fn)
}

// runToAnswer is run for an operation whose effect the caller must learn
// (an acquire may take a lease): ctx bounds only the wait before it is
// sent; once sent, it runs and is awaited to its answer or the deadline,
// whatever ctx does.
func runToAnswer[T any](ctx context.Context, s *Store, op string, fn func(context.Context) (T, error)) (T, error) {
	return runOp(ctx, s, op, true, fn)
}

func runOp[T any](ctx context.Context, s *Store, op string, toAnswer bool, fn func(context.Context) (T, error)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, fmt.Errorf("%s: %w", op, err)
	}
	deadline := time.Now().Add(s.opts.Deadline)
	// The timer is made only when the operation has to wait for a slot or
	// for its goroutine: a direct operation with a free slot needs none.
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	expiry := func() <-chan time.Time {
		if timer == nil {
			timer = time.NewTimer(time.Until(deadline))
		}
		return timer.C
	}

	if err := s.enter(ctx, expiry); err != nil {
		if err == errExpired {
			return zero, s.queuedErr
		}
		return zero, fmt.Errorf("%s: %w", op, err)
	}
	// The caller may have given up, or the store closed, just as the slot
	// came free: then send nothing.
	if err := ctx.Err(); err != nil {
		s.leave()
		return zero, fmt.Errorf("%s: %w", op, err)
	}
	select {
	case <-s.closed:
		s.leave()
		return zero, fmt.Errorf("%s: %w", op, ErrClosed)
	default:
	}

	sent := time.Now()
	parent, gone := ctx, ctx.Done()
	if toAnswer {
		parent, gone = context.WithoutCancel(ctx), nil
	}
	opCtx, cancel := context.WithDeadline(parent, deadline)
	if s.direct {
		v, err := func() (T, error) {
			defer s.leave() // even if fn panics: a slot lost would be for good
			defer cancel()
			return fn(opCtx)
		}()
		return answer(ctx, s, op, toAnswer, deadline, sent, v, err)
	}
	done := make(chan result[T], 1)
	go func() {
		defer s.leave()
		defer cancel()
		v, err := fn(opCtx)
		done <- result[T]{v, err}
	}()

	select {
	case r := <-done:
		return answer(ctx, s, op, toAnswer, deadline, sent, r.v, r.err)
	case <-expiry():
		return zero, s.timedOut(sent, deadline)
	case <-gone:
		return zero, fmt.Errorf("%s: %w", op, ctx.Err())
	case <-s.closed:
		return zero, fmt.Errorf("%s: %w", op, ErrClosed)
	}
}

// answer turns the result of an operation that ran into what its caller
// gets: the value, the context's error of a caller that gave up (unless
// toAnswer), ErrClosed when Close cut the command off, the
// *DeadlineError when the client gave up at the deadline (see timedOut),
// else the error wrapped with op. Any answer from Redis, an error reply
// included, is noted as one.
func answer[T any](ctx context.Context, s *Store, op string, toAnswer bool, deadline, sent time.Time, v T, err error) (T, error) {
	var zero T
	if err == nil || isRedisReply(err) {
		s.answered.Store(time.Now().UnixNano())
	}
	if err == nil {
		return v, nil
	}
	if !toAnswer && ctx.Err() != nil {
		return zero, fmt.Errorf("%s: %w", op, ctx.Err())
	}
	select {
	case <-s.closed:
		return zero, fmt.Errorf("%s: %w", op, ErrClosed)
	default:
	}
	if !time.Now().Before(deadline) {
		return zero, s.timedOut(sent, deadline) // the client gave up at our deadline
	}
	return zero, fmt.Errorf("%s: %w", op, err)
}

// timedOut is the error of an operation sent at sent that its deadline
// cut off on the wire: Redis's own failure, unless the time went on this
// process's load: it was sent with less than half its deadline left (the
// queue took the time), or Redis answered other operations meanwhile.
func (s *Store) timedOut(sent, deadline time.Time) error {
	if deadline.Sub(sent) < s.opts.Deadline/2 || s.answered.Load() > sent.UnixNano() {
		return s.queuedErr
	}
	return s.deadlineErr
}

// isRedisReply reports whether err is an error reply from Redis (a script
// error, say): Redis answered.
func isRedisReply(err error) bool {
	var re goredis.Error
	return errors.As(err, &re) && !errors.Is(err, context.DeadlineExceeded)
}
