// Package journaltest is the conformance suite every journal.Store must
// pass (Run): memory.Store, and redis.Store on miniredis, a real Redis and
// a Redis Cluster.
package journaltest

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/capgate/capgate/journal"
)

// Factory opens an empty store for one test. pass moves the store's clock
// at least d forward: a fake clock's advance, or, for a real Redis, a wait
// of d (the suite asserts only what holds once at least d has passed).
type Factory func(t testing.TB) (s journal.Store, pass func(d time.Duration))

// long is a liveness that never lapses within a test.
const long = time.Hour

// short is a liveness a test lets lapse (with pass).
const short = 200 * time.Millisecond

// Run runs the suite on the stores open makes.
func Run(t *testing.T, open Factory) {
	cases := []struct {
		name string
		fn   func(t *testing.T, s journal.Store, pass func(time.Duration))
	}{
		{"RenewReportsTheOthers", testRenew},
		{"ALiveIncarnationIsNeverRead", testAliveNotRead},
		{"ALapsedIncarnationIsReadAndForgotten", testLapsed},
		{"GoodbyeWithAnEmptyJournalLeaves", testGoodbyeEmpty},
		{"GoodbyeWithRecordsLeavesThemToRelease", testGoodbyeRecords},
		{"ALapsedIncarnationRenewsAgain", testRenewsAgain},
		{"ForgetKeepsARecordWrittenSince", testForgetKeeps},
		{"WriteBatches", testWrite},
		{"GroupsAreApart", testGroups},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, pass := open(t)
			c.fn(t, s, pass)
		})
	}
}

const group = "gateway:task-1:127.0.0.1:8080"

func renew(t *testing.T, s journal.Store, group, self string, ttl time.Duration) map[string]time.Duration {
	t.Helper()
	others, err := s.JournalRenew(t.Context(), group, self, ttl, time.Minute)
	if err != nil {
		t.Fatalf("renew %s: %v", self, err)
	}
	return others
}

func write(t *testing.T, s journal.Store, group, self string, add map[string][]string, remove ...string) {
	t.Helper()
	if err := s.JournalWrite(t.Context(), group, self, add, remove, time.Minute); err != nil {
		t.Fatalf("write %s: %v", self, err)
	}
}

func read(t *testing.T, s journal.Store, group, id string) (map[string][]string, bool) {
	t.Helper()
	left, dead, err := s.JournalRead(t.Context(), group, id)
	if err != nil {
		t.Fatalf("read %s: %v", id, err)
	}
	return left, dead
}

func forget(t *testing.T, s journal.Store, group, id string, tokens ...string) {
	t.Helper()
	if err := s.JournalForget(t.Context(), group, id, tokens); err != nil {
		t.Fatalf("forget %s: %v", id, err)
	}
}

func leave(t *testing.T, s journal.Store, group, self string) {
	t.Helper()
	if err := s.JournalLeave(t.Context(), group, self); err != nil {
		t.Fatalf("leave %s: %v", self, err)
	}
}

func same(a, b map[string][]string) bool { return maps.EqualFunc(a, b, slices.Equal) }

var (
	recA = map[string][]string{"ta1": {"ocl:capacity:api_heavy", "ocl:capacity:user:ada"}, "ta2": {"ocl:capacity:bulk"}}
	recB = map[string][]string{"tb1": {"ocl:capacity:api_heavy"}}
)

// testRenew: each renewal registers its incarnation and reports the
// others with the liveness they have left.
func testRenew(t *testing.T, s journal.Store, _ func(time.Duration)) {
	if others := renew(t, s, group, "a", long); len(others) != 0 {
		t.Fatalf("the first incarnation sees %v, want nobody", others)
	}
	others := renew(t, s, group, "b", time.Minute)
	if left, ok := others["a"]; len(others) != 1 || !ok || left <= 50*time.Minute || left > long {
		t.Fatalf("b sees %v, want a with about an hour left", others)
	}
	others = renew(t, s, group, "a", long)
	if left, ok := others["b"]; len(others) != 1 || !ok || left <= 50*time.Second || left > time.Minute {
		t.Fatalf("a sees %v, want b with about a minute left", others)
	}
}

// testAliveNotRead: a live incarnation's journal is never read, however
// old its records.
func testAliveNotRead(t *testing.T, s journal.Store, _ func(time.Duration)) {
	renew(t, s, group, "a", long)
	write(t, s, group, "a", recA)
	renew(t, s, group, "b", long)
	if left, dead := read(t, s, group, "a"); dead || left != nil {
		t.Fatalf("a live incarnation read as dead: %v", left)
	}
}

// testLapsed: once its liveness has lapsed, an incarnation is reported
// dead, its journal is read whole, and forgetting what was read removes
// it from the roster.
func testLapsed(t *testing.T, s journal.Store, pass func(time.Duration)) {
	renew(t, s, group, "a", short)
	write(t, s, group, "a", recA)
	renew(t, s, group, "b", long)
	pass(short + 50*time.Millisecond)
	others := renew(t, s, group, "b", long)
	if left, ok := others["a"]; !ok || left > 0 {
		t.Fatalf("b sees %v after a's liveness passed, want a lapsed", others)
	}
	left, dead := read(t, s, group, "a")
	if !dead || !same(left, recA) {
		t.Fatalf("read a: %v, dead %v; want its records %v", left, dead, recA)
	}
	forget(t, s, group, "a", "ta1", "ta2")
	if others := renew(t, s, group, "b", long); len(others) != 0 {
		t.Errorf("b sees %v after a was forgotten, want nobody", others)
	}
	if left, dead := read(t, s, group, "a"); !dead || len(left) != 0 {
		t.Errorf("read a after it was forgotten: %v, dead %v; want nothing", left, dead)
	}
}

// testGoodbyeEmpty: an incarnation that leaves with an empty journal is
// gone from the roster at once.
func testGoodbyeEmpty(t *testing.T, s journal.Store, _ func(time.Duration)) {
	renew(t, s, group, "a", long)
	write(t, s, group, "a", recA)
	write(t, s, group, "a", nil, "ta1", "ta2")
	renew(t, s, group, "b", long)
	leave(t, s, group, "a")
	if others := renew(t, s, group, "b", long); len(others) != 0 {
		t.Errorf("b sees %v after a left, want nobody", others)
	}
}

// testGoodbyeRecords: an incarnation that leaves with records is dead at
// once (whatever liveness it had left), and its records are read.
func testGoodbyeRecords(t *testing.T, s journal.Store, _ func(time.Duration)) {
	renew(t, s, group, "a", long)
	write(t, s, group, "a", recA)
	leave(t, s, group, "a")
	others := renew(t, s, group, "b", long)
	if left, ok := others["a"]; !ok || left > 0 {
		t.Fatalf("b sees %v after a left with records, want a dead", others)
	}
	if left, dead := read(t, s, group, "a"); !dead || !same(left, recA) {
		t.Fatalf("read a: %v, dead %v; want %v", left, dead, recA)
	}
	forget(t, s, group, "a", "ta1", "ta2")
	if others := renew(t, s, group, "b", long); len(others) != 0 {
		t.Errorf("b sees %v after a was forgotten, want nobody", others)
	}
}

// testRenewsAgain: an incarnation whose liveness lapsed (cut off from the
// store) and that renews again is alive again: its journal is not read.
func testRenewsAgain(t *testing.T, s journal.Store, pass func(time.Duration)) {
	renew(t, s, group, "a", short)
	write(t, s, group, "a", recA)
	pass(short + 50*time.Millisecond)
	renew(t, s, group, "a", long)
	if others := renew(t, s, group, "b", long); others["a"] <= 0 {
		t.Fatalf("b sees %v, want a alive again", others)
	}
	if left, dead := read(t, s, group, "a"); dead {
		t.Errorf("a renewed again, read as dead: %v", left)
	}
}

// testForgetKeeps: forgetting the records read leaves a record written
// since, and the incarnation in the roster.
func testForgetKeeps(t *testing.T, s journal.Store, pass func(time.Duration)) {
	renew(t, s, group, "a", short)
	write(t, s, group, "a", recA)
	pass(short + 50*time.Millisecond)
	left, dead := read(t, s, group, "a")
	if !dead || !same(left, recA) {
		t.Fatalf("read a: %v, dead %v", left, dead)
	}
	write(t, s, group, "a", map[string][]string{"ta3": {"ocl:capacity:lane_c"}})
	forget(t, s, group, "a", "ta1", "ta2")
	others := renew(t, s, group, "b", long)
	if _, ok := others["a"]; !ok {
		t.Fatalf("b sees %v, want a still there: its journal holds a record", others)
	}
	if left, _ := read(t, s, group, "a"); !same(left, map[string][]string{"ta3": {"ocl:capacity:lane_c"}}) {
		t.Errorf("a's journal %v, want the record written since", left)
	}
}

// testWrite: a batch adds and forgets records; a record and its removal
// in one batch is the caller's to drop; an emptied journal is gone; an
// empty batch does nothing.
func testWrite(t *testing.T, s journal.Store, _ func(time.Duration)) {
	const id = "never-renewed" // not in the roster: read as dead
	if err := s.JournalWrite(t.Context(), group, id, nil, nil, time.Minute); err != nil {
		t.Fatalf("an empty batch: %v", err)
	}
	write(t, s, group, id, recA)
	write(t, s, group, id, recB, "ta1", "t-never-added")
	want := map[string][]string{"ta2": recA["ta2"], "tb1": recB["tb1"]}
	if left, dead := read(t, s, group, id); !dead || !same(left, want) {
		t.Fatalf("read %v (dead %v), want %v", left, dead, want)
	}
	write(t, s, group, id, nil, "ta2", "tb1")
	if left, _ := read(t, s, group, id); len(left) != 0 {
		t.Errorf("read %v after every record was forgotten, want none", left)
	}
}

// testGroups: one id in two groups is two incarnations.
func testGroups(t *testing.T, s journal.Store, pass func(time.Duration)) {
	const other = "decide:task-1:unix:/run/capgate.sock"
	renew(t, s, group, "a", short)
	renew(t, s, other, "a", long)
	write(t, s, group, "a", recA)
	write(t, s, other, "a", recB)
	if others := renew(t, s, other, "b", long); len(others) != 1 {
		t.Fatalf("b sees %v in its group, want a alone", others)
	}
	pass(short + 50*time.Millisecond)
	if left, dead := read(t, s, other, "a"); dead {
		t.Errorf("a of %s read as dead (%v): only a of %s lapsed", other, left, group)
	}
	if left, dead := read(t, s, group, "a"); !dead || !same(left, recA) {
		t.Errorf("a of %s: %v, dead %v; want its own records", group, left, dead)
	}
}
