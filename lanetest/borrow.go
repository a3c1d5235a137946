package lanetest

import (
	"slices"
	"testing"
	"time"

	"github.com/capgate/capgate"
)

// storeAcquireBorrow is storeAcquire for a call that borrows: counts has
// room for the lanes' counts and then the class keys'.
func storeAcquireBorrow(t testing.TB, s Store, req capgate.AcquireRequest) (bool, []int) {
	t.Helper()
	n := len(req.Keys)
	for _, b := range req.Borrow {
		if b.Key != "" {
			n++
		}
	}
	counts := make([]int, n)
	taken, err := s.Acquire(t.Context(), req, counts)
	if err != nil {
		t.Fatalf("Acquire(%v, limits %v, borrow %v): %v", req.Keys, req.Limits, req.Borrow, err)
	}
	return taken, counts
}

// borrowLanes returns a lane, a user lane and the lane's class key under
// one fresh prefix, and a request of a call on the first two that borrows
// from the class key, with limits lane and 10.
func borrowLanes(lane int, reserve, lend int) (capgate.AcquireRequest, string) {
	p := NewPrefix()
	class := p + "api_heavy:class:single"
	return capgate.AcquireRequest{
		Token: NewToken(), Keys: []string{p + "api_heavy", p + "user:u"}, Limits: []int{lane, 10},
		Lease: time.Minute, Borrow: []capgate.Borrow{{Key: class, Reserve: reserve, Lend: lend}, {}},
	}, class
}

// storeTestBorrow: a lane of 4 with 1 reserved (the borrower's limit 3)
// lends its idle reserve: with the class key empty the borrower takes the
// 4th seat; with one class seat held it does not. The borrower takes
// nothing in the class key, and the class key's count comes after the
// lanes'.
func storeTestBorrow(t *testing.T, s Store) {
	req, class := borrowLanes(3, 1, 1)
	lane := req.Keys[0]
	for range 3 {
		s.SetLease(t, lane, NewToken(), time.Minute)
	}
	taken, counts := storeAcquireBorrow(t, s, req)
	if !taken || !slices.Equal(counts, []int{3, 0, 0}) {
		t.Fatalf("borrower at 3 of 3 with the reserve idle = %v, counts %v; want taken, [3 0 0]", taken, counts)
	}
	if got := storeCount(t, s, lane, class); !slices.Equal(got, []int{4, 0}) {
		t.Errorf("counts after = %v, want [4 0]: the borrower takes the 4th seat, nothing in the class key", got)
	}
	storeWantGone(t, s, class)

	// Full even with the borrowed seat.
	if taken, counts := storeAcquireBorrow(t, s, withToken(req)); taken || !slices.Equal(counts, []int{4, 1, 0}) {
		t.Errorf("borrower at 4 of 3+1 = %v, counts %v; want refused, [4 1 0]", taken, counts)
	}

	// A call of the class holds a seat (in the lane and the class key):
	// the reserve is in use, nothing is lent.
	storeRelease(t, s, req.Token, req.Keys...)
	storeRelease(t, s, s.Members(t, lane)[0], lane)
	cls := NewToken()
	s.SetLease(t, lane, cls, time.Minute)
	s.SetLease(t, class, cls, time.Minute)
	if taken, counts := storeAcquireBorrow(t, s, withToken(req)); taken || !slices.Equal(counts, []int{3, 0, 1}) {
		t.Errorf("borrower at 3 of 3 with the class holding 1 = %v, counts %v; want refused, [3 0 1]", taken, counts)
	}
	storeWantMembers(t, s, class, cls)
	if got := storeCount(t, s, lane); got[0] != 3 {
		t.Errorf("lane count after a refused borrower = %d, want 3", got[0])
	}
}

// withToken returns req with a fresh token.
func withToken(req capgate.AcquireRequest) capgate.AcquireRequest {
	req.Token = NewToken()
	return req
}

// storeTestBorrowable: reserve 2, lend 1: the class holding 0 or 1 seats
// lends 1, holding 2 lends none; a call of 2 seats borrows 2 of a reserve
// of 2 lending 2.
func storeTestBorrowable(t *testing.T, s Store) {
	for _, c := range []struct {
		class, seats, lend int
		want               bool
	}{
		{class: 0, seats: 1, lend: 1, want: true},
		{class: 1, seats: 1, lend: 1, want: true},
		{class: 2, seats: 1, lend: 1, want: false},
		{class: 0, seats: 2, lend: 1, want: false},
		{class: 0, seats: 2, lend: 2, want: true},
		{class: 1, seats: 2, lend: 2, want: false},
	} {
		req, class := borrowLanes(3, 2, c.lend)
		if c.seats > 1 {
			req.Seats = []int{c.seats, 1}
		}
		for range 3 {
			s.SetLease(t, req.Keys[0], NewToken(), time.Minute)
		}
		for range c.class {
			s.SetLease(t, class, NewToken(), time.Minute)
		}
		taken, counts := storeAcquireBorrow(t, s, req)
		if taken != c.want || !slices.Equal(counts, []int{3, 0, c.class}) {
			t.Errorf("%d seats at 3 of 3, reserve 2, lend %d, class holding %d = %v, counts %v; want %v, [3 0 %d]",
				c.seats, c.lend, c.class, taken, counts, c.want, c.class)
		}
	}
}

// storeTestBorrowNone: Borrow entries whose Key is "" lend nothing: the
// call is judged by its limits alone and no class count is reported.
func storeTestBorrowNone(t *testing.T, s Store) {
	req, _ := borrowLanes(3, 1, 1)
	req.Borrow = []capgate.Borrow{{}, {}}
	for range 3 {
		s.SetLease(t, req.Keys[0], NewToken(), time.Minute)
	}
	if taken, counts := storeAcquireBorrow(t, s, req); taken || !slices.Equal(counts, []int{3, 0}) {
		t.Errorf("Borrow without keys at 3 of 3 = %v, counts %v; want refused, [3 0]", taken, counts)
	}
	req.Limits[0] = 4
	if taken, counts := storeAcquireBorrow(t, s, withToken(req)); !taken || !slices.Equal(counts, []int{3, 0}) {
		t.Errorf("Borrow without keys at 3 of 4 = %v, counts %v; want taken, [3 0]", taken, counts)
	}
}

// storeTestBorrowForce: Force takes the seats however full the lane, and
// the class key's count is reported all the same.
func storeTestBorrowForce(t *testing.T, s Store) {
	req, class := borrowLanes(3, 1, 1)
	for range 4 {
		s.SetLease(t, req.Keys[0], NewToken(), time.Minute)
	}
	s.SetLease(t, class, NewToken(), time.Minute)
	req.Force = true
	if taken, counts := storeAcquireBorrow(t, s, req); !taken || !slices.Equal(counts, []int{4, 0, 1}) {
		t.Fatalf("forced borrower at 4 of 3 = %v, counts %v; want taken, [4 0 1]", taken, counts)
	}
	if got := storeCount(t, s, req.Keys[0], class); !slices.Equal(got, []int{5, 1}) {
		t.Errorf("counts after = %v, want [5 1]", got)
	}
}

// storeTestBorrowExpiredClass: the class key's expired seats are dropped
// first and do not count.
func storeTestBorrowExpiredClass(t *testing.T, s Store) {
	req, class := borrowLanes(3, 1, 1)
	for range 3 {
		s.SetLease(t, req.Keys[0], NewToken(), time.Minute)
	}
	s.SetLease(t, class, NewToken(), -time.Millisecond)
	if taken, counts := storeAcquireBorrow(t, s, req); !taken || !slices.Equal(counts, []int{3, 0, 0}) {
		t.Fatalf("borrower with the class's only seat expired = %v, counts %v; want taken, [3 0 0]", taken, counts)
	}
	if m := s.Members(t, class); len(m) != 0 {
		t.Errorf("class key after the acquire holds %v, want its expired seat dropped", m)
	}
}

// storeTestBorrowLimitZero: a lane whose limit for the call is 0 where it
// lends runs the call on borrowed seats only.
func storeTestBorrowLimitZero(t *testing.T, s Store) {
	req, class := borrowLanes(0, 2, 1)
	if taken, counts := storeAcquireBorrow(t, s, req); !taken || !slices.Equal(counts, []int{0, 0, 0}) {
		t.Fatalf("limit 0 lending 1 on an empty lane = %v, counts %v; want taken, [0 0 0]", taken, counts)
	}
	if taken, counts := storeAcquireBorrow(t, s, withToken(req)); taken || !slices.Equal(counts, []int{1, 1, 0}) {
		t.Errorf("limit 0 lending 1 with the borrowed seat taken = %v, counts %v; want refused, [1 1 0]", taken, counts)
	}
	storeRelease(t, s, req.Token, req.Keys...)
	s.SetLease(t, class, NewToken(), time.Minute)
	s.SetLease(t, class, NewToken(), time.Minute)
	if taken, counts := storeAcquireBorrow(t, s, withToken(req)); taken || !slices.Equal(counts, []int{0, 0, 2}) {
		t.Errorf("limit 0 with the class holding its reserve = %v, counts %v; want refused, [0 0 2]", taken, counts)
	}
}

// storeTestBorrowMixed: lanes that lend and lanes that don't in one call;
// the class keys' counts come in lane order after the lanes', and every
// lane must fit, each by its own limit.
func storeTestBorrowMixed(t *testing.T, s Store) {
	p := NewPrefix()
	keys := []string{p + "a", p + "b", p + "c"}
	classA, classC := p+"a:class", p+"c:class"
	req := capgate.AcquireRequest{
		Token: NewToken(), Keys: keys, Limits: []int{1, 5, 1}, Lease: time.Minute,
		Borrow: []capgate.Borrow{{Key: classA, Reserve: 1, Lend: 1}, {}, {Key: classC, Reserve: 2, Lend: 2}},
	}
	s.SetLease(t, keys[0], NewToken(), time.Minute)
	s.SetLease(t, keys[2], NewToken(), time.Minute)
	s.SetLease(t, classC, NewToken(), time.Minute)
	s.SetLease(t, classC, NewToken(), time.Minute)
	// a lends 1 (its class idle); c lends none (its class holds 2).
	taken, counts := storeAcquireBorrow(t, s, req)
	if taken || !slices.Equal(counts, []int{1, 0, 1, 0, 2}) {
		t.Fatalf("acquire = %v, counts %v; want refused (c lends nothing), [1 0 1 0 2]", taken, counts)
	}
	storeWantGone(t, s, keys[1])
	storeRelease(t, s, s.Members(t, classC)[0], classC) // c lends 1 now
	taken, counts = storeAcquireBorrow(t, s, req)
	if !taken || !slices.Equal(counts, []int{1, 0, 1, 0, 1}) {
		t.Fatalf("acquire = %v, counts %v; want taken, [1 0 1 0 1]", taken, counts)
	}
	if got := storeCount(t, s, append(keys, classA, classC)...); !slices.Equal(got, []int{2, 1, 2, 0, 1}) {
		t.Errorf("counts after = %v, want [2 1 2 0 1]", got)
	}
}

// storeTestRefusesBadBorrow: Borrow of the wrong length, a class key among
// the call's keys, a reserve under 1, a lend under 1 or over the reserve,
// or no room for the class keys' counts are refused
// (capgate.AcquireRequest.Validate), and nothing is taken.
func storeTestRefusesBadBorrow(t *testing.T, s Store) {
	p := NewPrefix()
	keys := []string{p + "a", p + "b"}
	class := p + "class"
	for _, c := range []struct {
		name   string
		borrow []capgate.Borrow
		counts int
	}{
		{"one for two keys", []capgate.Borrow{{Key: class, Reserve: 1, Lend: 1}}, 3},
		{"three for two keys", []capgate.Borrow{{Key: class, Reserve: 1, Lend: 1}, {}, {}}, 3},
		{"class key among the keys", []capgate.Borrow{{Key: keys[1], Reserve: 1, Lend: 1}, {}}, 3},
		{"reserve 0", []capgate.Borrow{{Key: class, Reserve: 0, Lend: 1}, {}}, 3},
		{"lend 0", []capgate.Borrow{{Key: class, Reserve: 1, Lend: 0}, {}}, 3},
		{"lend over the reserve", []capgate.Borrow{{Key: class, Reserve: 1, Lend: 2}, {}}, 3},
		{"no room for the class count", []capgate.Borrow{{Key: class, Reserve: 1, Lend: 1}, {}}, 2},
	} {
		req := capgate.AcquireRequest{Token: NewToken(), Keys: keys, Limits: []int{5, 5}, Lease: time.Minute, Force: true, Borrow: c.borrow}
		counts := make([]int, c.counts)
		if req.Validate(counts) == nil {
			t.Fatalf("%s: Validate accepts it", c.name)
		}
		if taken, err := s.Acquire(t.Context(), req, counts); err == nil || taken {
			t.Errorf("%s: Acquire = %v, %v; want an error and nothing taken", c.name, taken, err)
		}
	}
	if got := storeCount(t, s, keys[0], keys[1], class); !slices.Equal(got, []int{0, 0, 0}) {
		t.Errorf("counts after the refused acquires = %v, want [0 0 0]", got)
	}
}
