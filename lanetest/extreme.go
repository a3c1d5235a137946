package lanetest

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/capgate/capgate"
)

// storeTestExtremeSeats: seats and limits at the int64 edges behave.
// Seats past capgate.MaxSeats are refused by Validate, before any
// arithmetic (a store takes a member per seat, and count + seats wrapped
// negative in Go, so such a call found no lane full and took 2^63
// members), and nothing is taken, forced or not. Many seats fit a lane
// whose limit is math.MaxInt; a limit of math.MaxInt that also lends
// (limit + what it lends would wrap) is no limit rather than full; a
// negative limit is full.
func storeTestExtremeSeats(t *testing.T, s Store) {
	keys := storeLanes(2)
	held := NewToken()
	if taken, _ := storeAcquire(t, s, held, keys, []int{3, 3}, time.Minute, false); !taken {
		t.Fatal("the first call is not taken")
	}
	for _, seats := range []int{capgate.MaxSeats + 1, math.MaxInt - 1, math.MaxInt} {
		for _, force := range []bool{false, true} {
			req := capgate.AcquireRequest{Token: NewToken(), Keys: keys, Limits: []int{3, math.MaxInt}, Seats: []int{1, seats},
				Lease: time.Minute, Force: force}
			counts := make([]int, 2)
			// Validate first: the stores would run the acquire itself.
			if req.Validate(counts) == nil {
				t.Fatalf("seats %d (force %v): Validate accepts them; want at most MaxSeats (%d)", seats, force, capgate.MaxSeats)
			}
			if taken, err := s.Acquire(t.Context(), req, counts); err == nil || taken {
				t.Errorf("seats %d (force %v): Acquire = %v, %v; want an error and nothing taken", seats, force, taken, err)
			}
		}
	}
	if got := storeCount(t, s, keys...); !slices.Equal(got, []int{1, 1}) {
		t.Fatalf("counts after the refused acquires = %v, want [1 1]", got)
	}

	// MaxSeats is valid; a big call (fewer seats, so that the test stays
	// light on a shared Redis) in a lane of limit MaxInt beside one the
	// first call fills: refused there, then taken alone.
	const many = 1000
	big := capgate.AcquireRequest{Token: NewToken(), Keys: keys, Limits: []int{1, math.MaxInt}, Seats: []int{1, capgate.MaxSeats},
		Lease: time.Minute}
	counts := make([]int, 2)
	if err := big.Validate(counts); err != nil {
		t.Errorf("MaxSeats refused: %v", err)
	}
	big.Seats[1] = many
	if taken, err := s.Acquire(t.Context(), big, counts); err != nil || taken || !slices.Equal(counts, []int{1, 1}) {
		t.Errorf("%d seats beside a full lane: %v, %v, counts %v; want refused, [1 1]", many, taken, err, counts)
	}
	storeRelease(t, s, held, keys...)
	if taken, err := s.Acquire(t.Context(), big, counts); err != nil || !taken {
		t.Fatalf("%d seats in a lane of limit MaxInt: %v, %v; want taken", many, taken, err)
	}
	if got := storeCount(t, s, keys...); !slices.Equal(got, []int{1, many}) {
		t.Errorf("counts = %v, want [1 %d]", got, many)
	}
	storeRelease(t, s, big.Token, keys...)

	// Lending at the edges: limit MaxInt lending MaxInt of a reserve of
	// MaxInt, the class idle. Limit + lend wrapped negative: full.
	req, class := borrowLanes(math.MaxInt, math.MaxInt, math.MaxInt)
	req.Seats = []int{many, 1}
	if taken, counts := storeAcquireBorrow(t, s, req); !taken || !slices.Equal(counts, []int{0, 0, 0}) {
		t.Errorf("limit MaxInt lending MaxInt: %v, counts %v; want taken, [0 0 0]", taken, counts)
	}
	storeRelease(t, s, req.Token, req.Keys...)
	storeWantGone(t, s, class)

	// A negative limit is full, even the smallest one.
	for _, limit := range []int{-1, math.MinInt} {
		if taken, _ := storeAcquire(t, s, NewToken(), keys, []int{limit, 5}, time.Minute, false); taken {
			t.Errorf("limit %d: taken; want full", limit)
		}
	}
	if got := storeCount(t, s, keys...); !slices.Equal(got, []int{0, 0}) {
		t.Errorf("counts at the end = %v, want [0 0]", got)
	}
}
