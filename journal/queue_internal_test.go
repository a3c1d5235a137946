package journal

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

// write is one JournalWrite a fakeStore received.
type write struct {
	group, self string
	add         map[string][]string
	remove      []string
	ttl         time.Duration
}

// fakeStore records the writes it gets (the queue's tests need nothing
// else of a store: the roster is empty). Each write first waits on gate,
// if set, and fails while fail > 0 (counting it down).
type fakeStore struct {
	mu     sync.Mutex
	writes []write
	fail   int
	gate   chan struct{}
}

var _ Store = (*fakeStore)(nil)

func (f *fakeStore) JournalWrite(_ context.Context, group, self string, add map[string][]string, remove []string, ttl time.Duration) error {
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
	f.writes = append(f.writes, write{group, self, maps.Clone(add), remove, ttl})
	return nil
}

func (f *fakeStore) JournalRenew(context.Context, string, string, time.Duration, time.Duration) (map[string]time.Duration, error) {
	return nil, nil
}

func (f *fakeStore) JournalRead(context.Context, string, string) (map[string][]string, bool, error) {
	return nil, false, nil
}

func (f *fakeStore) JournalForget(context.Context, string, string, []string) error { return nil }

func (f *fakeStore) JournalLeave(context.Context, string, string) error { return nil }

// taken returns the writes so far and forgets them.
func (f *fakeStore) taken() []write {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.writes
	f.writes = nil
	return w
}

// logs is a slog.Handler that keeps each record's message and its
// attributes.
type logs struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *logs) Enabled(context.Context, slog.Level) bool { return true }
func (h *logs) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logs) WithGroup(string) slog.Handler            { return h }
func (h *logs) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}

// warnings returns the messages logged at warn or above.
func (h *logs) warnings() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.recs {
		if r.Level >= slog.LevelWarn {
			out = append(out, r.Message)
		}
	}
	return out
}

// ints returns the values of attribute key of the records whose message
// starts with prefix.
func (h *logs) ints(prefix, key string) []int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []int64
	for _, r := range h.recs {
		if len(r.Message) < len(prefix) || r.Message[:len(prefix)] != prefix {
			continue
		}
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == key {
				out = append(out, a.Value.Int64())
			}
			return true
		})
	}
	return out
}

const testGroup = "gateway:task-1:127.0.0.1:8080"

func openTest(t testing.TB, s Store, h *logs) *Journal {
	t.Helper()
	j, err := Open(context.Background(), Options{Store: s, Group: testGroup, Logger: slog.New(h),
		Release: func(context.Context, map[string][]string) (int, error) { return 0, nil }})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

var keysA = []string{"ocl:capacity:api_heavy", "ocl:capacity:user:ada"}

// A gated call only queues: nothing is written until writeDelay after the
// first entry, then everything queued in one write to the incarnation's
// journal; a record and its removal queued before a write cancel out (a
// short call is never written); a removal of a record written is written
// in the next batch. Records are kept twice the call's max hold, a
// minute at least.
func TestQueueBatchesAndCoalesces(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, h := &fakeStore{}, &logs{}
		j := openTest(t, f, h)
		defer j.Close(context.Background())
		j.Add("a", keysA, 10*time.Second)
		j.Add("b", keysA, 90*time.Second)
		j.Add("c", keysA[:1], time.Minute)
		j.Remove("b") // b's call ended before the write
		synctest.Wait()
		if w := f.taken(); len(w) != 0 {
			t.Fatalf("written on the calls' path: %+v", w)
		}
		time.Sleep(writeDelay)
		synctest.Wait()
		w := f.taken()
		want := map[string][]string{"a": keysA, "c": keysA[:1]}
		if len(w) != 1 || !maps.EqualFunc(w[0].add, want, slices.Equal) || len(w[0].remove) != 0 ||
			w[0].group != testGroup || w[0].self != j.ID() {
			t.Fatalf("writes %+v, want one adding a and c to %s's journal", w, j.ID())
		}
		if w[0].ttl != 3*time.Minute {
			t.Errorf("ttl %v, want the longest queued (3m: b's max hold 90s, twice, though b is gone)", w[0].ttl)
		}
		// A short call, start to end within one interval: nothing to write.
		j.Add("d", keysA, 0)
		j.Remove("d")
		time.Sleep(10 * writeDelay)
		synctest.Wait()
		if w := f.taken(); len(w) != 0 {
			t.Fatalf("a call shorter than the interval was written: %+v", w)
		}
		// a and c end: their removals go in one write.
		j.Remove("a")
		j.Remove("c")
		j.Add("e", keysA, 0)
		time.Sleep(writeDelay)
		synctest.Wait()
		w = f.taken()
		if len(w) != 1 || !slices.Equal(w[0].remove, []string{"a", "c"}) || len(w[0].add) != 1 || w[0].add["e"] == nil {
			t.Fatalf("writes %+v, want one removing a and c, adding e", w)
		}
		if w[0].ttl != MinRecordTTL {
			t.Errorf("ttl %v for a call of no max hold, want MinRecordTTL", w[0].ttl)
		}
		if msgs := h.warnings(); len(msgs) != 0 {
			t.Errorf("warnings %v", msgs)
		}
	})
}

// Close writes what was queued (the last removals); after it nothing more
// is queued.
func TestQueueClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, h := &fakeStore{}, &logs{}
		j := openTest(t, f, h)
		j.Add("a", keysA, time.Minute)
		j.Add("b", keysA, time.Minute)
		time.Sleep(writeDelay)
		synctest.Wait()
		f.taken()
		j.Remove("a") // released just before the shutdown: Close writes it
		if err := j.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		w := f.taken()
		if len(w) != 1 || !slices.Equal(w[0].remove, []string{"a"}) {
			t.Fatalf("Close wrote %+v, want the removal of a", w)
		}
		j.Remove("b") // after Close: left for another incarnation to release
		j.Add("c", keysA, time.Minute)
		time.Sleep(writeDelay)
		synctest.Wait()
		if w := f.taken(); len(w) != 0 {
			t.Fatalf("written after Close: %+v", w)
		}
		if err := j.Close(context.Background()); err != nil {
			t.Errorf("a second Close: %v", err)
		}
	})
}

// The queue holds at most max entries: past it a new one is dropped, and
// a warning logged at once, then at most once a minute with the count
// since the last; a removal that cancels a queued record always goes
// through.
func TestQueueBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, h := &fakeStore{}, &logs{}
		j := openTest(t, f, h)
		defer j.Close(context.Background())
		j.q.max = 3
		for _, tok := range []string{"a", "b", "c", "d", "e"} {
			j.Add(tok, keysA, time.Minute)
		}
		const full = "capgate: the journal's queue is full"
		if got := h.ints(full, "dropped"); !slices.Equal(got, []int64{1}) {
			t.Fatalf("drop warnings %v, want one at the first drop", got)
		}
		j.Remove("c") // cancels c's record: room for one more
		j.Add("f", keysA, time.Minute)
		time.Sleep(writeDelay)
		synctest.Wait()
		w := f.taken()
		if len(w) != 1 || !slices.Equal(slices.Sorted(maps.Keys(w[0].add)), []string{"a", "b", "f"}) {
			t.Fatalf("writes %+v, want a, b and f (d and e dropped)", w)
		}
		for _, tok := range []string{"g", "h", "i", "k"} {
			j.Add(tok, keysA, time.Minute)
		}
		if got := h.ints(full, "dropped"); len(got) != 1 {
			t.Fatalf("drop warnings %v, want no second one within the minute", got)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		f.taken()
		for _, tok := range []string{"l", "m", "n", "o"} {
			j.Add(tok, keysA, time.Minute)
		}
		if got := h.ints(full, "dropped"); !slices.Equal(got, []int64{1, 3}) {
			t.Fatalf("drop warnings %v, want a second one a minute later, counting the 3 since (e, k, o)", got)
		}
	})
}

// A write that fails is put back and tried again retryDelay later; a
// removal queued while the failed write ran is kept (the record it removes
// may have been written), its record is not put back.
func TestQueueFailedWriteIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, h := &fakeStore{fail: 1, gate: make(chan struct{})}, &logs{}
		j := openTest(t, f, h)
		defer j.Close(context.Background())
		j.Add("a", keysA, time.Minute)
		j.Add("b", keysA, time.Minute)
		time.Sleep(writeDelay)
		synctest.Wait() // the write waits on the gate
		j.Remove("a")   // a's call ends while its record is being written
		f.gate <- struct{}{}
		synctest.Wait() // it failed
		if msgs := h.warnings(); len(msgs) != 1 {
			t.Fatalf("warnings %v, want one for the failed write", msgs)
		}
		close(f.gate)
		time.Sleep(writeDelay)
		synctest.Wait()
		if w := f.taken(); len(w) != 0 {
			t.Fatalf("retried before retryDelay: %+v", w)
		}
		time.Sleep(retryDelay)
		synctest.Wait()
		w := f.taken()
		if len(w) != 1 || !slices.Equal(w[0].remove, []string{"a"}) || len(w[0].add) != 1 || w[0].add["b"] == nil {
			t.Fatalf("writes %+v, want one adding b and removing a", w)
		}
	})
}

// AddNow writes before it returns, together with what Add queued before
// it; a failed write is returned, and retried as a queued one is.
func TestAddNowWritesBeforeItReturns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, h := &fakeStore{}, &logs{}
		j := openTest(t, f, h)
		defer j.Close(context.Background())
		j.Add("a", keysA, time.Minute)
		if err := j.AddNow(context.Background(), "b", keysA[:1], time.Minute); err != nil {
			t.Fatal(err)
		}
		w := f.taken()
		want := map[string][]string{"a": keysA, "b": keysA[:1]}
		if len(w) != 1 || !maps.EqualFunc(w[0].add, want, slices.Equal) {
			t.Fatalf("writes %+v by AddNow's return, want one adding a and b", w)
		}
		time.Sleep(10 * writeDelay)
		synctest.Wait()
		if w := f.taken(); len(w) != 0 {
			t.Fatalf("written again: %+v", w)
		}
		f.mu.Lock()
		f.fail = 1
		f.mu.Unlock()
		if err := j.AddNow(context.Background(), "c", keysA, time.Minute); err == nil {
			t.Fatal("a failed write: no error")
		}
		time.Sleep(retryDelay)
		synctest.Wait()
		if w := f.taken(); len(w) != 1 || w[0].add["c"] == nil {
			t.Fatalf("writes %+v after the failure, want c retried", w)
		}
	})
}

// BenchmarkJournalAddRemove is what the journal adds to a gated call's
// path: its record queued after the admission, its removal after the
// release (writes in the background every writeDelay, to a store that
// answers at once).
func BenchmarkJournalAddRemove(b *testing.B) {
	j := openTest(b, &fakeStore{}, &logs{})
	b.Cleanup(func() { _ = j.Close(context.Background()) })
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
			j.Add(token, keysA, time.Minute)
			j.Remove(token)
		}
	})
}
