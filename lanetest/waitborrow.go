package lanetest

import (
	"slices"
	"testing"
	"time"

	"github.com/capgate/capgate"
)

// The waitlist cases of lending play api_heavy (shared) at 4 with 1 seat
// reserved for a class (single-row calls): a borrower (not of the class)
// has limit 3 there and may borrow the reserve's idle seat; a call of the
// class has limit 4 and takes its seats in the class key too.

// class is the class key of shared's reserve.
func (e *waitEnv) class() string { return e.shared + ":class:single" }

// borrowTicket is e.ticket with limit on shared and a Borrow there from
// the class key (reserve 1, lend 1).
func (e *waitEnv) borrowTicket(user string, limit int) capgate.Ticket {
	tk := e.ticket(user, limit)
	tk.Borrow = []capgate.Borrow{{Key: e.class(), Reserve: 1, Lend: 1}, {}}
	return tk
}

// classTicket is a ticket of the class: shared (limit), the class key and
// the user's own lane (its UserLane).
func (e *waitEnv) classTicket(user string, limit int) capgate.Ticket {
	tk := e.ticket(user, limit)
	tk.Keys = []string{e.shared, e.class(), tk.Keys[1]}
	tk.Limits, tk.UserLane = []int{limit, 10, 10}, 3
	return tk
}

// waitTestBorrowFastPath: Join with nobody waiting is Acquire with
// Borrow: it takes the reserve's idle seat, and the counts give the class
// key's after the lanes', on the fast path and queued alike.
func waitTestBorrowFastPath(t *testing.T, e *waitEnv) {
	e.hold(3)
	tk := e.borrowTicket("a", 3)
	res, counts := e.join(tk)
	if !res.Taken || res.Queued || !slices.Equal(counts, []int{3, 0, 0}) {
		t.Fatalf("Join of a borrower at 3 of 3, the reserve idle = %+v, counts %v; want taken, [3 0 0]", res, counts)
	}
	if d, ok := e.s.Expiry(t, e.shared, tk.Token); !ok || d <= time.Minute-storeSlack {
		t.Errorf("fast-path lease expires in %v (held %v), want the call's lease of 1m, not a grant's claim", d, ok)
	}
	storeWantGone(t, e.s, e.class())
	res, counts = e.join(e.borrowTicket("b", 3))
	if res.Taken || !res.Queued || !slices.Equal(counts, []int{4, 0, 0}) {
		t.Fatalf("Join of a borrower at 4 of 3+1 = %+v, counts %v; want queued, [4 0 0]", res, counts)
	}
	// Queued behind b's ticket (not the fast path): the same counts.
	e.s.SetLease(t, e.class(), NewToken(), time.Minute)
	res, counts = e.join(e.borrowTicket("c", 3))
	if res.Taken || !res.Queued || !slices.Equal(counts, []int{4, 0, 1}) {
		t.Fatalf("Join of a borrower behind a ticket = %+v, counts %v; want queued, [4 0 1]", res, counts)
	}
}

// waitTestBorrowGrant: with no call of the class waiting, a waiting
// borrower is granted the reserve's idle seat when a seat frees (the lane
// has room only for it with the borrowed seat); it takes nothing in the
// class key.
func waitTestBorrowGrant(t *testing.T, e *waitEnv) {
	held := e.hold(4)
	tk := e.borrowTicket("a", 3)
	e.mustQueue(tk)
	e.release(held[0]) // 3 of 3+1
	if got := e.granted(tk); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("granted %v with 3 held and the reserve idle, want [a]", got)
	}
	storeWantGone(t, e.s, e.class())
	if got := storeCount(t, e.s, e.shared); got[0] != 4 {
		t.Errorf("shared count = %d, want 4", got[0])
	}
}

// waitTestBorrowClassFirst: while a call of the class waits, nothing is
// lent: the seat that only a borrow could give the borrower (queued
// first) goes to the class's ticket. Once granted, the class's seat counts
// against the reserve: the borrower gets the next seat only when one frees
// under its own limit.
func waitTestBorrowClassFirst(t *testing.T, e *waitEnv) {
	held := e.hold(4)
	borrower := e.borrowTicket("b", 3)
	e.mustQueue(borrower)
	cls := e.classTicket("c", 4)
	e.mustQueue(cls)
	if got := e.waiting(e.shared, e.class()); !slices.Equal(got, []int{2, 1}) {
		t.Errorf("waiting = %v, want [2 1]", got)
	}
	e.release(held[0]) // 3 of 4
	if got := e.granted(borrower, cls); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("granted %v, want [c]: the class waits for its reserve, nothing is lent", got)
	}
	storeWantMembers(t, e.s, e.class(), cls.Token)
	e.release(held[1]) // 3 of 4, the class holding its 1 reserved
	if got := e.granted(borrower); got != nil {
		t.Fatalf("granted %v with 3 held, the class holding its reserve; want none", got)
	}
	e.release(held[2]) // 2 of 4
	if got := e.granted(borrower); !slices.Equal(got, []string{"b"}) {
		t.Errorf("granted %v with 2 held, want [b]", got)
	}
}

// waitTestBorrowOnlyWithBorrow: a ticket without Borrow is judged by its
// own limit as before; a borrower queued after it takes the idle reserve.
func waitTestBorrowOnlyWithBorrow(t *testing.T, e *waitEnv) {
	held := e.hold(4)
	plain := e.ticket("a", 3)
	e.mustQueue(plain)
	borrower := e.borrowTicket("b", 3)
	e.mustQueue(borrower)
	e.release(held[0]) // 3 of 3(+1)
	if got := e.granted(plain, borrower); !slices.Equal(got, []string{"b"}) {
		t.Errorf("granted %v, want [b]: a's ticket has no Borrow", got)
	}
}

// waitTestBorrowSetAside: a borrower of 2 seats, short only of seats with
// what it may borrow counted as room, sets the lane's free seats aside: a
// 1-seat borrower behind it does not take the borrowable seat, and the
// 2-seat one is granted once 2 fit.
func waitTestBorrowSetAside(t *testing.T, e *waitEnv) {
	held := e.hold(3) // 3 of 3+1
	big := e.borrowTicket("a", 3)
	big.Seats = []int{2, 1}
	e.mustQueue(big)
	small := e.borrowTicket("b", 3)
	e.mustQueue(small)
	if got := e.granted(big, small); got != nil {
		t.Fatalf("granted %v with 1 borrowable seat free; want none: a's 2-seat ticket came first", got)
	}
	e.release(held[0]) // 2 of 3+1
	if got := e.granted(big, small); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("granted %v with 2 seats free (1 borrowed), want [a]", got)
	}
	e.release(held[1]) // 3 of 3+1
	if got := e.granted(small); !slices.Equal(got, []string{"b"}) {
		t.Errorf("granted %v, want [b] on the borrowed seat", got)
	}
}

// waitTestBorrowPump: a borrower waits while the class holds its reserve;
// when that seat expires (nobody releases it), the next Pump grants it the
// borrowed seat.
func waitTestBorrowPump(t *testing.T, e *waitEnv) {
	e.hold(3)
	seat := NewToken()
	e.s.SetLease(t, e.class(), seat, time.Minute)
	tk := e.borrowTicket("a", 3)
	res, counts := e.join(tk)
	if !res.Queued || !slices.Equal(counts, []int{3, 0, 1}) {
		t.Fatalf("Join with the class holding its reserve = %+v, counts %v; want queued, [3 0 1]", res, counts)
	}
	if res := e.pump(tk); !res.Queued || res.Next <= 0 {
		t.Fatalf("Pump = %+v, want queued with Next > 0", res)
	}
	e.s.SetLease(t, e.class(), seat, -time.Millisecond)
	if res := e.pump(tk); !res.Taken {
		t.Fatalf("Pump after the class's seat expired = %+v, want taken on the borrowed seat", res)
	}
	storeWantGone(t, e.s, e.class())
}

// waitTestBorrowLimitZero: a ticket whose limit is 0 where the lane lends
// waits, and runs on a borrowed seat once one is free.
func waitTestBorrowLimitZero(t *testing.T, e *waitEnv) {
	held := e.hold(1)
	tk := e.borrowTicket("a", 0)
	e.mustQueue(tk)
	e.release(held[0])
	if got := e.granted(tk); !slices.Equal(got, []string{"a"}) {
		t.Errorf("granted %v on an empty lane lending 1, want [a]", got)
	}
}

// waitTestBorrowTurnedAway: a call turned away from a full list takes the
// reserve's idle seat when it fits with it.
func waitTestBorrowTurnedAway(t *testing.T, e *waitEnv) {
	e.hold(3)
	blocked := e.ticket("a", 4)
	blocked.Limits[1] = 1
	e.s.SetLease(t, blocked.Keys[1], NewToken(), time.Minute) // a's own lane is full
	e.mustQueue(blocked)
	tk := e.borrowTicket("b", 3)
	tk.MaxWaiting = 1
	res, counts := e.join(tk)
	if !res.Taken || !slices.Equal(counts, []int{3, 0, 0}) {
		t.Fatalf("a borrower turned away from a full list at 3 of 3+1 = %+v, counts %v; want taken, [3 0 0]", res, counts)
	}
}

// waitTestRefusesBadBorrow: Join and Pump refuse a ticket whose Borrow is
// malformed, a limit of 0 where the lane lends nothing, and Join one with
// no room for the class keys' counts (capgate.Ticket.Validate,
// ValidateJoin); nothing is taken or queued.
func waitTestRefusesBadBorrow(t *testing.T, e *waitEnv) {
	for _, c := range []struct {
		name   string
		borrow []capgate.Borrow
		limit  int
		counts int
	}{
		{"one for two keys", []capgate.Borrow{{Key: e.class(), Reserve: 1, Lend: 1}}, 3, 3},
		{"class key among the keys", []capgate.Borrow{{Key: e.shared, Reserve: 1, Lend: 1}, {}}, 3, 3},
		{"reserve 0", []capgate.Borrow{{Key: e.class(), Reserve: 0, Lend: 1}, {}}, 3, 3},
		{"lend over the reserve", []capgate.Borrow{{Key: e.class(), Reserve: 1, Lend: 2}, {}}, 3, 3},
		{"limit 0 lending nothing", []capgate.Borrow{{}, {}}, 0, 2},
		{"no room for the class count", []capgate.Borrow{{Key: e.class(), Reserve: 1, Lend: 1}, {}}, 3, 2},
	} {
		tk := e.ticket("a", c.limit)
		tk.Borrow = c.borrow
		if tk.ValidateJoin(make([]int, c.counts)) == nil {
			t.Fatalf("%s: ValidateJoin accepts it", c.name)
		}
		if res, err := e.s.Join(t.Context(), tk, make([]int, c.counts)); err == nil || res.Taken || res.Queued {
			t.Errorf("%s: Join = %+v, %v; want an error", c.name, res, err)
		}
		if tk.Validate() != nil {
			if res, err := e.s.Pump(t.Context(), tk); err == nil || res.Taken || res.Queued {
				t.Errorf("%s: Pump = %+v, %v; want an error", c.name, res, err)
			}
		}
	}
	if m := e.s.Members(t, e.shared); len(m) != 0 {
		t.Errorf("leases after the refused joins: %v; want none", m)
	}
	if got := e.waiting(e.shared); got[0] != 0 {
		t.Errorf("waiting after the refused joins = %d, want 0", got[0])
	}
}

// waitTestBorrowAfterClassGrant: a seat the pass grants a call of the
// class counts against the reserve for the tickets after it in the same
// pass: the borrower behind it borrows nothing.
func waitTestBorrowAfterClassGrant(t *testing.T, e *waitEnv) {
	held := e.hold(4)
	cls := e.classTicket("c", 4)
	e.mustQueue(cls)
	borrower := e.borrowTicket("b", 3)
	e.mustQueue(borrower)
	// Two seats free, one pass: c takes one (3 of 4, the reserve in use),
	// and b, at 3 of 3, may not borrow.
	if err := e.s.Release(t.Context(), held[0], []string{e.shared}); err != nil {
		t.Fatal(err)
	}
	e.release(held[1])
	if got := e.granted(cls, borrower); !slices.Equal(got, []string{"c"}) {
		t.Errorf("granted %v, want [c]: c's grant holds the reserve", got)
	}
}

// waitTestBorrowNext: a lane where the ticket fits with the seat it may
// borrow is not full for it: Next is the earliest lease of the lane that
// does block it (its own user lane here), by Join and by Pump.
func waitTestBorrowNext(t *testing.T, e *waitEnv) {
	for range 3 {
		e.s.SetLease(t, e.shared, NewToken(), 10*time.Second) // 3 of 3+1
	}
	tk := e.borrowTicket("a", 3)
	tk.Limits[1] = 1
	e.s.SetLease(t, tk.Keys[1], NewToken(), 40*time.Second) // a's own lane is full
	res, _ := e.join(tk)
	if !res.Queued {
		t.Fatalf("Join = %+v, want queued", res)
	}
	storeWantBetween(t, "Join's Next", res.Next, 40*time.Second-storeSlack, 40*time.Second)
	res = e.pump(tk)
	if !res.Queued {
		t.Fatalf("Pump = %+v, want queued", res)
	}
	storeWantBetween(t, "Pump's Next", res.Next, 40*time.Second-storeSlack, 40*time.Second)
}

// waitTestBorrowNoneWhileClassWaits: nothing is lent while a ticket
// waits on the class key, even to a Join that finds nobody waiting on its
// own lanes (its fast path).
func waitTestBorrowNoneWhileClassWaits(t *testing.T, e *waitEnv) {
	e.hold(3)
	cls := e.classTicket("c", 4)
	cls.Keys, cls.Limits, cls.UserLane = cls.Keys[1:], []int{10, 1}, 2 // the class key and c's own lane
	e.s.SetLease(t, cls.Keys[1], NewToken(), time.Minute)              // c's own lane is full
	e.mustQueue(cls)
	tk := e.borrowTicket("b", 3)
	if res, counts := e.join(tk); res.Taken || !slices.Equal(counts, []int{3, 0, 0}) {
		t.Fatalf("Join of a borrower at 3 of 3 while a class ticket waits = %+v, counts %v; want not taken, [3 0 0]", res, counts)
	}
	if _, err := e.s.Leave(t.Context(), cls); err != nil {
		t.Fatal(err)
	}
	if res := e.pump(tk); !res.Taken {
		t.Errorf("Pump of the borrower once the class ticket left = %+v, want taken", res)
	}
}
