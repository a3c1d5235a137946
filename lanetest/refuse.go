package lanetest

import (
	"math"
	"testing"
	"time"

	"github.com/capgate/capgate"
)

// storeTestRefusesBadRequests checks that the store refuses every
// request capgate.AcquireRequest.Validate refuses, and takes nothing for
// it: all stores refuse the same requests.
func storeTestRefusesBadRequests(t *testing.T, s Store) {
	keys := storeLanes(2)
	good := func() (capgate.AcquireRequest, []int) {
		return capgate.AcquireRequest{Token: NewToken(), Keys: keys, Limits: []int{5, 5}, Lease: time.Minute}, make([]int, 2)
	}
	cases := []struct {
		name string
		bad  func(*capgate.AcquireRequest, *[]int)
	}{
		{"no token", func(r *capgate.AcquireRequest, _ *[]int) { r.Token = "" }},
		{"no keys", func(r *capgate.AcquireRequest, _ *[]int) { r.Keys = nil }},
		{"a limit short", func(r *capgate.AcquireRequest, _ *[]int) { r.Limits = r.Limits[:1] }},
		{"a count short", func(_ *capgate.AcquireRequest, c *[]int) { *c = (*c)[:1] }},
		{"lease under 1ms", func(r *capgate.AcquireRequest, _ *[]int) { r.Lease = time.Microsecond }},
	}
	for _, c := range cases {
		req, counts := good()
		if err := req.Validate(counts); err != nil {
			t.Fatalf("the good request is refused: %v", err)
		}
		c.bad(&req, &counts)
		if req.Validate(counts) == nil {
			t.Fatalf("%s: Validate accepts it", c.name)
		}
		taken, err := s.Acquire(t.Context(), req, counts)
		if err == nil || taken {
			t.Errorf("%s: Acquire = %v, %v; want an error and nothing taken", c.name, taken, err)
		}
		if got := storeCount(t, s, keys...); got[0] != 0 || got[1] != 0 {
			t.Fatalf("%s: counts after the refused acquire %v; want [0 0]", c.name, got)
		}
	}
}

// waitTestRefusesBadTickets checks that Join and Pump refuse every ticket
// capgate.Ticket.Validate refuses, and Join one without room for its
// counts (ValidateJoin), queueing and taking nothing.
func waitTestRefusesBadTickets(t *testing.T, e *waitEnv) {
	cases := []struct {
		name string
		bad  func(*capgate.Ticket)
	}{
		{"no token", func(tk *capgate.Ticket) { tk.Token = "" }},
		{"no keys", func(tk *capgate.Ticket) { tk.Keys, tk.Limits = nil, nil }},
		{"a limit short", func(tk *capgate.Ticket) { tk.Limits = tk.Limits[:1] }},
		{"a limit under 1", func(tk *capgate.Ticket) { tk.Limits = []int{2, 0} }},
		{"lease under 1ms", func(tk *capgate.Ticket) { tk.Lease = time.Microsecond }},
		{"ticket lease under 1ms", func(tk *capgate.Ticket) { tk.TicketLease = 0 }},
		{"claim under 1ms", func(tk *capgate.Ticket) { tk.Claim = 0 }},
		{"seats past MaxSeats", func(tk *capgate.Ticket) { tk.Seats = []int{1, capgate.MaxSeats + 1} }},
		{"seats MaxInt", func(tk *capgate.Ticket) { tk.Seats = []int{math.MaxInt, 1} }},
	}
	for _, c := range cases {
		tk := e.ticket("a", 2)
		c.bad(&tk)
		if tk.Validate() == nil {
			t.Fatalf("%s: Validate accepts it", c.name)
		}
		if res, err := e.s.Join(t.Context(), tk, make([]int, 2)); err == nil || res.Taken || res.Queued {
			t.Errorf("%s: Join = %+v, %v; want an error, neither taken nor queued", c.name, res, err)
		}
		if res, err := e.s.Pump(t.Context(), tk); err == nil || res.Taken || res.Queued {
			t.Errorf("%s: Pump = %+v, %v; want an error", c.name, res, err)
		}
	}
	tk := e.ticket("a", 2)
	if tk.ValidateJoin(make([]int, 1)) == nil {
		t.Fatal("ValidateJoin accepts room for 1 of 2 counts")
	}
	if res, err := e.s.Join(t.Context(), tk, make([]int, 1)); err == nil || res.Taken || res.Queued {
		t.Errorf("Join with room for 1 of 2 counts = %+v, %v; want an error", res, err)
	}
	if got := e.waiting(e.shared); got[0] != 0 {
		t.Errorf("tickets waiting after the refused joins: %v; want none", got)
	}
	if m := e.s.Members(t, e.shared); len(m) != 0 {
		t.Errorf("leases after the refused joins: %v; want none", m)
	}
}
