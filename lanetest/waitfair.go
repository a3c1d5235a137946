package lanetest

import (
	"slices"
	"testing"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/settings"
)

// Fair work (capgate.Waitlist): the cases of RunWaitlist where a call's
// turn costs the work its call did, charged by ReleaseWait. They charge by
// usage, whose costs the caller gives, so no case depends on time.

// fairTicket is e.ticket charged by fair.
func (e *waitEnv) fairTicket(user string, fair settings.FairBy) capgate.Ticket {
	t := e.ticket(user, 1)
	t.Fair = fair
	return t
}

// chargeRelease releases token's call, charging its user cost.
func (e *waitEnv) chargeRelease(token, user string, cost int64) {
	e.t.Helper()
	if err := e.s.ReleaseWait(e.t.Context(), e.prefix, token, []string{e.shared, e.prefix + ":user:" + user},
		capgate.Charge{User: user, Cost: cost}); err != nil {
		e.t.Fatalf("ReleaseWait: %v", err)
	}
}

// waitTestFairWork: a's call cost 100× b's; both then queue again, a
// first. By usage the slot goes to b's (a was charged more); by calls, to
// a's (each had one turn), as before fairness by work.
func waitTestFairWork(t *testing.T, e *waitEnv) {
	for _, c := range []struct {
		fair settings.FairBy
		want string
	}{{settings.FairUsage, "b"}, {settings.FairCalls, "a"}} {
		e.prefix = NewPrefix() + "ocl"
		e.shared = e.prefix + ":api_heavy"
		h := e.fairTicket("h", c.fair)
		if res, _ := e.join(h); !res.Taken {
			t.Fatalf("%v: holder's Join = %+v, want taken", c.fair, res)
		}
		a1, b1 := e.fairTicket("a", c.fair), e.fairTicket("b", c.fair)
		e.mustQueue(a1)
		e.mustQueue(b1)
		e.chargeRelease(h.Token, "h", 5)
		if got := e.granted(a1, b1); !slices.Equal(got, []string{"a"}) {
			t.Fatalf("%v: after the holder's release, granted %v, want [a]", c.fair, got)
		}
		e.chargeRelease(a1.Token, "a", 1000)
		if got := e.granted(a1, b1); !slices.Equal(got, []string{"b"}) {
			t.Fatalf("%v: after a's release, granted %v, want [b]", c.fair, got)
		}
		a2, b2 := e.fairTicket("a", c.fair), e.fairTicket("b", c.fair)
		e.mustQueue(a2)
		e.mustQueue(b2)
		e.chargeRelease(b1.Token, "b", 10)
		if got := e.granted(a2, b2); !slices.Equal(got, []string{c.want}) {
			t.Errorf("%v: a charged 1000, b 10, a queued first: granted %v, want [%s]", c.fair, got, c.want)
		}
	}
}

// waitTestFairWorkLeftGivesBack: a ticket that leaves unserved gives back
// the estimate its join charged: a user whose calls left is not pushed
// behind for them.
func waitTestFairWorkLeftGivesBack(t *testing.T, e *waitEnv) {
	h := e.fairTicket("h", settings.FairUsage)
	if res, _ := e.join(h); !res.Taken {
		t.Fatalf("holder's Join = %+v, want taken", res)
	}
	// Every estimate is 1000 from here (the last cost charged).
	e.chargeRelease(h.Token, "h", 1000)
	h2 := e.fairTicket("h", settings.FairUsage)
	if res, _ := e.join(h2); !res.Taken {
		t.Fatalf("holder's second Join = %+v, want taken", res)
	}
	a1 := e.fairTicket("a", settings.FairUsage)
	e.mustQueue(a1)
	var gone []capgate.Ticket
	for range 3 {
		tk := e.fairTicket("a", settings.FairUsage)
		e.mustQueue(tk)
		gone = append(gone, tk)
	}
	b1 := e.fairTicket("b", settings.FairUsage)
	e.mustQueue(b1)
	for _, tk := range gone {
		if granted, err := e.s.Leave(t.Context(), tk); err != nil || granted {
			t.Fatalf("Leave = %v, %v; want not granted", granted, err)
		}
	}
	// With its estimates given back a's tag is 1000 (a1's alone), as
	// b's next: a2, queued first, goes first; without, it would be 4000.
	a2, b2 := e.fairTicket("a", settings.FairUsage), e.fairTicket("b", settings.FairUsage)
	e.mustQueue(a2)
	e.mustQueue(b2)
	e.chargeRelease(h2.Token, "h", 1000)
	if got := e.granted(a1, b1); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("granted %v, want [a] (a1 and b1 both joined at 0, a1 first)", got)
	}
	e.chargeRelease(a1.Token, "a", 1000)
	e.chargeRelease(b1.Token, "b", 1000)
	if got := e.granted(a2, b2); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("granted %v, want [a] (the estimates of a's tickets that left were given back)", got)
	}
}
