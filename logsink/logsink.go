// Package logsink writes the gate's JSON log lines
// through a bounded queue and one writer goroutine, so that a slow or blocked
// output never holds up a call.
//
// Create one Sink per process with New, give it to the gate as its
// capgate.Sink, and call Close with DefaultDrainTimeout on the way out:
// Go has no exit hook, so the command that owns the sink must close it
// before it returns from main.
package logsink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/capgate/capgate"
)

// Defaults.
const (
	// DefaultQueueSize is how many lines may wait for the writer.
	DefaultQueueSize = 1000
	// DefaultDrainTimeout is how long the gateway waits at exit for the
	// lines queued or being written.
	DefaultDrainTimeout = 2 * time.Second
)

// Errors returned by Emit. The gate ignores them; they exist for tests and
// for callers that want to know.
var (
	// ErrFull means the queue was full: the line was dropped and counted,
	// and the next line that gets through carries log_dropped.
	ErrFull = errors.New("logsink: queue full, line dropped")
	// ErrClosed means Close was called: the line was not accepted and is
	// not counted as dropped.
	ErrClosed = errors.New("logsink: closed")
	// ErrNotObject means the line does not start with '{' and end with '}':
	// it was rejected, not written and not counted as dropped.
	ErrNotObject = errors.New("logsink: line is not a JSON object")
)

var _ capgate.Sink = (*Sink)(nil)

// dropSuffix is what Emit inserts before the closing brace after drops,
// followed by the count.
const dropSuffix = `"log_dropped":`

// maxPooledLine is the largest line buffer kept for reuse.
const maxPooledLine = 64 << 10

// Sink is a bounded, non-blocking JSON-line writer.
//
// Emit puts a line on a FIFO of WithQueueSize lines (default
// DefaultQueueSize) and returns at once; one writer goroutine writes each
// line followed by "\n" to w with a single Write call, and counts and
// swallows write errors (a panic in Write counts as one). A Write that never
// returns stops the writing but never the callers: lines fill the queue and
// are then dropped. When the queue is full the new line is dropped and
// counted, and the next line that gets through carries
// ,"log_dropped":N (the lines dropped since the previous line that got
// through) before its closing brace.
//
// Drain waits for the lines queued or being written; Close stops taking lines,
// drains, and stops the writer. Dropped, Unreported, Written, WriteErrors and
// Pending report counters for metrics.
//
// A Sink is safe for concurrent use. The zero value is not usable; create
// one with New.
type Sink struct {
	w     io.Writer
	queue chan *[]byte
	stop  chan struct{} // closed by Close once it has drained or given up
	done  chan struct{} // closed when the writer goroutine returns
	pool  sync.Pool     // of *[]byte line buffers

	mu         sync.Mutex
	closed     bool
	unreported uint64          // lines dropped since the last line that got through
	pending    int             // lines queued or being written
	waiters    []chan struct{} // closed when pending reaches 0

	stopOnce    sync.Once
	dropped     atomic.Uint64
	written     atomic.Uint64
	writeErrors atomic.Uint64
}

// Option configures a Sink in New.
type Option func(*Sink)

// WithQueueSize sets how many lines may wait for the writer, not counting
// the one being written. n < 1 means DefaultQueueSize.
func WithQueueSize(n int) Option {
	return func(s *Sink) {
		if n < 1 {
			n = DefaultQueueSize
		}
		s.queue = make(chan *[]byte, n)
	}
}

// New returns a Sink writing to w (usually os.Stdout or the --log-file) and
// starts its writer goroutine; Close stops it. w is written by that one
// goroutine only, and must not keep the slice passed to Write (the
// io.Writer contract), because line buffers are reused.
func New(w io.Writer, opts ...Option) *Sink {
	s := &Sink{
		w:    w,
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	for _, o := range opts {
		o(s)
	}
	if s.queue == nil {
		s.queue = make(chan *[]byte, DefaultQueueSize)
	}
	go s.run()
	return s
}

// Emit queues line, a compact JSON object, for writing and never blocks.
// It does not keep line. It returns nil if the line was queued, ErrFull if
// the queue was full (the line is dropped and counted), ErrClosed after
// Close, and ErrNotObject if line does not start with '{' and end with '}'
// (the line is rejected so that the output stays one JSON object a line;
// the check goes no further than the braces).
func (s *Sink) Emit(line []byte) error {
	if len(line) < 2 || line[0] != '{' || line[len(line)-1] != '}' {
		return ErrNotObject
	}
	// Build the line outside the lock, leaving room for the drop count
	// and the newline.
	bp := s.buffer(len(line) + 1 + len(dropSuffix) + 20 + 2)
	b := append((*bp)[:0], line[:len(line)-1]...)

	// The count D is read and the enqueue decided under one lock, so that
	// every drop is reported exactly once under concurrent emitters.
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.recycle(bp)
		return ErrClosed
	}
	d := s.unreported
	if d > 0 {
		if b[len(b)-1] != '{' {
			b = append(b, ',')
		}
		b = append(b, dropSuffix...)
		b = strconv.AppendUint(b, d, 10)
	}
	b = append(b, '}', '\n')
	*bp = b
	select {
	case s.queue <- bp:
		s.unreported -= d
		s.pending++
		s.mu.Unlock()
		return nil
	default:
		s.unreported++
		s.dropped.Add(1)
		s.mu.Unlock()
		s.recycle(bp)
		return ErrFull
	}
}

// Drain waits until every line queued or being written has been written
// (or has failed to write), for timeout at most. It reports whether all were
// written; false means it gave up at its deadline. Emit may go on meanwhile;
// Drain waits for those lines too.
func (s *Sink) Drain(timeout time.Duration) bool {
	expired := make(chan struct{})
	t := time.AfterFunc(timeout, func() { close(expired) })
	defer t.Stop()
	return s.wait(expired)
}

// Close stops taking lines (Emit returns ErrClosed), waits until the lines
// queued or being written have been written, and stops the writer goroutine.
// ctx bounds the wait; the gateway passes a context with
// DefaultDrainTimeout.
//
// If ctx ends first, Close returns at once with an error wrapping
// ctx.Err() that says how many lines were not written, and a Write that is
// blocked is not waited for. When that Write returns, the writer goroutine
// throws away the lines still queued (they are not counted as dropped) and
// returns; if the Write blocks forever, so does the goroutine: it is the one
// goroutine the Sink cannot stop, and process exit ends it. Close may be
// called more than once; a later call waits for that goroutine again.
func (s *Sink) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()

	ok := s.wait(ctx.Done())
	s.stopOnce.Do(func() { close(s.stop) })
	if !ok {
		return fmt.Errorf("logsink: close: %d lines not written: %w", s.Pending(), ctx.Err())
	}
	// Nothing is queued or being written, and nothing can be queued, so
	// the writer is waiting in its select and sees stop at once.
	<-s.done
	return nil
}

// Dropped returns how many lines were dropped because the queue was full,
// since New. It only grows.
func (s *Sink) Dropped() uint64 { return s.dropped.Load() }

// Unreported returns how many dropped lines no written line has reported
// yet in its log_dropped; it goes back to 0 when a line gets through.
func (s *Sink) Unreported() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.unreported
}

// Written returns how many lines were written without error.
func (s *Sink) Written() uint64 { return s.written.Load() }

// WriteErrors returns how many lines failed to write (error or panic in
// Write); those lines are lost.
func (s *Sink) WriteErrors() uint64 { return s.writeErrors.Load() }

// Pending returns how many lines are queued or being written.
func (s *Sink) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending
}

// wait waits until pending is 0 or deadline is closed, and reports whether
// pending reached 0.
func (s *Sink) wait(deadline <-chan struct{}) bool {
	s.mu.Lock()
	if s.pending == 0 {
		s.mu.Unlock()
		return true
	}
	ch := make(chan struct{})
	s.waiters = append(s.waiters, ch)
	s.mu.Unlock()

	select {
	case <-ch:
		return true
	case <-deadline:
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, c := range s.waiters {
		if c == ch {
			s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
			return false
		}
	}
	// The writer closed ch and removed it between the deadline and the lock.
	return true
}

// run is the writer goroutine: it writes lines in order until stop.
func (s *Sink) run() {
	defer close(s.done)
	for {
		select {
		case <-s.stop:
			s.discard()
			return
		case bp := <-s.queue:
			select {
			case <-s.stop: // Close gave up while a Write was blocked.
				s.finish(bp)
				s.discard()
				return
			default:
			}
			s.write(bp)
		}
	}
}

// write writes one line and counts the outcome.
func (s *Sink) write(bp *[]byte) {
	defer func() {
		if recover() != nil {
			s.writeErrors.Add(1)
		}
		s.finish(bp)
	}()
	if _, err := s.w.Write(*bp); err != nil {
		s.writeErrors.Add(1)
		return
	}
	s.written.Add(1)
}

// discard throws away the lines left in the queue after Close gave up.
// Emit takes no more lines by then, so the queue ends empty.
func (s *Sink) discard() {
	for {
		select {
		case bp := <-s.queue:
			s.finish(bp)
		default:
			return
		}
	}
}

// finish ends one line's time in the sink, written or not, and wakes the
// waiters when nothing is left.
func (s *Sink) finish(bp *[]byte) {
	s.recycle(bp)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending--
	if s.pending == 0 {
		for _, c := range s.waiters {
			close(c)
		}
		s.waiters = nil
	}
}

// buffer returns a line buffer with capacity n or more.
func (s *Sink) buffer(n int) *[]byte {
	if bp, ok := s.pool.Get().(*[]byte); ok && cap(*bp) >= n {
		return bp
	}
	b := make([]byte, 0, n)
	return &b
}

// recycle gives a line buffer back for reuse, unless it is large.
func (s *Sink) recycle(bp *[]byte) {
	if cap(*bp) <= maxPooledLine {
		s.pool.Put(bp)
	}
}
