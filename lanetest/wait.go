package lanetest

import (
	"slices"
	"testing"
	"time"

	"github.com/capgate/capgate"
)

// WaitStore is a lane store with a waitlist under test, with one more
// control to reach behind its API.
type WaitStore interface {
	Store
	capgate.Waitlist
	// SetTicketExpiry sets the expiry of token's ticket under prefix to
	// the store's now + d (negative: already expired).
	SetTicketExpiry(t testing.TB, prefix, token string, d time.Duration)
}

// WaitFactory opens an empty WaitStore for one test and registers its
// cleanup on t.
type WaitFactory func(t testing.TB) WaitStore

// RunWaitlist runs the capgate.Waitlist conformance suite: fair order,
// bounds, leaving, expiry and wake-ups, each on a store from open under a
// fresh random prefix.
func RunWaitlist(t *testing.T, open WaitFactory) {
	tests := []struct {
		name string
		fn   func(*testing.T, *waitEnv)
	}{
		{"JoinWithNobodyWaitingIsAcquire", waitTestFastPath},
		{"RoundRobinAcrossUsers", waitTestRoundRobin},
		{"SlotsHeldCountAsTurns", waitTestSlotsHeldCountAsTurns},
		{"FIFOWithinUser", waitTestFIFO},
		{"UserWhoLeftJoinsTheCurrentRound", waitTestLeftRejoins},
		{"NewArrivalNeverOvertakes", waitTestNoOvertaking},
		{"BlockedByOwnLaneHoldsUpNobody", waitTestBackfill},
		{"SingleRowReserveHoldsWhileBulkWaits", waitTestReserve},
		{"MaxWaitingInAll", waitTestMaxWaiting},
		{"MaxWaitingPerUser", waitTestMaxPerUser},
		{"FullListDropsTheLongestQueue", waitTestLongestQueueDrop},
		{"LeaveBeforeGrant", waitTestLeave},
		{"LeaveAfterGrant", waitTestLeaveGranted},
		{"ExpiredTicketIsDropped", waitTestTicketExpiry},
		{"UnclaimedGrantFreesAfterClaim", waitTestUnclaimed},
		{"ExpiryFreedSlotReachesWaiter", waitTestExpiryFreed},
		{"ReleaseWakesTheWaiter", waitTestWake},
		{"WaitingCountsPerLane", waitTestWaitingCounts},
		{"PumpRaisesTheTicketsLimits", waitTestRaisedLimit},
		{"PumpLowersTheTicketsLimits", waitTestLoweredLimit},
		{"RefusesBadTickets", waitTestRefusesBadTickets},
		{"JoinWithNobodyWaitingTakesSeats", waitTestSeatsFastPath},
		{"GrantsEverySeatOrNone", waitTestSeatsGrant},
		{"SeatsDifferByLane", waitTestSeatsPerLane},
		{"FairInSeats", waitTestFairInSeats},
		{"ManySeatsSetFreeSeatsAside", waitTestSeatsSetAside},
		{"OwnLaneOrNoRoomSetsNothingAside", waitTestOwnLaneSetsNothingAside},
		{"RefusesBadSeats", waitTestRefusesBadSeats},
		{"JoinWithNobodyWaitingBorrows", waitTestBorrowFastPath},
		{"GrantedOnABorrowedSeat", waitTestBorrowGrant},
		{"WaitingClassGetsItsReserveFirst", waitTestBorrowClassFirst},
		{"TicketWithoutBorrowBorrowsNothing", waitTestBorrowOnlyWithBorrow},
		{"BorrowerSetsItsBorrowableSeatsAside", waitTestBorrowSetAside},
		{"PumpBorrowsOnceTheClassSeatExpires", waitTestBorrowPump},
		{"LimitZeroWaitsForABorrowedSeat", waitTestBorrowLimitZero},
		{"TurnedAwayCallBorrows", waitTestBorrowTurnedAway},
		{"ClassGrantedInThePassHoldsTheReserve", waitTestBorrowAfterClassGrant},
		{"NextCountsTheBorrowableSeat", waitTestBorrowNext},
		{"NothingLentWhileTheClassWaits", waitTestBorrowNoneWhileClassWaits},
		{"RefusesBadBorrow", waitTestRefusesBadBorrow},
		{"FairInWork", waitTestFairWork},
		{"FairInWorkLeftGivesBack", waitTestFairWorkLeftGivesBack},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := open(t)
			p := NewPrefix() + "ocl"
			tt.fn(t, &waitEnv{t: t, s: s, prefix: p, shared: p + ":api_heavy"})
		})
	}
}

// waitEnv is one waitlist test: a store and a prefix whose lane shared
// plays api_heavy.
type waitEnv struct {
	t      *testing.T
	s      WaitStore
	prefix string
	shared string
}

// ticket returns a ticket of user on shared (limit) and the user's own
// lane (limit 10), its UserLane.
func (e *waitEnv) ticket(user string, limit int) capgate.Ticket {
	return capgate.Ticket{
		Prefix: e.prefix, Token: NewToken(),
		Keys: []string{e.shared, e.prefix + ":user:" + user}, Limits: []int{limit, 10},
		UserID: user, UserLane: 2, Lease: time.Minute, TicketLease: time.Minute, Claim: 30 * time.Second,
		MaxWaiting: 100, MaxPerUser: 50,
	}
}

// join joins t and returns the result and the counts before (the lanes',
// then its class keys').
func (e *waitEnv) join(t capgate.Ticket) (capgate.JoinResult, []int) {
	e.t.Helper()
	n := len(t.Keys)
	for _, b := range t.Borrow {
		if b.Key != "" {
			n++
		}
	}
	counts := make([]int, n)
	res, err := e.s.Join(e.t.Context(), t, counts)
	if err != nil {
		e.t.Fatalf("Join: %v", err)
	}
	return res, counts
}

// mustQueue joins t and fails unless it was queued.
func (e *waitEnv) mustQueue(t capgate.Ticket) {
	e.t.Helper()
	if res, _ := e.join(t); !res.Queued || res.Taken {
		e.t.Fatalf("Join(%s) = %+v, want queued", t.UserID, res)
	}
}

// hold fills shared with n leases of other calls and returns their tokens.
func (e *waitEnv) hold(n int) []string {
	toks := make([]string, n)
	for i := range toks {
		toks[i] = NewToken()
		e.s.SetLease(e.t, e.shared, toks[i], time.Minute)
	}
	return toks
}

func (e *waitEnv) release(token string, keys ...string) {
	e.t.Helper()
	if len(keys) == 0 {
		keys = []string{e.shared}
	}
	if err := e.s.ReleaseWait(e.t.Context(), e.prefix, token, keys, capgate.Charge{}); err != nil {
		e.t.Fatalf("ReleaseWait: %v", err)
	}
}

// granted returns which of tickets hold a lease in shared.
func (e *waitEnv) granted(tickets ...capgate.Ticket) []string {
	e.t.Helper()
	members := e.s.Members(e.t, e.shared)
	var out []string
	for _, tk := range tickets {
		if slices.Contains(members, tk.Token) {
			out = append(out, tk.UserID)
		}
	}
	return out
}

func (e *waitEnv) pump(t capgate.Ticket) capgate.JoinResult {
	e.t.Helper()
	res, err := e.s.Pump(e.t.Context(), t)
	if err != nil {
		e.t.Fatalf("Pump: %v", err)
	}
	return res
}

func (e *waitEnv) waiting(keys ...string) []int {
	e.t.Helper()
	counts := make([]int, len(keys))
	if err := e.s.Waiting(e.t.Context(), e.prefix, keys, counts); err != nil {
		e.t.Fatalf("Waiting: %v", err)
	}
	return counts
}

func waitTestFastPath(t *testing.T, e *waitEnv) {
	e.hold(1)
	tk := e.ticket("a", 2)
	res, counts := e.join(tk)
	if !res.Taken || res.Queued || !slices.Equal(counts, []int{1, 0}) {
		t.Fatalf("Join = %+v, counts %v; want taken, [1 0]", res, counts)
	}
	if d, ok := e.s.Expiry(t, e.shared, tk.Token); !ok || d <= time.Minute-storeSlack {
		t.Errorf("fast-path lease expires in %v (held %v), want the call's lease of 1m", d, ok)
	}
	// Full, nobody waiting: queued with the counts before.
	res, counts = e.join(e.ticket("b", 2))
	if res.Taken || !res.Queued || !slices.Equal(counts, []int{2, 0}) {
		t.Fatalf("Join on a full lane = %+v, counts %v; want queued, [2 0]", res, counts)
	}
}

func waitTestRoundRobin(t *testing.T, e *waitEnv) {
	held := e.hold(1)
	var as []capgate.Ticket
	for range 10 {
		tk := e.ticket("a", 1)
		e.mustQueue(tk)
		as = append(as, tk)
	}
	b := e.ticket("b", 1)
	e.mustQueue(b)

	user := map[string]string{b.Token: "b"}
	for _, tk := range as {
		user[tk.Token] = "a"
	}
	var order []string
	prev := held[0]
	for range 3 {
		e.release(prev)
		members := e.s.Members(t, e.shared)
		if len(members) != 1 {
			t.Fatalf("after a release, shared holds %v, want exactly one grant", members)
		}
		order = append(order, user[members[0]])
		prev = members[0]
	}
	if want := []string{"a", "b", "a"}; !slices.Equal(order, want) {
		t.Errorf("slots went to %v, want %v (b's one call takes the 2nd slot, not the 11th)", order, want)
	}
}

// waitTestSlotsHeldCountAsTurns: a takes both slots at once, before
// anyone waits, then queues a third call just before b queues its first.
// The freed slot goes to b: a's two calls in flight were its turns.
func waitTestSlotsHeldCountAsTurns(t *testing.T, e *waitEnv) {
	var mine []capgate.Ticket
	for range 2 {
		tk := e.ticket("a", 2)
		if res, _ := e.join(tk); !res.Taken {
			t.Fatalf("a's call with room = %+v, want taken at once", res)
		}
		mine = append(mine, tk)
	}
	third := e.ticket("a", 2)
	e.mustQueue(third)
	b := e.ticket("b", 2)
	e.mustQueue(b)
	e.release(mine[0].Token, mine[0].Keys...)
	if got := e.granted(third, b); !slices.Equal(got, []string{"b"}) {
		t.Errorf("the freed slot went to %v, want b's call (a already held two)", got)
	}
}

func waitTestFIFO(t *testing.T, e *waitEnv) {
	held := e.hold(1)
	var as []capgate.Ticket
	for range 4 {
		tk := e.ticket("a", 1)
		e.mustQueue(tk)
		as = append(as, tk)
	}
	prev := held[0]
	for i, tk := range as {
		e.release(prev)
		members := e.s.Members(t, e.shared)
		if !slices.Equal(members, []string{tk.Token}) {
			t.Fatalf("slot %d went to %v, want a's ticket %d", i+1, members, i+1)
		}
		prev = tk.Token
	}
}

func waitTestLeftRejoins(t *testing.T, e *waitEnv) {
	held := e.hold(1)
	// a queues 5 calls and abandons them all; b has 3 waiting.
	for range 5 {
		tk := e.ticket("a", 1)
		e.mustQueue(tk)
		if granted, err := e.s.Leave(t.Context(), tk); err != nil || granted {
			t.Fatalf("Leave = %v, %v", granted, err)
		}
	}
	user := map[string]string{}
	for range 3 {
		tk := e.ticket("b", 1)
		e.mustQueue(tk)
		user[tk.Token] = "b"
	}
	back := e.ticket("a", 1)
	e.mustQueue(back)
	user[back.Token] = "a"
	var order []string
	prev := held[0]
	for range 2 {
		e.release(prev)
		members := e.s.Members(t, e.shared)
		if len(members) != 1 {
			t.Fatalf("shared holds %v, want one grant", members)
		}
		order = append(order, user[members[0]])
		prev = members[0]
	}
	if want := []string{"b", "a"}; !slices.Equal(order, want) {
		t.Errorf("slots went to %v, want %v: a's abandoned calls must not push its new one back", order, want)
	}
}

func waitTestNoOvertaking(t *testing.T, e *waitEnv) {
	held := e.hold(1)
	first := e.ticket("a", 1)
	e.mustQueue(first)
	// The slot frees without a pass (a plain release, as another
	// gateway's old binary would do); the next arrival must queue
	// behind the waiting ticket, and the pass it runs serves that one.
	if err := e.s.Release(t.Context(), held[0], []string{e.shared}); err != nil {
		t.Fatal(err)
	}
	late := e.ticket("b", 1)
	res, _ := e.join(late)
	if res.Taken {
		t.Fatal("a new arrival took the slot a waiting ticket was owed")
	}
	if got := e.granted(first, late); !slices.Equal(got, []string{"a"}) {
		t.Errorf("granted %v, want [a]", got)
	}
	if !res.Queued {
		t.Errorf("the new arrival was not queued: %+v", res)
	}
}

func waitTestBackfill(t *testing.T, e *waitEnv) {
	e.hold(1) // shared: 1 of 3
	blocked := e.ticket("a", 3)
	blocked.Limits[1] = 1
	e.s.SetLease(t, blocked.Keys[1], NewToken(), time.Minute) // a's own lane is full
	e.mustQueue(blocked)
	other := e.ticket("b", 3)
	if res, _ := e.join(other); !res.Taken {
		t.Fatalf("Join(b) = %+v, want taken: a's ticket waits only for its own lane", res)
	}
}

func waitTestReserve(t *testing.T, e *waitEnv) {
	// Cluster 2, one reserved for single-row calls: bulk limit 1.
	e.hold(1)
	bulk := e.ticket("a", 1)
	e.mustQueue(bulk)
	single := e.ticket("b", 2)
	if res, _ := e.join(single); !res.Taken {
		t.Fatalf("single-row Join = %+v, want taken (the reserve is free)", res)
	}
	e.release(single.Token, single.Keys...)
	if got := e.granted(bulk); got != nil {
		t.Errorf("bulk ticket granted %v with 1 of its limit 1 in use", got)
	}
	if got := storeCount(t, e.s, e.shared); got[0] != 1 {
		t.Errorf("shared count = %d, want 1", got[0])
	}
}

func waitTestMaxWaiting(t *testing.T, e *waitEnv) {
	held := e.hold(1)
	var queued []capgate.Ticket
	for _, u := range []string{"a", "b"} {
		tk := e.ticket(u, 1)
		tk.MaxWaiting = 2
		e.mustQueue(tk)
		queued = append(queued, tk)
	}
	tk := e.ticket("c", 1)
	tk.MaxWaiting = 2
	res, counts := e.join(tk)
	if res.Taken || res.Queued || counts[0] != 1 {
		t.Fatalf("third Join with max 2 = %+v, counts %v; want neither taken nor queued, count 1", res, counts)
	}
	if got := e.waiting(e.shared); got[0] != 2 {
		t.Errorf("waiting = %d, want 2", got[0])
	}
	// A slot freed by expiry (no pass ran) goes to the first waiting
	// ticket, not to a call turned away from the full list.
	e.s.SetLease(t, e.shared, held[0], -time.Millisecond)
	late := e.ticket("d", 1)
	late.MaxWaiting = 2
	if res, _ := e.join(late); res.Taken || res.Queued {
		t.Errorf("Join on a full list after an expiry = %+v, want neither: a's ticket is owed the slot", res)
	}
	if got := e.granted(append(queued, late)...); !slices.Equal(got, []string{"a"}) {
		t.Errorf("granted %v, want [a]", got)
	}
}

// waitTestLongestQueueDrop: on a full list, a user with fewer tickets
// still gets a place: the newest ticket of the user holding the most is
// dropped (its next pump says so, once), until every user holds about as
// many; the fair order of the rest is kept.
func waitTestLongestQueueDrop(t *testing.T, e *waitEnv) {
	held := e.hold(1)
	ticket := func(user string) capgate.Ticket {
		tk := e.ticket(user, 1)
		tk.MaxWaiting = 4
		return tk
	}
	a := []capgate.Ticket{ticket("a"), ticket("a"), ticket("a")}
	b := ticket("b")
	for _, tk := range append(slices.Clone(a), b) {
		e.mustQueue(tk)
	}
	// a holds 3 of 4: a third user's ticket and the holder's own are
	// handled differently.
	if res, _ := e.join(ticket("a")); res.Queued || res.Taken || res.Dropped {
		t.Fatalf("a 4th ticket of the user holding the most = %+v, want not queued", res)
	}
	c := ticket("c")
	e.mustQueue(c)
	if res := e.pump(a[2]); !res.Dropped || res.Queued || res.Taken {
		t.Fatalf("pump of a's newest ticket after c joined = %+v, want dropped", res)
	}
	if res := e.pump(a[2]); res.Dropped || res.Queued || res.Taken {
		t.Errorf("second pump of the dropped ticket = %+v, want neither (the mark is read once)", res)
	}
	if res := e.pump(a[1]); !res.Queued {
		t.Errorf("a's other ticket = %+v, want still queued", res)
	}
	d := ticket("d")
	e.mustQueue(d) // a holds 2 > 0+1: its newest goes
	if res := e.pump(a[1]); !res.Dropped {
		t.Errorf("a's second ticket after d joined = %+v, want dropped", res)
	}
	// Now a, b, c, d hold one each: nobody holds more than a newcomer + 1.
	if res, _ := e.join(ticket("f")); res.Queued || res.Taken {
		t.Errorf("Join on a full list of one ticket each = %+v, want not queued", res)
	}
	if got := e.waiting(e.shared); got[0] != 4 {
		t.Errorf("waiting = %d, want 4", got[0])
	}
	// The fair order of the rest holds: a's first ticket is served first.
	e.release(held[0])
	if got := e.granted(a[0], b, c, d); !slices.Equal(got, []string{"a"}) {
		t.Errorf("granted %v, want [a]", got)
	}
}

func waitTestMaxPerUser(t *testing.T, e *waitEnv) {
	e.hold(1)
	a1 := e.ticket("a", 1)
	a1.MaxPerUser = 1
	e.mustQueue(a1)
	a2 := e.ticket("a", 1)
	a2.MaxPerUser = 1
	if res, _ := e.join(a2); res.Taken || res.Queued {
		t.Fatalf("a's second Join with max 1 per user = %+v, want not queued", res)
	}
	b := e.ticket("b", 1)
	b.MaxPerUser = 1
	e.mustQueue(b)
}

func waitTestLeave(t *testing.T, e *waitEnv) {
	held := e.hold(1)
	tk := e.ticket("a", 1)
	e.mustQueue(tk)
	granted, err := e.s.Leave(t.Context(), tk)
	if err != nil || granted {
		t.Fatalf("Leave = %v, %v; want false, nil", granted, err)
	}
	if got := e.waiting(tk.Keys...); !slices.Equal(got, []int{0, 0}) {
		t.Errorf("waiting after Leave = %v, want [0 0]", got)
	}
	e.release(held[0])
	if got := e.granted(tk); got != nil {
		t.Errorf("a ticket that left was granted")
	}
	if res := e.pump(tk); res.Taken || res.Queued {
		t.Errorf("Pump after Leave = %+v, want neither", res)
	}
}

func waitTestLeaveGranted(t *testing.T, e *waitEnv) {
	held := e.hold(1)
	tk := e.ticket("a", 1)
	e.mustQueue(tk)
	e.release(held[0]) // the grant races the leave, and wins
	granted, err := e.s.Leave(t.Context(), tk)
	if err != nil || !granted {
		t.Fatalf("Leave after a grant = %v, %v; want true, nil", granted, err)
	}
	storeWantMembers(t, e.s, e.shared, tk.Token)
}

func waitTestTicketExpiry(t *testing.T, e *waitEnv) {
	held := e.hold(1)
	dead, live := e.ticket("a", 1), e.ticket("b", 1)
	e.mustQueue(dead)
	e.mustQueue(live)
	e.s.SetTicketExpiry(t, e.prefix, dead.Token, -time.Millisecond)
	e.release(held[0])
	if got := e.granted(dead, live); !slices.Equal(got, []string{"b"}) {
		t.Errorf("granted %v, want [b]: a's ticket expired", got)
	}
	if got := e.waiting(e.shared); got[0] != 0 {
		t.Errorf("waiting = %d, want 0", got[0])
	}
}

func waitTestUnclaimed(t *testing.T, e *waitEnv) {
	held := e.hold(1)
	gone, next := e.ticket("a", 1), e.ticket("b", 1)
	gone.Claim = 2 * time.Second
	e.mustQueue(gone)
	e.mustQueue(next)
	e.release(held[0])
	d, ok := e.s.Expiry(t, e.shared, gone.Token)
	if !ok {
		t.Fatal("a's ticket was not granted")
	}
	storeWantBetween(t, "grant expiry", d, 0, 2*time.Second)
	// Nobody picks the grant up: it expires, and the next pump serves b.
	e.s.SetLease(t, e.shared, gone.Token, -time.Millisecond)
	if res := e.pump(next); !res.Taken {
		t.Fatalf("Pump after the grant expired = %+v, want taken", res)
	}
}

func waitTestExpiryFreed(t *testing.T, e *waitEnv) {
	e.s.SetLease(t, e.shared, NewToken(), 40*time.Second)
	dead := NewToken()
	e.s.SetLease(t, e.shared, dead, 20*time.Second)
	tk := e.ticket("a", 2)
	res, _ := e.join(tk)
	if !res.Queued {
		t.Fatalf("Join = %+v, want queued", res)
	}
	storeWantBetween(t, "Next", res.Next, 20*time.Second-storeSlack, 20*time.Second)
	e.s.SetLease(t, e.shared, dead, -time.Millisecond) // a dead gateway's lease expires
	if res := e.pump(tk); !res.Taken {
		t.Fatalf("Pump after a lease expired = %+v, want taken", res)
	}
}

func waitTestWake(t *testing.T, e *waitEnv) {
	held := e.hold(1)
	tk := e.ticket("a", 1)
	wake, stop, err := e.s.Watch(t.Context(), tk.Prefix, tk.Token)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	e.mustQueue(tk)
	e.release(held[0])
	timer := time.NewTimer(10 * time.Second) // a bound, not a pause
	defer timer.Stop()
	select {
	case <-wake:
	case <-timer.C:
		t.Fatal("no wake-up within 10s of the release")
	}
	if held, err := e.s.Renew(t.Context(), tk.Token, tk.Keys, time.Minute); err != nil || held != 2 {
		t.Errorf("picking the grant up: held %d, %v; want 2", held, err)
	}
}

func waitTestWaitingCounts(t *testing.T, e *waitEnv) {
	held := e.hold(1)
	a, b := e.ticket("a", 1), e.ticket("b", 1)
	e.mustQueue(a)
	e.mustQueue(b)
	if got := e.waiting(e.shared, a.Keys[1], b.Keys[1], e.prefix+":user:c"); !slices.Equal(got, []int{2, 1, 1, 0}) {
		t.Errorf("waiting = %v, want [2 1 1 0]", got)
	}
	e.release(held[0])
	if got := e.waiting(e.shared, a.Keys[1]); !slices.Equal(got, []int{1, 0}) {
		t.Errorf("waiting after a grant = %v, want [1 0]", got)
	}
}

// waitTestRaisedLimit: a ticket is judged by the limits its latest Pump
// with NewLimits carries (the limits in force), not those it joined with.
// Raised, it is granted by that pump, with nobody releasing; a ticket whose
// pumps carried no change keeps its own, whatever Limits they hold.
func waitTestRaisedLimit(t *testing.T, e *waitEnv) {
	e.hold(1)
	a, b := e.ticket("a", 1), e.ticket("b", 1)
	e.mustQueue(a)
	e.mustQueue(b)
	a.Limits = []int{2, 10} // not sent: no NewLimits
	if res := e.pump(a); !res.Queued || res.Taken {
		t.Fatalf("Pump of a with Limits 2 but no NewLimits = %+v, want queued: its ticket keeps limit 1", res)
	}
	a.Limits = []int{1, 10}
	b.Limits, b.NewLimits = []int{2, 10}, true
	if res := e.pump(b); !res.Taken || res.Queued {
		t.Fatalf("Pump with the shared limit raised to 2 (1 held) = %+v, want taken", res)
	}
	if got := e.granted(a, b); !slices.Equal(got, []string{"b"}) {
		t.Errorf("granted %v, want [b]: a's ticket still has limit 1", got)
	}
	if res := e.pump(a); !res.Queued || res.Taken {
		t.Errorf("Pump of a at limit 1 = %+v, want queued", res)
	}
}

// waitTestLoweredLimit: a pump that lowers a ticket's limit holds it to
// the new limit: a release that frees a slot under the old limit but not
// under the new one grants nothing.
func waitTestLoweredLimit(t *testing.T, e *waitEnv) {
	held := e.hold(2)
	tk := e.ticket("a", 2)
	e.mustQueue(tk)
	tk.Limits, tk.NewLimits = []int{1, 10}, true
	if res := e.pump(tk); !res.Queued || res.Taken {
		t.Fatalf("Pump with the limit lowered to 1 = %+v, want queued", res)
	}
	e.release(held[0])
	if got := e.granted(tk); got != nil {
		t.Fatalf("granted %v with 1 held and the limit lowered to 1, want none", got)
	}
	if got := e.waiting(e.shared); got[0] != 1 {
		t.Errorf("waiting = %d, want 1", got[0])
	}
	e.release(held[1])
	if got := e.granted(tk); !slices.Equal(got, []string{"a"}) {
		t.Errorf("granted %v once the lane is empty, want [a]", got)
	}
}
