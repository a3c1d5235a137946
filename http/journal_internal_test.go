package http

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// journalWrite is one JournalWrite a fakeJournal received.
type journalWrite struct {
	name   string
	add    map[string][]string
	remove []string
	ttl    time.Duration
}

// fakeJournal records the writes it gets. Each write first waits on gate,
// if set, and fails while fail > 0 (counting it down).
type fakeJournal struct {
	mu     sync.Mutex
	writes []journalWrite
	fail   int
	gate   chan struct{}
}

var _ Journal = (*fakeJournal)(nil)

func (f *fakeJournal) JournalWrite(ctx context.Context, name string, add map[string][]string, remove []string, ttl time.Duration) error {
	if f.gate != nil {
		<-f.gate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail > 0 {
		f.fail--
		return errors.New("store down")
	}
	slices.Sort(remove)
	f.writes = append(f.writes, journalWrite{name, maps.Clone(add), remove, ttl})
	return nil
}

func (f *fakeJournal) JournalRead(context.Context, string) (map[string][]string, error) {
	return nil, nil
}

// taken returns the writes so far and forgets them.
func (f *fakeJournal) taken() []journalWrite {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.writes
	f.writes = nil
	return w
}

// warnings is a slog.Handler that keeps each warning's message and its
// "dropped" count.
type warnings struct {
	mu   sync.Mutex
	msgs []string
	drop []int64
}

func (h *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h *warnings) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h *warnings) WithGroup(string) slog.Handler                { return h }
func (h *warnings) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.msgs = append(h.msgs, r.Message)
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "dropped" {
			h.drop = append(h.drop, a.Value.Int64())
		}
		return true
	})
	return nil
}

func (h *warnings) dropped() []int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.drop)
}

func (h *warnings) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.msgs)
}

func newTestJournal(f *fakeJournal, h *warnings) *journal {
	j := newJournal(f, slog.New(h))
	j.start("gateway:task-1:127.0.0.1:8080")
	return j
}

var keysA = []string{"ocl:capacity:api_heavy", "ocl:capacity:user:ada"}

// A gated call only queues: nothing is written until journalEvery after
// the first entry, then everything queued in one write; a record and its
// removal queued before a write cancel out (a short call is never
// written); a removal of a record written is written in the next batch.
func TestJournalBatchesAndCoalesces(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, h := &fakeJournal{}, &warnings{}
		j := newTestJournal(f, h)
		j.add("a", keysA, time.Minute)
		j.add("b", keysA, 3*time.Minute)
		j.add("c", keysA[:1], 2*time.Minute)
		j.remove("b") // b's call ended before the write
		synctest.Wait()
		if w := f.taken(); len(w) != 0 {
			t.Fatalf("written on the calls' path: %+v", w)
		}
		time.Sleep(journalEvery)
		synctest.Wait()
		w := f.taken()
		want := map[string][]string{"a": keysA, "c": keysA[:1]}
		if len(w) != 1 || !maps.EqualFunc(w[0].add, want, slices.Equal) || len(w[0].remove) != 0 ||
			w[0].name != "gateway:task-1:127.0.0.1:8080" {
			t.Fatalf("writes %+v, want one adding a and c", w)
		}
		if w[0].ttl != 3*time.Minute {
			t.Errorf("ttl %v, want the longest queued (3m, b's, though b is gone)", w[0].ttl)
		}
		// A short call, start to end within one interval: nothing to write.
		j.add("d", keysA, time.Minute)
		j.remove("d")
		time.Sleep(10 * journalEvery)
		synctest.Wait()
		if w := f.taken(); len(w) != 0 {
			t.Fatalf("a call shorter than the interval was written: %+v", w)
		}
		// a and c end: their removals go in one write.
		j.remove("a")
		j.remove("c")
		j.add("e", keysA, time.Minute)
		time.Sleep(journalEvery)
		synctest.Wait()
		w = f.taken()
		if len(w) != 1 || !slices.Equal(w[0].remove, []string{"a", "c"}) || len(w[0].add) != 1 || w[0].add["e"] == nil {
			t.Fatalf("writes %+v, want one removing a and c, adding e", w)
		}
		if err := j.close(t.Context()); err != nil {
			t.Fatal(err)
		}
		if h.count() != 0 {
			t.Errorf("warnings %v", h.msgs)
		}
	})
}

// Before Recover names the journal nothing is queued; after close nothing
// more is, and close writes what was.
func TestJournalStartAndClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, h := &fakeJournal{}, &warnings{}
		j := newJournal(f, slog.New(h))
		j.add("early", keysA, time.Minute)
		time.Sleep(journalEvery)
		synctest.Wait()
		if w := f.taken(); len(w) != 0 {
			t.Fatalf("written before the journal was named: %+v", w)
		}
		j.start("gateway:task-1:a")
		if j.start("gateway:task-1:b") {
			t.Fatal("named twice")
		}
		j.add("a", keysA, time.Minute)
		j.add("b", keysA, time.Minute)
		time.Sleep(journalEvery)
		synctest.Wait()
		f.taken()
		j.remove("a") // released just before the shutdown: close writes it
		if err := j.close(t.Context()); err != nil {
			t.Fatal(err)
		}
		w := f.taken()
		if len(w) != 1 || !slices.Equal(w[0].remove, []string{"a"}) {
			t.Fatalf("close wrote %+v, want the removal of a", w)
		}
		j.remove("b") // after close: left for the next incarnation
		j.add("c", keysA, time.Minute)
		time.Sleep(journalEvery)
		synctest.Wait()
		if w := f.taken(); len(w) != 0 {
			t.Fatalf("written after close: %+v", w)
		}
	})
}

// The queue holds at most max entries: past it a new one is dropped, and
// a warning logged at once, then at most once a minute with the count
// since the last; a removal that cancels a queued record always goes
// through.
func TestJournalQueueBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, h := &fakeJournal{}, &warnings{}
		j := newTestJournal(f, h)
		j.max = 3
		for _, tok := range []string{"a", "b", "c", "d", "e"} {
			j.add(tok, keysA, time.Minute)
		}
		if got := h.dropped(); !slices.Equal(got, []int64{1}) {
			t.Fatalf("drop warnings %v, want one at the first drop", got)
		}
		j.remove("c") // cancels c's record: room for one more
		j.add("f", keysA, time.Minute)
		time.Sleep(journalEvery)
		synctest.Wait()
		w := f.taken()
		if len(w) != 1 || !slices.Equal(slices.Sorted(maps.Keys(w[0].add)), []string{"a", "b", "f"}) {
			t.Fatalf("writes %+v, want a, b and f (d and e dropped)", w)
		}
		for _, tok := range []string{"g", "h", "i", "k"} {
			j.add(tok, keysA, time.Minute)
		}
		if got := h.dropped(); len(got) != 1 {
			t.Fatalf("drop warnings %v, want no second one within the minute", got)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		f.taken()
		for _, tok := range []string{"l", "m", "n", "o"} {
			j.add(tok, keysA, time.Minute)
		}
		if got := h.dropped(); !slices.Equal(got, []int64{1, 3}) {
			t.Fatalf("drop warnings %v, want a second one a minute later, counting the 3 since (e, k, o)", got)
		}
		if err := j.close(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

// A write that fails is put back and tried again journalRetry later; a
// removal queued while the failed write ran is kept (the record it removes
// may have been written), its record is not put back.
func TestJournalFailedWriteIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, h := &fakeJournal{fail: 1, gate: make(chan struct{})}, &warnings{}
		j := newTestJournal(f, h)
		j.add("a", keysA, time.Minute)
		j.add("b", keysA, time.Minute)
		time.Sleep(journalEvery)
		synctest.Wait() // the write waits on the gate
		j.remove("a")   // a's call ends while its record is being written
		f.gate <- struct{}{}
		synctest.Wait() // it failed
		if h.count() != 1 {
			t.Fatalf("warnings %v, want one for the failed write", h.msgs)
		}
		close(f.gate)
		time.Sleep(journalEvery)
		synctest.Wait()
		if w := f.taken(); len(w) != 0 {
			t.Fatalf("retried before journalRetry: %+v", w)
		}
		time.Sleep(journalRetry)
		synctest.Wait()
		w := f.taken()
		if len(w) != 1 || !slices.Equal(w[0].remove, []string{"a"}) || len(w[0].add) != 1 || w[0].add["b"] == nil {
			t.Fatalf("writes %+v, want one adding b and removing a", w)
		}
		if err := j.close(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

// BenchmarkJournalAddRemove is what the journal adds to a gated call's
// path: its record queued after the admission, its removal after the
// release (writes in the background every journalEvery, to a store that
// answers at once).
func BenchmarkJournalAddRemove(b *testing.B) {
	j := newTestJournal(&fakeJournal{}, &warnings{})
	b.Cleanup(func() { _ = j.close(context.Background()) })
	var n atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		// Tokens made up front: a call's comes with its admission.
		prefix := strconv.FormatInt(n.Add(1), 10) + "-"
		tokens := make([]string, 1024)
		for i := range tokens {
			tokens[i] = prefix + strconv.Itoa(i)
		}
		for i := 0; pb.Next(); i++ {
			token := tokens[i%len(tokens)]
			j.add(token, keysA, time.Minute)
			j.remove(token)
		}
	})
}
