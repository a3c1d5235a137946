package lanetest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/capgate/capgate"
)

// storeSlack is how far apart two readings of a store's clock may be in one
// test: generous, for a loaded machine talking to a real Redis.
const storeSlack = 10 * time.Second

// RunStore runs the capgate.LaneStore conformance suite, one subtest per
// rule of the lanes, each on a store from open and under fresh random keys.
func RunStore(t *testing.T, open Factory) {
	tests := []struct {
		name string
		fn   func(*testing.T, Store)
	}{
		{"AcquireCountsEachLaneBefore", storeTestAcquireCounts},
		{"OneFullLaneTakesNothing", storeTestOneFullLane},
		{"ForceTakesWhenFull", storeTestForce},
		{"PausedLaneIsAlwaysFull", storeTestPaused},
		{"ExpiredLeasesArePruned", storeTestPrune},
		{"CountIgnoresExpired", storeTestCountIgnoresExpired},
		{"NewKeyTTLIsTwiceTheLease", storeTestNewKeyTTL},
		{"ShortLeaseNeverShortensTTL", storeTestTTLNeverShortens},
		{"RenewExtendsEveryLease", storeTestRenew},
		{"RenewWithOneExpiredRenewsNothing", storeTestRenewOneExpired},
		{"RenewNeverRecreatesDeletedKey", storeTestRenewDeletedKey},
		{"ReleaseRemovesFromEveryLane", storeTestRelease},
		{"KeysSortedAndPrefixLimited", storeTestKeys},
		{"LateAcquireTakesNothing", storeTestLateAcquire},
		{"DoneContextSendsNothing", storeTestDoneContext},
		{"Ping", storeTestPing},
		{"RefusesBadRequests", storeTestRefusesBadRequests},
		{"ConcurrentAcquireNeverExceedsLimit", storeTestConcurrency},
		{"SeatsFitOrNothingIsTaken", storeTestSeats},
		{"ForceTakesEverySeat", storeTestSeatsForce},
		{"SeatsDifferByLane", storeTestSeatsPerLane},
		{"RenewExtendsEverySeat", storeTestRenewSeats},
		{"ReleaseFreesEverySeat", storeTestReleaseSeats},
		{"RefusesBadSeats", storeTestRefusesBadSeats},
		{"ExtremeSeatsAndLimits", storeTestExtremeSeats},
		{"BorrowsAnIdleReserve", storeTestBorrow},
		{"BorrowableIsLendUpToTheIdleReserve", storeTestBorrowable},
		{"BorrowWithoutKeysLendsNothing", storeTestBorrowNone},
		{"ForceWithBorrow", storeTestBorrowForce},
		{"ExpiredClassSeatsDontCount", storeTestBorrowExpiredClass},
		{"LimitZeroRunsOnBorrowedSeats", storeTestBorrowLimitZero},
		{"BorrowInSomeLanes", storeTestBorrowMixed},
		{"RefusesBadBorrow", storeTestRefusesBadBorrow},
		{"CapsDeclareWhatTheStoreDoes", storeTestCaps},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.fn(t, open(t))
		})
	}
}

func storeTestAcquireCounts(t *testing.T, s Store) {
	keys := storeLanes(3)
	for range 2 {
		s.SetLease(t, keys[0], NewToken(), time.Minute)
	}
	s.SetLease(t, keys[1], NewToken(), time.Minute)

	tok := NewToken()
	taken, counts := storeAcquire(t, s, tok, keys, []int{5, 5, 5}, time.Minute, false)
	if !taken || !slices.Equal(counts, []int{2, 1, 0}) {
		t.Fatalf("acquire = %v, counts %v; want true, [2 1 0] (the counts before)", taken, counts)
	}
	if got := storeCount(t, s, keys...); !slices.Equal(got, []int{3, 2, 1}) {
		t.Errorf("counts after = %v, want [3 2 1]", got)
	}
	for _, key := range keys {
		if d, ok := s.Expiry(t, key, tok); !ok {
			t.Errorf("%s does not hold the token", key)
		} else {
			storeWantBetween(t, "lease expiry", d, time.Minute-storeSlack, time.Minute)
		}
	}
}

func storeTestOneFullLane(t *testing.T, s Store) {
	keys := storeLanes(3)
	other := NewToken()
	s.SetLease(t, keys[1], other, time.Minute)
	s.SetLease(t, keys[1], NewToken(), time.Minute)

	taken, counts := storeAcquire(t, s, NewToken(), keys, []int{3, 2, 3}, time.Minute, false)
	if taken || !slices.Equal(counts, []int{0, 2, 0}) {
		t.Fatalf("acquire = %v, counts %v; want false, [0 2 0]", taken, counts)
	}
	storeWantGone(t, s, keys[0])
	storeWantGone(t, s, keys[2])
	if got := storeCount(t, s, keys...); !slices.Equal(got, []int{0, 2, 0}) {
		t.Errorf("counts after a refused acquire = %v, want [0 2 0]", got)
	}

	// Below the limit everywhere: taken.
	if taken, counts := storeAcquire(t, s, NewToken(), keys[:1], []int{3}, time.Minute, false); !taken || counts[0] != 0 {
		t.Errorf("acquire on a free lane = %v, counts %v; want true, [0]", taken, counts)
	}
}

func storeTestForce(t *testing.T, s Store) {
	keys := storeLanes(2)
	first := NewToken()
	if taken, _ := storeAcquire(t, s, first, keys, []int{1, 1}, time.Minute, false); !taken {
		t.Fatal("first acquire not taken")
	}
	second := NewToken()
	taken, counts := storeAcquire(t, s, second, keys, []int{1, 1}, time.Minute, true)
	if !taken || !slices.Equal(counts, []int{1, 1}) {
		t.Fatalf("forced acquire = %v, counts %v; want true, [1 1]", taken, counts)
	}
	third := NewToken()
	taken, counts = storeAcquire(t, s, third, keys, []int{1, 1}, time.Minute, true)
	if !taken || !slices.Equal(counts, []int{2, 2}) {
		t.Fatalf("second forced acquire = %v, counts %v; want true, [2 2] (counts may exceed limits)", taken, counts)
	}
	for _, key := range keys {
		storeWantMembers(t, s, key, first, second, third)
	}
}

func storeTestPaused(t *testing.T, s Store) {
	keys := storeLanes(2)
	taken, counts := storeAcquire(t, s, NewToken(), keys, []int{4, 0}, time.Minute, false)
	if taken || !slices.Equal(counts, []int{0, 0}) {
		t.Fatalf("acquire on a paused lane = %v, counts %v; want false, [0 0]", taken, counts)
	}
	storeWantGone(t, s, keys[0])
	storeWantGone(t, s, keys[1])

	tok := NewToken()
	if taken, _ := storeAcquire(t, s, tok, keys, []int{4, 0}, time.Minute, true); !taken {
		t.Fatal("forced acquire on a paused lane not taken")
	}
	storeWantMembers(t, s, keys[1], tok)
}

func storeTestPrune(t *testing.T, s Store) {
	keys := storeLanes(2)
	stale, live := NewToken(), NewToken()
	s.SetLease(t, keys[0], stale, -time.Hour) // a dead worker's lease
	s.SetLease(t, keys[0], live, time.Minute)
	s.SetLease(t, keys[1], stale, -time.Millisecond)

	tok := NewToken()
	taken, counts := storeAcquire(t, s, tok, keys, []int{2, 1}, time.Minute, false)
	if !taken || !slices.Equal(counts, []int{1, 0}) {
		t.Fatalf("acquire = %v, counts %v; want true, [1 0] (expired leases not counted)", taken, counts)
	}
	storeWantMembers(t, s, keys[0], live, tok)
	storeWantMembers(t, s, keys[1], tok)
}

func storeTestCountIgnoresExpired(t *testing.T, s Store) {
	keys := storeLanes(3)
	s.SetLease(t, keys[0], NewToken(), -time.Second)
	s.SetLease(t, keys[0], NewToken(), time.Minute)
	s.SetLease(t, keys[1], NewToken(), -time.Second)
	if got := storeCount(t, s, keys...); !slices.Equal(got, []int{1, 0, 0}) {
		t.Errorf("counts = %v, want [1 0 0]", got)
	}
}

func storeTestNewKeyTTL(t *testing.T, s Store) {
	keys := storeLanes(2)
	const lease = 45 * time.Second
	if taken, _ := storeAcquire(t, s, NewToken(), keys, []int{1, 1}, lease, false); !taken {
		t.Fatal("acquire not taken")
	}
	for _, key := range keys {
		storeWantBetween(t, "TTL of "+key, s.TTL(t, key), 2*lease-storeSlack, 2*lease)
	}

	// A TTL shorter than 2×lease is raised.
	s.SetTTL(t, keys[0], 5*time.Second)
	if taken, _ := storeAcquire(t, s, NewToken(), keys[:1], []int{5}, lease, false); !taken {
		t.Fatal("second acquire not taken")
	}
	storeWantBetween(t, "raised TTL", s.TTL(t, keys[0]), 2*lease-storeSlack, 2*lease)
}

func storeTestTTLNeverShortens(t *testing.T, s Store) {
	keys := storeLanes(2) // api_heavy, user
	const long = 1_200_000 * time.Millisecond
	s.SetLease(t, keys[0], NewToken(), 600*time.Second)
	s.SetTTL(t, keys[0], long)

	tok := NewToken()
	const lease = 30 * time.Second
	if taken, _ := storeAcquire(t, s, tok, keys, []int{5, 5}, lease, false); !taken {
		t.Fatal("acquire not taken")
	}
	if got := storeRenew(t, s, tok, keys, lease); got != 2 {
		t.Fatalf("renew held %d, want 2", got)
	}
	storeWantBetween(t, "long TTL after acquire and renew", s.TTL(t, keys[0]), long-storeSlack, long)
	storeWantBetween(t, "new key's TTL", s.TTL(t, keys[1]), 2*lease-storeSlack, 2*lease)
}

func storeTestRenew(t *testing.T, s Store) {
	keys := storeLanes(3)
	tok := NewToken()
	for _, key := range keys {
		s.SetLease(t, key, tok, 5*time.Second)
	}
	const lease = time.Minute
	if got := storeRenew(t, s, tok, keys, lease); got != len(keys) {
		t.Fatalf("renew held %d, want %d", got, len(keys))
	}
	for _, key := range keys {
		d, ok := s.Expiry(t, key, tok)
		if !ok {
			t.Fatalf("%s lost the token", key)
		}
		storeWantBetween(t, "renewed expiry in "+key, d, lease-storeSlack, lease)
		storeWantBetween(t, "TTL of "+key, s.TTL(t, key), 2*lease-storeSlack, 2*lease)
	}
}

func storeTestRenewOneExpired(t *testing.T, s Store) {
	keys := storeLanes(3)
	tok := NewToken()
	s.SetLease(t, keys[0], tok, 5*time.Second)
	s.SetLease(t, keys[1], tok, -time.Hour)
	s.SetLease(t, keys[2], tok, 5*time.Second)

	if got := storeRenew(t, s, tok, keys, time.Minute); got != 2 {
		t.Fatalf("renew held %d, want 2 (fewer than %d: lease lost)", got, len(keys))
	}
	if d, ok := s.Expiry(t, keys[1], tok); ok && d > 0 {
		t.Errorf("the expired lease was revived: expiry %v", d)
	}
	for _, key := range []string{keys[0], keys[2]} {
		d, ok := s.Expiry(t, key, tok)
		if !ok {
			t.Fatalf("%s lost the token", key)
		}
		storeWantBetween(t, "unrenewed expiry in "+key, d, 0, 5*time.Second)
	}
}

func storeTestRenewDeletedKey(t *testing.T, s Store) {
	keys := storeLanes(2) // api_heavy, user
	tok := NewToken()
	for _, key := range keys {
		s.SetLease(t, key, tok, 5*time.Second)
	}
	s.Delete(t, keys[1])

	if got := storeRenew(t, s, tok, keys, time.Minute); got != 1 {
		t.Fatalf("renew held %d, want 1", got)
	}
	storeWantGone(t, s, keys[1])
	d, _ := s.Expiry(t, keys[0], tok)
	storeWantBetween(t, "unrenewed expiry", d, 0, 5*time.Second)
}

func storeTestRelease(t *testing.T, s Store) {
	keys := storeLanes(3)
	a, b := NewToken(), NewToken()
	for _, tok := range []string{a, b} {
		if taken, _ := storeAcquire(t, s, tok, keys, storeRepeat(3, 5), time.Minute, false); !taken {
			t.Fatal("acquire not taken")
		}
	}
	storeRelease(t, s, a, keys...)
	for _, key := range keys {
		storeWantMembers(t, s, key, b)
	}
	storeRelease(t, s, a, keys...) // harmless twice
	if got := storeCount(t, s, keys...); !slices.Equal(got, []int{1, 1, 1}) {
		t.Errorf("counts after releasing twice = %v, want [1 1 1]", got)
	}
	storeRelease(t, s, b, keys...)
	for _, key := range keys {
		storeWantGone(t, s, key) // an empty lane is deleted
	}
	storeRelease(t, s, b, keys...) // and releasing from a missing key is harmless
}

func storeTestKeys(t *testing.T, s Store) {
	p := NewPrefix()
	odd := p + "odd*[x]?\\:"
	for _, key := range []string{p + "user:bob", p + "user:alice", p + "tier:core", odd + "1", p + "oddZZ", p + "user"} {
		s.SetLease(t, key, NewToken(), time.Minute)
	}
	for _, tt := range []struct {
		prefix string
		want   []string
	}{
		{p + "user:", []string{p + "user:alice", p + "user:bob"}},
		{p + "user", []string{p + "user", p + "user:alice", p + "user:bob"}},
		{odd, []string{odd + "1"}},
		{p, []string{p + "odd*[x]?\\:1", p + "oddZZ", p + "tier:core", p + "user", p + "user:alice", p + "user:bob"}},
		{p + "none:", nil},
	} {
		got, err := s.Keys(t.Context(), tt.prefix)
		if err != nil {
			t.Fatalf("Keys(%q): %v", tt.prefix, err)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("Keys(%q) = %q, want %q", tt.prefix, got, tt.want)
		}
	}
}

func storeTestLateAcquire(t *testing.T, s Store) {
	keys := storeLanes(2)
	req := capgate.AcquireRequest{
		Token: NewToken(), Keys: keys, Limits: []int{5, 5}, Lease: time.Minute, Force: true,
		NotAfter: time.Now().Add(-5 * time.Second),
	}
	taken, err := s.Acquire(t.Context(), req, make([]int, 2))
	if !errors.Is(err, capgate.ErrLateAcquire) || taken {
		t.Fatalf("late acquire = %v, %v; want false, ErrLateAcquire", taken, err)
	}
	for _, key := range keys {
		storeWantGone(t, s, key)
	}

	req.NotAfter = time.Now().Add(time.Minute)
	if taken, err := s.Acquire(t.Context(), req, make([]int, 2)); err != nil || !taken {
		t.Fatalf("acquire within its not-after = %v, %v; want true, nil", taken, err)
	}
}

func storeTestDoneContext(t *testing.T, s Store) {
	keys := storeLanes(1)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	req := capgate.AcquireRequest{Token: NewToken(), Keys: keys, Limits: []int{5}, Lease: time.Minute, Force: true}
	if taken, err := s.Acquire(ctx, req, make([]int, 1)); !errors.Is(err, context.Canceled) || taken {
		t.Errorf("Acquire with a done context = %v, %v; want false, context.Canceled", taken, err)
	}
	storeWantGone(t, s, keys[0])
	if _, err := s.Renew(ctx, req.Token, keys, time.Minute); !errors.Is(err, context.Canceled) {
		t.Errorf("Renew with a done context: %v, want context.Canceled", err)
	}
	if err := s.Release(ctx, req.Token, keys); !errors.Is(err, context.Canceled) {
		t.Errorf("Release with a done context: %v, want context.Canceled", err)
	}
	if err := s.Count(ctx, keys, make([]int, 1)); !errors.Is(err, context.Canceled) {
		t.Errorf("Count with a done context: %v, want context.Canceled", err)
	}
	if _, err := s.Keys(ctx, keys[0]); !errors.Is(err, context.Canceled) {
		t.Errorf("Keys with a done context: %v, want context.Canceled", err)
	}
	if err := s.Ping(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Ping with a done context: %v, want context.Canceled", err)
	}
}

func storeTestPing(t *testing.T, s Store) {
	if err := s.Ping(t.Context()); err != nil {
		t.Errorf("Ping: %v", err)
	}
}
