package journal

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/capgate/capgate/memory"
)

// The liveness rule on the memory store, in a synctest bubble: the
// store's clock and the journals' timers are the bubble's, so each test
// reads exactly when a lease is released.

// releases records what a journal's Release was given, and when.
type releases struct {
	mu   sync.Mutex
	got  []map[string][]string
	when []time.Time
	err  error // returned by each release
}

func (r *releases) release(_ context.Context, left map[string][]string) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, maps.Clone(left))
	r.when = append(r.when, time.Now())
	if r.err != nil {
		return 0, r.err
	}
	return len(left), nil
}

// tokens returns every token released, sorted.
func (r *releases) tokens() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, m := range r.got {
		out = append(out, slices.Collect(maps.Keys(m))...)
	}
	slices.Sort(out)
	return out
}

func (r *releases) times() []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.when)
}

// incarnation is a journal and what it released.
type incarnation struct {
	*Journal
	rel *releases
	log *logs
}

func open(t *testing.T, s Store, hold time.Duration) incarnation {
	t.Helper()
	rel, h := &releases{}, &logs{}
	j, err := Open(context.Background(), Options{Store: s, Group: testGroup, Release: rel.release, Hold: hold,
		Logger: slog.New(h)})
	if err != nil {
		t.Fatal(err)
	}
	inc := incarnation{j, rel, h}
	t.Cleanup(inc.kill) // a test that failed leaves no goroutine behind
	return inc
}

// kill stops inc as SIGKILL would: no more renewals, writes or goodbye.
func (inc incarnation) kill() {
	inc.stopLoop()
	inc.q.mu.Lock()
	inc.q.closed = true
	if inc.q.timer != nil {
		inc.q.timer.Stop()
	}
	inc.q.mu.Unlock()
	inc.q.rounds.Wait()
}

// hold queues records for tokens and lets them be written.
func (inc incarnation) hold(tokens ...string) {
	for _, tok := range tokens {
		inc.Add(tok, keysA, time.Hour) // calls held for as long as the tests run
	}
	time.Sleep(writeDelay)
	synctest.Wait()
}

func closeAll(t *testing.T, incs ...incarnation) {
	t.Helper()
	for _, inc := range incs {
		if err := inc.Close(context.Background()); err != nil {
			t.Errorf("close %s: %v", inc.ID(), err)
		}
	}
}

// An incarnation killed (it stops renewing) is released by its successor
// once both its liveness has lapsed and the successor has run for its
// hold: not before either, and exactly once; its journal is then gone.
func TestKilledIncarnationIsReleasedOnceProvenDead(t *testing.T) {
	for _, c := range []struct {
		name       string
		hold, wait time.Duration // the successor's hold; how long after the kill it starts
	}{
		{"TheHoldEndsLast", 2 * time.Second, 100 * time.Millisecond},
		{"TheLivenessLapsesLast", 300 * time.Millisecond, 100 * time.Millisecond},
		{"NoHold", 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := memory.New(nil)
				opened := time.Now()
				old := open(t, s, DefaultHold)
				old.hold("a1", "a2")
				time.Sleep(3 * DefaultLiveness) // renewing all along, every quarter of its liveness since it opened
				synctest.Wait()
				every := DefaultLiveness / 4
				lastRenewal := opened.Add(time.Since(opened) / every * every)
				old.kill()
				time.Sleep(c.wait)
				next := open(t, s, c.hold)
				next.hold("b1")
				due := maxTime(next.started.Add(c.hold), lastRenewal.Add(DefaultLiveness))
				time.Sleep(time.Until(due) - time.Millisecond)
				synctest.Wait()
				if got := next.rel.tokens(); len(got) != 0 {
					t.Fatalf("released %v before the old incarnation was proven dead and the hold passed", got)
				}
				time.Sleep(time.Second)
				synctest.Wait()
				if got := next.rel.tokens(); !slices.Equal(got, []string{"a1", "a2"}) {
					t.Fatalf("released %v, want the killed incarnation's a1 and a2, once", got)
				}
				if when := next.rel.times(); when[0].Sub(due) > minWait {
					t.Errorf("released %v after it was due, want at once", when[0].Sub(due))
				}
				if got := s.Journals()[testGroup]; len(got) != 1 || got[next.ID()] == nil {
					t.Errorf("journals %v, want the successor's alone", got)
				}
				if got := next.log.ints("capgate: released the calls a dead incarnation left held", "calls"); !slices.Equal(got, []int64{2}) {
					t.Errorf("logged %v released, want 2", got)
				}
				next.Remove("b1")
				closeAll(t, next)
				if got := s.Journals(); len(got) != 0 {
					t.Errorf("journals left after a clean close: %v", got)
				}
			})
		})
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// A predecessor that still lives — sent SIGTERM, it serves its calls to
// their end, renewing all along — is never released, however long it
// runs and whatever the successor's hold; once its calls have ended it
// says goodbye, and nothing is left to release.
func TestDrainingPredecessorKeepsItsCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memory.New(nil)
		old := open(t, s, DefaultHold)
		old.hold("a1", "a2")
		next := open(t, s, 0)
		time.Sleep(time.Hour)
		synctest.Wait()
		if got := next.rel.tokens(); len(got) != 0 {
			t.Fatalf("released %v of a live predecessor", got)
		}
		const alive = "capgate: another incarnation of this journal's group is alive"
		if n := countMsgs(next.log, alive); n != 1 {
			t.Errorf("logged that the predecessor lives %d times, want once", n)
		}
		old.Remove("a1")
		old.Remove("a2")
		closeAll(t, old) // its last calls ended: goodbye
		time.Sleep(time.Hour)
		synctest.Wait()
		closeAll(t, next)
		if got := next.rel.tokens(); len(got) != 0 {
			t.Errorf("released %v, want nothing: the predecessor's calls ended in its own time", got)
		}
		if got := s.Journals(); len(got) != 0 {
			t.Errorf("journals left: %v", got)
		}
	})
}

func countMsgs(h *logs, prefix string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range h.recs {
		if strings.HasPrefix(r.Message, prefix) {
			n++
		}
	}
	return n
}

// Two live incarnations of one group (one task id and listen address on
// two hosts sharing the store) each keep their own journal and never
// release each other's calls; once one is killed, the other releases its
// calls, and only those.
func TestTwinsNeverReleaseEachOther(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memory.New(nil)
		a, b := open(t, s, DefaultHold), open(t, s, DefaultHold)
		if a.ID() == b.ID() {
			t.Fatal("two incarnations of one id")
		}
		a.hold("a1")
		b.hold("b1", "b2")
		time.Sleep(time.Hour)
		synctest.Wait()
		if got := append(a.rel.tokens(), b.rel.tokens()...); len(got) != 0 {
			t.Fatalf("released %v between live twins", got)
		}
		if got := s.Journals()[testGroup]; len(got) != 2 || len(got[a.ID()]) != 1 || len(got[b.ID()]) != 2 {
			t.Fatalf("journals %v, want one each", got)
		}
		b.kill()
		time.Sleep(DefaultLiveness + time.Second)
		synctest.Wait()
		if got := a.rel.tokens(); !slices.Equal(got, []string{"b1", "b2"}) {
			t.Errorf("a released %v once b was dead, want b's calls alone", got)
		}
		a.Remove("a1")
		closeAll(t, a)
	})
}

// An incarnation that says goodbye with records left (calls it could not
// release) is dead at once: the others release them at their next
// renewal, without waiting for its liveness to lapse.
func TestGoodbyeWithRecordsIsReleasedAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memory.New(nil)
		next := open(t, s, 0)
		old := open(t, s, 0)
		old.hold("a1")
		closeAll(t, old)
		time.Sleep(DefaultLiveness / 4)
		synctest.Wait()
		if got := next.rel.tokens(); !slices.Equal(got, []string{"a1"}) {
			t.Errorf("released %v within a renewal of the goodbye, want a1", got)
		}
		closeAll(t, next)
	})
}

// Closing within its hold (SIGTERM soon after a restart) releases a dead
// predecessor's calls at once; a successor killed within its hold leaves
// them to the one after it.
func TestHoldEndsAtCloseAndOutlivesAKill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memory.New(nil)
		old := open(t, s, 0)
		old.hold("a1")
		old.kill()
		second := open(t, s, time.Minute)
		time.Sleep(2 * DefaultLiveness)
		synctest.Wait()
		second.kill() // within its hold: a1 untouched
		if got := second.rel.tokens(); len(got) != 0 {
			t.Fatalf("released %v within the hold", got)
		}
		third := open(t, s, time.Minute)
		time.Sleep(2 * DefaultLiveness)
		synctest.Wait()
		closeAll(t, third) // SIGTERM within the hold
		if got := third.rel.tokens(); !slices.Equal(got, []string{"a1"}) {
			t.Errorf("released %v at close, want a1", got)
		}
		if got := s.Journals(); len(got) != 0 {
			t.Errorf("journals left: %v", got)
		}
	})
}

// A release that fails leaves the leases to expire by themselves: their
// records are forgotten, and a warning says so; the journal goes on.
func TestFailedReleaseForgetsTheRecords(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memory.New(nil)
		old := open(t, s, 0)
		old.hold("a1")
		old.kill()
		next := open(t, s, 0)
		next.rel.mu.Lock()
		next.rel.err = errors.New("store down")
		next.rel.mu.Unlock()
		time.Sleep(2 * DefaultLiveness)
		synctest.Wait()
		if got := next.rel.tokens(); !slices.Equal(got, []string{"a1"}) {
			t.Fatalf("tried %v, want a1 once", got)
		}
		if w := next.log.warnings(); len(w) != 1 || !strings.HasPrefix(w[0], "capgate: release the calls a dead incarnation left held") {
			t.Errorf("warnings %v", w)
		}
		if got := s.Journals(); len(got[testGroup]) != 0 {
			t.Errorf("journals %v, want the dead one's forgotten", got)
		}
		closeAll(t, next)
	})
}

// flaky is a store whose renewals fail while down.
type flaky struct {
	Store
	mu   sync.Mutex
	down bool
}

func (f *flaky) JournalRenew(ctx context.Context, group, self string, ttl, keep time.Duration) (map[string]time.Duration, error) {
	f.mu.Lock()
	down := f.down
	f.mu.Unlock()
	if down {
		return nil, errors.New("store down")
	}
	return f.Store.JournalRenew(ctx, group, self, ttl, keep)
}

// An incarnation cut off from the store for longer than its liveness is
// taken for dead (its records released by a live one), warns once a
// minute, and renews again when the store answers: alive again, its new
// records are its own.
func TestCutOffIncarnationIsTakenForDeadThenRenews(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memory.New(nil)
		f := &flaky{Store: s}
		cut := open(t, f, 0)
		cut.hold("a1")
		other := open(t, s, 0)
		f.mu.Lock()
		f.down = true
		f.mu.Unlock()
		time.Sleep(2 * DefaultLiveness)
		synctest.Wait()
		if got := other.rel.tokens(); !slices.Equal(got, []string{"a1"}) {
			t.Fatalf("released %v, want a1 of the incarnation cut off", got)
		}
		if w := cut.log.warnings(); len(w) != 1 {
			t.Errorf("warnings %v, want one (at most once a minute)", w)
		}
		f.mu.Lock()
		f.down = false
		f.mu.Unlock()
		cut.hold("a2")
		time.Sleep(time.Hour)
		synctest.Wait()
		if got := other.rel.tokens(); !slices.Equal(got, []string{"a1"}) {
			t.Errorf("released %v, want a2 kept: its incarnation renews again", got)
		}
		cut.Remove("a2")
		closeAll(t, cut, other)
	})
}

// Open refuses what would make a journal that journals nothing or
// releases wrongly; the zero liveness and deadline are the defaults.
func TestOpenRefuses(t *testing.T) {
	rel := func(context.Context, map[string][]string) (int, error) { return 0, nil }
	s := memory.New(nil)
	for _, c := range []struct {
		name string
		o    Options
	}{
		{"no store", Options{Group: testGroup, Release: rel}},
		{"no group", Options{Store: s, Release: rel}},
		{"no release", Options{Store: s, Group: testGroup}},
		{"a negative hold", Options{Store: s, Group: testGroup, Release: rel, Hold: -time.Second}},
		{"a negative liveness", Options{Store: s, Group: testGroup, Release: rel, Liveness: -time.Second}},
		{"a negative deadline", Options{Store: s, Group: testGroup, Release: rel, Deadline: -time.Second}},
	} {
		if _, err := Open(context.Background(), c.o); err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
	synctest.Test(t, func(t *testing.T) {
		j, err := Open(context.Background(), Options{Store: memory.New(nil), Group: testGroup, Release: rel})
		if err != nil {
			t.Fatal(err)
		}
		if j.liveness != DefaultLiveness || j.deadline != DefaultDeadline || j.logger == nil {
			t.Errorf("defaults: liveness %v, deadline %v, logger %v", j.liveness, j.deadline, j.logger)
		}
		closeAll(t, incarnation{Journal: j})
	})
}
