package logsink_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capgate/capgate/logsink"
)

// patience bounds waits that should end at once, generously, so that a
// loaded machine doesn't fail the tests.
const patience = 10 * time.Second

// syncBuffer is a bytes.Buffer safe for the writer goroutine and the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// gateWriter blocks every Write until the test opens it. entered receives
// when a Write has started (if nobody is listening, the signal is dropped).
type gateWriter struct {
	syncBuffer
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func newGateWriter() *gateWriter {
	return &gateWriter{entered: make(chan struct{}, 1), release: make(chan struct{})}
}

func (w *gateWriter) Write(p []byte) (int, error) {
	select {
	case w.entered <- struct{}{}:
	default:
	}
	<-w.release
	return w.syncBuffer.Write(p)
}

// open lets every Write through, now and later.
func (w *gateWriter) open() { w.once.Do(func() { close(w.release) }) }

// waitEntered waits until a Write has started.
func (w *gateWriter) waitEntered(tb testing.TB) {
	tb.Helper()
	select {
	case <-w.entered:
	case <-time.After(patience):
		tb.Fatal("the writer never started a Write")
	}
}

// mustNew returns a sink writing to w, closed (after w is opened, if it is a
// gateWriter) when the test ends.
func mustNew(tb testing.TB, w io.Writer, opts ...logsink.Option) *logsink.Sink {
	tb.Helper()
	s := logsink.New(w, opts...)
	tb.Cleanup(func() {
		if g, ok := w.(*gateWriter); ok {
			g.open()
		}
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	return s
}

// returnsAtOnce runs f in a goroutine and fails if it doesn't return within
// patience: Emit must never block.
func returnsAtOnce(tb testing.TB, f func()) {
	tb.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(patience):
		tb.Fatal("Emit blocked")
	}
}

// loggedDrops parses output (one JSON object a line) and returns the
// number of lines and the sum of their log_dropped.
func loggedDrops(tb testing.TB, output string) (lines int, drops uint64) {
	tb.Helper()
	sc := bufio.NewScanner(strings.NewReader(output))
	for sc.Scan() {
		var v struct {
			LogDropped uint64 `json:"log_dropped"`
		}
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			tb.Fatalf("line %q: %v", sc.Text(), err)
		}
		lines++
		drops += v.LogDropped
	}
	return lines, drops
}

func TestEmit_WritesTheLineAsGiven(t *testing.T) {
	var out syncBuffer
	s := mustNew(t, &out)
	line := `{"event":"ocl_capacity","decision":"admitted"}`
	if err := s.Emit([]byte(line)); err != nil {
		t.Fatalf("Emit: %v", err)
	}
	if !s.Drain(2 * time.Second) {
		t.Fatal("Drain(2s) = false, want true")
	}
	if got, want := out.String(), line+"\n"; got != want {
		t.Errorf("output = %q, want %q", got, want)
	}
	if got := s.Written(); got != 1 {
		t.Errorf("Written() = %d, want 1", got)
	}
}

func TestEmit_KeepsOrderAndDoesNotKeepTheLine(t *testing.T) {
	var out syncBuffer
	s := mustNew(t, &out)
	buf := []byte(`{"n":0}`)
	var want strings.Builder
	for i := range 10 {
		buf[5] = byte('0' + i)
		if err := s.Emit(buf); err != nil {
			t.Fatalf("Emit: %v", err)
		}
		want.WriteString(string(buf) + "\n")
	}
	if !s.Drain(patience) {
		t.Fatal("Drain = false, want true")
	}
	if got := out.String(); got != want.String() {
		t.Errorf("output = %q, want %q", got, want.String())
	}
}

func TestEmit_BlockedWriterNeverBlocksEmit(t *testing.T) {
	w := newGateWriter()
	s := mustNew(t, w, logsink.WithQueueSize(2))

	// The first line is taken off the queue and its Write blocks; two
	// more fill the queue, and the other seven are dropped.
	returnsAtOnce(t, func() {
		if err := s.Emit([]byte(`{"i":0}`)); err != nil {
			t.Errorf("Emit 0: %v", err)
		}
	})
	w.waitEntered(t)
	var full int
	returnsAtOnce(t, func() {
		for range 9 {
			if err := s.Emit([]byte(`{"i":1}`)); errors.Is(err, logsink.ErrFull) {
				full++
			} else if err != nil {
				t.Errorf("Emit: %v", err)
			}
		}
	})
	if got := s.Dropped(); got != 7 || full != 7 {
		t.Fatalf("Dropped() = %d, ErrFull %d times; want 7 and 7", got, full)
	}
	if got := s.Pending(); got != 3 {
		t.Errorf("Pending() = %d, want 3 (2 queued, 1 being written)", got)
	}
	if s.Drain(100 * time.Millisecond) {
		t.Fatal("Drain(100ms) = true while the writer is blocked, want false")
	}

	w.open()
	if !s.Drain(2 * time.Second) {
		t.Fatal("Drain(2s) = false after unblocking, want true")
	}
	if err := s.Emit([]byte(`{"i":2}`)); err != nil {
		t.Fatalf("Emit after unblocking: %v", err)
	}
	if !s.Drain(patience) {
		t.Fatal("Drain = false, want true")
	}
	lines := strings.Split(strings.TrimSuffix(w.String(), "\n"), "\n")
	if got, want := lines[len(lines)-1], `{"i":2,"log_dropped":7}`; got != want {
		t.Errorf("last line = %q, want %q", got, want)
	}
	if got := s.Unreported(); got != 0 {
		t.Errorf("Unreported() = %d, want 0", got)
	}
	if got := s.Dropped(); got != 7 {
		t.Errorf("Dropped() = %d after reporting, want 7 (cumulative)", got)
	}
	if got := s.Written(); got != 4 {
		t.Errorf("Written() = %d, want 4", got)
	}
}

func TestDrain_WaitsForTheLineBeingWritten(t *testing.T) {
	w := newGateWriter()
	s := mustNew(t, w)
	if err := s.Emit([]byte(`{"n":1}`)); err != nil {
		t.Fatalf("Emit: %v", err)
	}
	w.waitEntered(t) // the line is off the queue, blocked in Write

	if s.Drain(50 * time.Millisecond) {
		t.Fatal("Drain = true while the line is being written, want false")
	}
	drained := make(chan bool, 1)
	go func() { drained <- s.Drain(patience) }()
	select {
	case ok := <-drained:
		t.Fatalf("Drain returned %v before the write finished", ok)
	default:
	}
	w.open()
	select {
	case ok := <-drained:
		if !ok {
			t.Fatal("Drain = false, want true")
		}
	case <-time.After(2 * patience):
		t.Fatal("Drain never returned")
	}
	// Drain returned true only after Write returned.
	if got, want := w.String(), "{\"n\":1}\n"; got != want {
		t.Errorf("output when Drain returned = %q, want %q", got, want)
	}
}

func TestEmit_ConcurrentEmittersKeepTheDropCountExact(t *testing.T) {
	const goroutines, each = 4, 50
	w := newGateWriter()
	s := mustNew(t, w, logsink.WithQueueSize(1))

	var wg sync.WaitGroup
	returnsAtOnce(t, func() {
		for range goroutines {
			wg.Go(func() {
				for range each {
					_ = s.Emit([]byte(`{"event":"ocl_capacity"}`))
				}
			})
		}
		wg.Wait()
	})
	w.open()
	if !s.Drain(patience) {
		t.Fatal("Drain = false, want true")
	}
	lines, drops := loggedDrops(t, w.String())
	rest := s.Unreported()
	if got := uint64(lines) + drops + rest; got != goroutines*each {
		t.Errorf("lines %d + log_dropped %d + unreported %d = %d, want %d",
			lines, drops, rest, got, goroutines*each)
	}
	if got, want := s.Dropped(), drops+rest; got != want {
		t.Errorf("Dropped() = %d, want %d (reported %d + unreported %d)", got, want, drops, rest)
	}
	if got := s.Written(); got != uint64(lines) {
		t.Errorf("Written() = %d, want %d", got, lines)
	}
}

func TestEmit_LinesThatAreNotObjectsAreRejected(t *testing.T) {
	var out syncBuffer
	s := mustNew(t, &out)
	for _, line := range []string{"", "{", "}", "not json", `["a"]`, `{"n":1}` + "\n", ` {"n":1}`} {
		if err := s.Emit([]byte(line)); !errors.Is(err, logsink.ErrNotObject) {
			t.Errorf("Emit(%q) = %v, want ErrNotObject", line, err)
		}
	}
	if !s.Drain(patience) {
		t.Fatal("Drain = false, want true")
	}
	if got := out.String(); got != "" {
		t.Errorf("output = %q, want nothing", got)
	}
	if got := s.Dropped(); got != 0 {
		t.Errorf("Dropped() = %d, want 0: a rejected line is not a drop", got)
	}
}

func TestEmit_DropCountOnAnEmptyObject(t *testing.T) {
	w := newGateWriter()
	s := mustNew(t, w, logsink.WithQueueSize(1))
	_ = s.Emit([]byte(`{"a":1}`))
	w.waitEntered(t)
	_ = s.Emit([]byte(`{"b":2}`)) // queued
	if err := s.Emit([]byte(`{"c":3}`)); !errors.Is(err, logsink.ErrFull) {
		t.Fatalf("Emit into a full queue = %v, want ErrFull", err)
	}
	w.open()
	if !s.Drain(patience) {
		t.Fatal("Drain = false, want true")
	}
	if err := s.Emit([]byte(`{}`)); err != nil {
		t.Fatalf("Emit: %v", err)
	}
	if !s.Drain(patience) {
		t.Fatal("Drain = false, want true")
	}
	want := "{\"a\":1}\n{\"b\":2}\n{\"log_dropped\":1}\n"
	if got := w.String(); got != want {
		t.Errorf("output = %q, want %q", got, want)
	}
}

func TestClose_GivesUpOnABlockedWrite(t *testing.T) {
	w := newGateWriter()
	s := mustNew(t, w)
	if err := s.Emit([]byte(`{"n":1}`)); err != nil {
		t.Fatalf("Emit: %v", err)
	}
	w.waitEntered(t)
	_ = s.Emit([]byte(`{"n":2}`))

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	var err error
	returnsAtOnce(t, func() { err = s.Close(ctx) })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close with a blocked writer = %v, want DeadlineExceeded", err)
	}
	if err := s.Emit([]byte(`{"n":3}`)); !errors.Is(err, logsink.ErrClosed) {
		t.Errorf("Emit after Close = %v, want ErrClosed", err)
	}
	if got := s.Dropped(); got != 0 {
		t.Errorf("Dropped() = %d, want 0: a line refused after Close is not a drop", got)
	}

	// Once the blocked Write returns, the writer goroutine throws the
	// queued line away and returns, and a second Close succeeds.
	w.open()
	ctx, cancel = context.WithTimeout(context.Background(), patience)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Errorf("Close after the Write returned: %v", err)
	}
	if got, want := w.String(), "{\"n\":1}\n"; got != want {
		t.Errorf("output = %q, want %q (the queued line abandoned)", got, want)
	}
	if got := s.Pending(); got != 0 {
		t.Errorf("Pending() = %d, want 0", got)
	}
}

func TestClose_WritesWhatIsQueued(t *testing.T) {
	var out syncBuffer
	s := logsink.New(&out)
	for range 3 {
		if err := s.Emit([]byte(`{"n":1}`)); err != nil {
			t.Fatalf("Emit: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got, want := out.String(), strings.Repeat("{\"n\":1}\n", 3); got != want {
		t.Errorf("output = %q, want %q", got, want)
	}
	if err := s.Close(ctx); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// flakyWriter fails its first Write with an error, panics in its second,
// and writes the rest.
type flakyWriter struct {
	syncBuffer
	calls int // only the writer goroutine touches it
}

func (w *flakyWriter) Write(p []byte) (int, error) {
	w.calls++
	switch w.calls {
	case 1:
		return 0, errors.New("disk full")
	case 2:
		panic("broken writer")
	}
	return w.syncBuffer.Write(p)
}

func TestWrite_ErrorsAreCountedAndSwallowed(t *testing.T) {
	w := &flakyWriter{}
	s := mustNew(t, w)
	for i := range 3 {
		if err := s.Emit([]byte(`{"n":1}`)); err != nil {
			t.Fatalf("Emit %d: %v", i, err)
		}
	}
	if !s.Drain(patience) {
		t.Fatal("Drain = false, want true")
	}
	if got := s.WriteErrors(); got != 2 {
		t.Errorf("WriteErrors() = %d, want 2", got)
	}
	if got := s.Written(); got != 1 {
		t.Errorf("Written() = %d, want 1", got)
	}
	if got, want := w.String(), "{\"n\":1}\n"; got != want {
		t.Errorf("output = %q, want %q", got, want)
	}
}

// benchLine is a typical request line.
var benchLine = []byte(`{"event":"ocl_capacity","decision":"admitted","mode":"enforce","enforced":true,` +
	`"endpoint":"match","semantic":true,"rows":12,"tier":"standard","user_id":"42",` +
	`"in_flight":3,"limit":8,"held_ms":1234,"cid":"0123456789abcdef","ts":"2026-01-02T03:04:05.678Z"}`)

// BenchmarkEmit measures Emit into a sink writing to io.Discard. In
// "discard" the loop outruns the writer, so most emits take the drop path
// (see drops/op); "sustained" drains every half queue, inside the timing,
// so ns/op is the cost of a line emitted and written.
func BenchmarkEmit(b *testing.B) {
	b.Run("discard", func(b *testing.B) {
		s := logsink.New(io.Discard)
		b.ReportAllocs()
		b.SetBytes(int64(len(benchLine)))
		for b.Loop() {
			_ = s.Emit(benchLine)
		}
		b.StopTimer()
		b.ReportMetric(float64(s.Dropped())/float64(b.N), "drops/op")
		if err := s.Close(context.Background()); err != nil {
			b.Fatal(err)
		}
	})
	b.Run("sustained", func(b *testing.B) {
		s := logsink.New(io.Discard)
		b.ReportAllocs()
		b.SetBytes(int64(len(benchLine)))
		n := 0
		for b.Loop() {
			_ = s.Emit(benchLine)
			if n++; n == logsink.DefaultQueueSize/2 {
				n = 0
				s.Drain(patience)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(s.Dropped())/float64(b.N), "drops/op")
		if err := s.Close(context.Background()); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkEmitParallel measures concurrent emitters, as in the gateway.
func BenchmarkEmitParallel(b *testing.B) {
	s := logsink.New(io.Discard)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_ = s.Emit(benchLine)
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(s.Dropped())/float64(b.N), "drops/op")
	if err := s.Close(context.Background()); err != nil {
		b.Fatal(err)
	}
}
