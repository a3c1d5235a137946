package lanetest

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/capgate/capgate"
)

// seatMembers returns the members of token's n seats in a lane: token,
// token#2, …, token#n.
func seatMembers(token string, n int) []string {
	m := []string{token}
	for j := 2; j <= n; j++ {
		m = append(m, token+"#"+strconv.Itoa(j))
	}
	return m
}

// storeAcquireSeats is storeAcquire for a call of seats in each lane.
func storeAcquireSeats(t testing.TB, s Store, token string, keys []string, limits, seats []int, lease time.Duration, force bool) (bool, []int) {
	t.Helper()
	counts := make([]int, len(keys))
	req := capgate.AcquireRequest{Token: token, Keys: keys, Limits: limits, Seats: seats, Lease: lease, Force: force}
	taken, err := s.Acquire(t.Context(), req, counts)
	if err != nil {
		t.Fatalf("Acquire(%v, limits %v, seats %v, force %v): %v", keys, limits, seats, force, err)
	}
	return taken, counts
}

// storeTestSeats: a call of 3 seats in a lane of limit 4 is refused with
// 2 held there (count + seats > limit) and taken with 1 held; it holds 3
// members, each expiring with the lease, and the count is in seats.
func storeTestSeats(t *testing.T, s Store) {
	keys := storeLanes(1)
	a, b := NewToken(), NewToken()
	s.SetLease(t, keys[0], a, time.Minute)
	s.SetLease(t, keys[0], b, time.Minute)

	tok := NewToken()
	taken, counts := storeAcquireSeats(t, s, tok, keys, []int{4}, []int{3}, time.Minute, false)
	if taken || !slices.Equal(counts, []int{2}) {
		t.Fatalf("3 seats with 2 of 4 held = %v, counts %v; want false, [2]", taken, counts)
	}
	storeWantMembers(t, s, keys[0], a, b)

	storeRelease(t, s, b, keys...)
	taken, counts = storeAcquireSeats(t, s, tok, keys, []int{4}, []int{3}, time.Minute, false)
	if !taken || !slices.Equal(counts, []int{1}) {
		t.Fatalf("3 seats with 1 of 4 held = %v, counts %v; want true, [1]", taken, counts)
	}
	storeWantMembers(t, s, keys[0], append(seatMembers(tok, 3), a)...)
	for _, m := range seatMembers(tok, 3) {
		d, ok := s.Expiry(t, keys[0], m)
		if !ok {
			t.Fatalf("%s does not hold seat %s", keys[0], m)
		}
		storeWantBetween(t, "expiry of seat "+m, d, time.Minute-storeSlack, time.Minute)
	}
	if got := storeCount(t, s, keys...); !slices.Equal(got, []int{4}) {
		t.Errorf("count after = %v, want [4] (in seats)", got)
	}
	// The lane is full even for one seat now.
	if taken, counts := storeAcquire(t, s, NewToken(), keys, []int{4}, time.Minute, false); taken || counts[0] != 4 {
		t.Errorf("1 seat with 4 of 4 held = %v, counts %v; want false, [4]", taken, counts)
	}
}

// storeTestSeatsForce: Force takes every seat over the limit.
func storeTestSeatsForce(t *testing.T, s Store) {
	keys := storeLanes(2)
	s.SetLease(t, keys[0], NewToken(), time.Minute)
	tok := NewToken()
	taken, counts := storeAcquireSeats(t, s, tok, keys, []int{2, 0}, []int{3, 2}, time.Minute, true)
	if !taken || !slices.Equal(counts, []int{1, 0}) {
		t.Fatalf("forced 3 and 2 seats = %v, counts %v; want true, [1 0]", taken, counts)
	}
	if got := storeCount(t, s, keys...); !slices.Equal(got, []int{4, 2}) {
		t.Errorf("counts after = %v, want [4 2]", got)
	}
	storeWantMembers(t, s, keys[1], seatMembers(tok, 2)...)

	// Many seats at once (the Redis scripts add them 100 at a time), and
	// all of them released.
	many := NewToken()
	if taken, _ := storeAcquireSeats(t, s, many, keys[:1], []int{2}, []int{250}, time.Minute, true); !taken {
		t.Fatal("forced 250 seats not taken")
	}
	if got := storeCount(t, s, keys[0]); got[0] != 254 {
		t.Errorf("count after 250 more seats = %d, want 254", got[0])
	}
	storeRelease(t, s, many, keys[0])
	if got := storeCount(t, s, keys[0]); got[0] != 4 {
		t.Errorf("count after releasing the 250 seats = %d, want 4", got[0])
	}
}

// storeTestSeatsPerLane: seats differ by lane (1 in a cluster lane, 3 in
// a model lane), all or nothing.
func storeTestSeatsPerLane(t *testing.T, s Store) {
	keys := storeLanes(2) // cluster, model
	held := NewToken()
	s.SetLease(t, keys[1], held, time.Minute)
	s.SetLease(t, keys[1], NewToken(), time.Minute)

	tok := NewToken()
	taken, counts := storeAcquireSeats(t, s, tok, keys, []int{4, 4}, []int{1, 3}, time.Minute, false)
	if taken || !slices.Equal(counts, []int{0, 2}) {
		t.Fatalf("1 and 3 seats with [0 2] of [4 4] held = %v, counts %v; want false, [0 2]", taken, counts)
	}
	storeWantGone(t, s, keys[0]) // nothing taken in the lane that had room

	// Room for 1 in the cluster lane, for 2 in the model lane: still no.
	taken, counts = storeAcquireSeats(t, s, tok, keys, []int{1, 4}, []int{1, 3}, time.Minute, false)
	if taken || !slices.Equal(counts, []int{0, 2}) {
		t.Fatalf("acquire = %v, counts %v; want false, [0 2]", taken, counts)
	}
	storeRelease(t, s, held, keys[1])
	taken, counts = storeAcquireSeats(t, s, tok, keys, []int{1, 4}, []int{1, 3}, time.Minute, false)
	if !taken || !slices.Equal(counts, []int{0, 1}) {
		t.Fatalf("acquire with 1 held in the model lane = %v, counts %v; want true, [0 1]", taken, counts)
	}
	storeWantMembers(t, s, keys[0], tok)
	if got := storeCount(t, s, keys...); !slices.Equal(got, []int{1, 4}) {
		t.Errorf("counts after = %v, want [1 4]", got)
	}
}

// storeTestRenewSeats: a renew extends every seat of the call; one whose
// token lost its lease in a lane renews nothing, and an expired seat is
// never revived.
func storeTestRenewSeats(t *testing.T, s Store) {
	keys := storeLanes(2)
	seats := []int{2, 3}
	tok := NewToken()
	if taken, _ := storeAcquireSeats(t, s, tok, keys, []int{5, 5}, seats, 5*time.Second, false); !taken {
		t.Fatal("acquire not taken")
	}
	const lease = time.Minute
	if got := storeRenew(t, s, tok, keys, lease); got != 2 {
		t.Fatalf("renew held %d, want 2", got)
	}
	for i, key := range keys {
		for _, m := range seatMembers(tok, seats[i]) {
			d, ok := s.Expiry(t, key, m)
			if !ok {
				t.Fatalf("%s lost seat %s", key, m)
			}
			storeWantBetween(t, "renewed expiry of "+m, d, lease-storeSlack, lease)
		}
		storeWantBetween(t, "TTL of "+key, s.TTL(t, key), 2*lease-storeSlack, 2*lease)
	}

	// Lost: the token's own member has expired in one lane.
	lost := NewToken()
	if taken, _ := storeAcquireSeats(t, s, lost, keys, []int{10, 10}, seats, 5*time.Second, false); !taken {
		t.Fatal("second acquire not taken")
	}
	s.SetLease(t, keys[1], lost, -time.Millisecond)
	if got := storeRenew(t, s, lost, keys, lease); got != 1 {
		t.Fatalf("renew of a lost call held %d, want 1", got)
	}
	for i, key := range keys {
		for _, m := range seatMembers(lost, seats[i]) {
			if i == 1 && m == lost {
				continue // the expired one
			}
			d, _ := s.Expiry(t, key, m)
			storeWantBetween(t, "unrenewed expiry of "+m+" in "+key, d, 0, 5*time.Second)
		}
	}

	// An expired seat stays expired; the others are renewed.
	s.SetLease(t, keys[1], tok+"#2", -time.Millisecond)
	if got := storeRenew(t, s, tok, keys, lease); got != 2 {
		t.Fatalf("renew held %d, want 2", got)
	}
	if d, ok := s.Expiry(t, keys[1], tok+"#2"); ok && d > 0 {
		t.Errorf("the expired seat was revived: expiry %v", d)
	}
	d, _ := s.Expiry(t, keys[1], tok+"#3")
	storeWantBetween(t, "renewed expiry of the seat after it", d, lease-storeSlack, lease)
}

// storeTestReleaseSeats: a release frees every seat of the call, and
// only its own.
func storeTestReleaseSeats(t *testing.T, s Store) {
	keys := storeLanes(2)
	big, small := NewToken(), NewToken()
	if taken, _ := storeAcquireSeats(t, s, big, keys, []int{10, 10}, []int{3, 2}, time.Minute, false); !taken {
		t.Fatal("acquire not taken")
	}
	if taken, _ := storeAcquire(t, s, small, keys, []int{10, 10}, time.Minute, false); !taken {
		t.Fatal("acquire not taken")
	}
	if got := storeCount(t, s, keys...); !slices.Equal(got, []int{4, 3}) {
		t.Fatalf("counts = %v, want [4 3]", got)
	}
	storeRelease(t, s, big, keys...)
	for _, key := range keys {
		storeWantMembers(t, s, key, small)
	}
	storeRelease(t, s, big, keys...) // harmless twice
	storeRelease(t, s, small, keys...)
	for _, key := range keys {
		storeWantGone(t, s, key)
	}
}

// storeTestRefusesBadSeats: Seats of the wrong length, or a seat under 1,
// are refused (capgate.AcquireRequest.Validate), and nothing is taken.
func storeTestRefusesBadSeats(t *testing.T, s Store) {
	keys := storeLanes(2)
	for _, seats := range [][]int{{2}, {1, 1, 1}, {1, 0}, {-1, 2}} {
		req := capgate.AcquireRequest{Token: NewToken(), Keys: keys, Limits: []int{5, 5}, Seats: seats, Lease: time.Minute, Force: true}
		counts := make([]int, 2)
		if req.Validate(counts) == nil {
			t.Fatalf("seats %v: Validate accepts them", seats)
		}
		if taken, err := s.Acquire(t.Context(), req, counts); err == nil || taken {
			t.Errorf("seats %v: Acquire = %v, %v; want an error and nothing taken", seats, taken, err)
		}
	}
	if got := storeCount(t, s, keys...); !slices.Equal(got, []int{0, 0}) {
		t.Errorf("counts after the refused acquires = %v, want [0 0]", got)
	}
	ok := capgate.AcquireRequest{Token: NewToken(), Keys: keys, Limits: []int{5, 5}, Seats: []int{}, Lease: time.Minute}
	if err := ok.Validate(make([]int, 2)); err != nil {
		t.Errorf("empty Seats (1 each) refused: %v", err)
	}
}
