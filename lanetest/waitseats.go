package lanetest

import (
	"slices"
	"testing"
	"time"

	"github.com/capgate/capgate"
)

// seatTicket is e.ticket with seats in each lane (shared, the user's).
func (e *waitEnv) seatTicket(user string, limit int, seats ...int) capgate.Ticket {
	tk := e.ticket(user, limit)
	tk.Seats = seats
	return tk
}

// waitTestSeatsFastPath: Join with nobody waiting is Acquire with seats:
// taken when every seat fits, queued when one doesn't.
func waitTestSeatsFastPath(t *testing.T, e *waitEnv) {
	e.hold(1)
	tk := e.seatTicket("a", 4, 3, 1)
	res, counts := e.join(tk)
	if !res.Taken || res.Queued || !slices.Equal(counts, []int{1, 0}) {
		t.Fatalf("Join of 3 seats with 1 of 4 held = %+v, counts %v; want taken, [1 0]", res, counts)
	}
	if got := storeCount(t, e.s, tk.Keys...); !slices.Equal(got, []int{4, 1}) {
		t.Errorf("counts after = %v, want [4 1]", got)
	}
	res, counts = e.join(e.seatTicket("b", 6, 3, 1))
	if res.Taken || !res.Queued || !slices.Equal(counts, []int{4, 0}) {
		t.Fatalf("Join of 3 seats with 4 of 6 held = %+v, counts %v; want queued, [4 0]", res, counts)
	}
}

// waitTestSeatsGrant: a ticket of 3 seats is granted only once all 3 fit;
// the grant holds every seat (its claim, then the lease once renewed),
// Leave after it reports it, and ReleaseWait frees every seat.
func waitTestSeatsGrant(t *testing.T, e *waitEnv) {
	held := e.hold(3) // 3 of 4: room for one seat
	tk := e.seatTicket("a", 4, 3, 1)
	res, counts := e.join(tk)
	if !res.Queued || res.Taken || !slices.Equal(counts, []int{3, 0}) {
		t.Fatalf("Join = %+v, counts %v; want queued, [3 0]", res, counts)
	}
	if res.Next <= 0 {
		t.Errorf("Join's Next = %v, want the earliest lease's expiry (the lane is full for 3 seats)", res.Next)
	}
	if res := e.pump(tk); !res.Queued || res.Next <= 0 {
		t.Errorf("Pump = %+v, want queued with Next > 0", res)
	}
	e.release(held[0]) // room for 2
	if got := e.granted(tk); got != nil {
		t.Fatalf("granted with room for 2 of its 3 seats")
	}
	e.release(held[1]) // room for 3
	storeWantMembers(t, e.s, e.shared, append(seatMembers(tk.Token, 3), held[2])...)
	storeWantMembers(t, e.s, tk.Keys[1], tk.Token)
	for _, m := range seatMembers(tk.Token, 3) {
		d, _ := e.s.Expiry(t, e.shared, m)
		storeWantBetween(t, "claim expiry of "+m, d, 0, tk.Claim)
	}
	if got := storeRenew(t, e.s, tk.Token, tk.Keys, time.Minute); got != 2 {
		t.Fatalf("picking the grant up: held %d, want 2", got)
	}
	for _, m := range seatMembers(tk.Token, 3) {
		d, _ := e.s.Expiry(t, e.shared, m)
		storeWantBetween(t, "renewed expiry of "+m, d, time.Minute-storeSlack, time.Minute)
	}
	if granted, err := e.s.Leave(t.Context(), tk); err != nil || !granted {
		t.Fatalf("Leave after the grant = %v, %v; want true", granted, err)
	}
	e.release(tk.Token, tk.Keys...)
	storeWantMembers(t, e.s, e.shared, held[2])
	storeWantGone(t, e.s, tk.Keys[1])
}

// waitTestSeatsPerLane: a ticket of 1 seat in shared and 3 in a model
// lane is granted only when both fit.
func waitTestSeatsPerLane(t *testing.T, e *waitEnv) {
	model := e.prefix + ":model:m"
	e.hold(1) // shared: 1 of 2
	tk := e.ticket("a", 2)
	tk.Keys = []string{e.shared, model, tk.Keys[1]}
	tk.Limits, tk.Seats, tk.UserLane = []int{2, 4, 10}, []int{1, 3, 1}, 3
	other := NewToken()
	e.s.SetLease(t, model, other, time.Minute)
	e.s.SetLease(t, model, NewToken(), time.Minute) // model: 2 of 4
	e.mustQueue(tk)
	e.release(other, model) // model: 1 of 4
	if got := e.granted(tk); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("granted %v, want [a]: 1 seat fits shared and 3 the model lane", got)
	}
	if got := storeCount(t, e.s, e.shared, model, tk.Keys[2]); !slices.Equal(got, []int{2, 4, 1}) {
		t.Errorf("counts = %v, want [2 4 1]", got)
	}
}

// waitTestFairInSeats: on a full lane, a user sending calls of 2 seats and
// one sending calls of 1 get about the same share of the seats.
func waitTestFairInSeats(t *testing.T, e *waitEnv) {
	type call struct {
		user  string
		token string
		keys  []string
		seats int
	}
	var held []call
	for _, tok := range e.hold(2) {
		held = append(held, call{token: tok, keys: []string{e.shared}})
	}
	tickets := map[string]call{}
	for range 12 {
		for _, tk := range []capgate.Ticket{e.seatTicket("a", 2, 2, 2), e.ticket("b", 2)} {
			e.mustQueue(tk)
			seats := 1
			if tk.Seats != nil {
				seats = tk.Seats[0]
			}
			tickets[tk.Token] = call{user: tk.UserID, token: tk.Token, keys: tk.Keys, seats: seats}
		}
	}
	got := map[string]int{}
	total := 0
	for total < 16 {
		if len(held) == 0 {
			t.Fatalf("nothing held, nothing granted: seats so far %v", got)
		}
		e.release(held[0].token, held[0].keys...)
		held = held[1:]
		for _, m := range e.s.Members(t, e.shared) {
			if c, ok := tickets[m]; ok {
				delete(tickets, m)
				held = append(held, c)
				got[c.user] += c.seats
				total += c.seats
			}
		}
	}
	if got["a"] < total/2-2 || got["a"] > total/2+2 {
		t.Errorf("seats granted %v of %d, want about half each (a sends 2-seat calls, b 1-seat calls)", got, total)
	}
}

// waitTestSeatsSetAside: a ticket of 3 seats at the head of the list is
// granted once 3 seats are free, though 1-seat tickets keep arriving behind
// it and each could have taken a seat as it freed; a call turned away from
// a full list takes none of them either.
func waitTestSeatsSetAside(t *testing.T, e *waitEnv) {
	held := e.hold(4) // 4 of 4
	big := e.seatTicket("a", 4, 3, 1)
	e.mustQueue(big)
	var small []capgate.Ticket
	for i, u := range []string{"b", "c"} {
		e.release(held[i]) // room for 1, then 2
		tk := e.ticket(u, 4)
		e.mustQueue(tk)
		small = append(small, tk)
		if got := e.granted(append(small, big)...); got != nil {
			t.Fatalf("with %d seats free, granted %v; want none: a's 3-seat ticket came first", i+1, got)
		}
		turned := e.ticket("d", 4)
		turned.MaxWaiting = 1
		if res, _ := e.join(turned); res.Taken || res.Queued {
			t.Fatalf("a call turned away from a full list = %+v, want neither taken nor queued", res)
		}
	}
	e.release(held[2]) // room for 3
	if got := e.granted(append(small, big)...); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("with 3 seats free, granted %v; want [a]", got)
	}
	e.release(held[3])
	if got := e.granted(small...); !slices.Equal(got, []string{"b"}) {
		t.Errorf("the next seat went to %v, want [b]", got)
	}
}

// waitTestOwnLaneSetsNothingAside: a ticket short of seats in its own user
// lane, blocked by a lane with no room at all, or whose seats exceed a
// lane's limit sets nothing aside: the 1-seat ticket behind it takes a
// free seat.
func waitTestOwnLaneSetsNothingAside(t *testing.T, e *waitEnv) {
	cases := []struct {
		name   string
		ticket func(e *waitEnv) capgate.Ticket
	}{
		{"its own lane", func(e *waitEnv) capgate.Ticket {
			tk := e.seatTicket("a", 4, 3, 3)
			tk.Limits[1] = 4
			e.s.SetLease(e.t, tk.Keys[1], NewToken(), time.Minute) // a's own lane: 2 of 4
			e.s.SetLease(e.t, tk.Keys[1], NewToken(), time.Minute)
			return tk
		}},
		{"a lane with no room", func(e *waitEnv) capgate.Ticket {
			tk := e.seatTicket("a", 4, 3, 1)
			model := e.prefix + ":model:m"
			tk.Keys = []string{e.shared, model, tk.Keys[1]}
			tk.Limits, tk.Seats, tk.UserLane = []int{4, 2, 10}, []int{3, 2, 1}, 3
			e.s.SetLease(e.t, model, NewToken(), time.Minute) // model: 2 of 2
			e.s.SetLease(e.t, model, NewToken(), time.Minute)
			return tk
		}},
		{"seats over its limit", func(e *waitEnv) capgate.Ticket {
			return e.seatTicket("a", 4, 5, 1)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := NewPrefix() + "ocl"
			e := &waitEnv{t: t, s: e.s, prefix: p, shared: p + ":api_heavy"}
			e.hold(2) // shared: 2 of 4
			big := c.ticket(e)
			e.mustQueue(big)
			// b holds as many seats in its own lane as a may: its ticket
			// comes after a's in fair order.
			small := e.ticket("b", 4)
			e.s.SetLease(t, small.Keys[1], NewToken(), time.Minute)
			e.s.SetLease(t, small.Keys[1], NewToken(), time.Minute)
			if res, _ := e.join(small); !res.Taken {
				t.Errorf("the 1-seat ticket behind = %+v, want taken: a's ticket sets nothing aside", res)
			}
			if got := e.granted(big); got != nil {
				t.Errorf("a's ticket granted")
			}
		})
	}
}

// waitTestRefusesBadSeats: Join and Pump refuse a ticket whose Seats are
// of the wrong length or hold a seat under 1 (capgate.Ticket.Validate).
func waitTestRefusesBadSeats(t *testing.T, e *waitEnv) {
	for _, seats := range [][]int{{2}, {1, 1, 1}, {0, 1}} {
		tk := e.seatTicket("a", 2, seats...)
		if tk.Validate() == nil {
			t.Fatalf("seats %v: Validate accepts them", seats)
		}
		if res, err := e.s.Join(t.Context(), tk, make([]int, 2)); err == nil || res.Taken || res.Queued {
			t.Errorf("seats %v: Join = %+v, %v; want an error", seats, res, err)
		}
		if res, err := e.s.Pump(t.Context(), tk); err == nil || res.Taken || res.Queued {
			t.Errorf("seats %v: Pump = %+v, %v; want an error", seats, res, err)
		}
	}
	if m := e.s.Members(t, e.shared); len(m) != 0 {
		t.Errorf("leases after the refused joins: %v; want none", m)
	}
}
