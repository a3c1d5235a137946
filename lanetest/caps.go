package lanetest

import (
	"bytes"
	"testing"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/tune"
)

// storeTestCaps checks that what the store declares (Caps) is what it
// does: one set every time, a deadline only when bounded, and each part
// it declares working on the store's own lanes and state. The gate reads
// a store's parts only from this set, so a wrong set is a bug: a part
// left out is never used, and a part declared that fails fails every call
// that needs it.
func storeTestCaps(t *testing.T, s Store) {
	ctx := t.Context()
	c := s.Caps()
	if again := s.Caps(); again != c {
		t.Fatalf("Caps() = %+v, then %+v: want one set", c, again)
	}
	if c.Deadline < 0 || !c.Bounded && c.Deadline != 0 {
		t.Errorf("Caps() deadline %v, bounded %v: want 0 or more, and 0 when unbounded", c.Deadline, c.Bounded)
	}
	if c.KeyPrefix != "" {
		// The gate lays out its keys under the store's prefix: the store
		// takes them.
		keys := []string{c.KeyPrefix + "caps:" + NewToken()[:8]}
		tok := NewToken()
		if taken, _ := storeAcquire(t, s, tok, keys, []int{1}, time.Minute, false); !taken {
			t.Fatalf("acquire under the declared key prefix %q: not taken", c.KeyPrefix)
		}
		storeRelease(t, s, tok, keys...)
	}
	if wl := c.Waitlist; wl != nil {
		// A call taken through the waitlist holds a lease in the store's
		// lanes, and its release frees it.
		p := NewPrefix() + "caps"
		keys := []string{p + ":lane"}
		tk := capgate.Ticket{Prefix: p, Token: NewToken(), Keys: keys, Limits: []int{1}, UserID: "u",
			Lease: time.Minute, TicketLease: time.Minute, Claim: 30 * time.Second, MaxWaiting: 10, MaxPerUser: 10}
		res, err := wl.Join(ctx, tk, make([]int, 1))
		if err != nil || !res.Taken {
			t.Fatalf("declared waitlist: Join on a free lane = %+v, %v; want taken", res, err)
		}
		if got := storeCount(t, s, keys...); got[0] != 1 {
			t.Fatalf("declared waitlist: after a Join taken the lane counts %d, want 1 (the store's own lanes)", got[0])
		}
		if err := wl.ReleaseWait(ctx, p, tk.Token, keys, capgate.Charge{}); err != nil {
			t.Fatalf("declared waitlist: ReleaseWait: %v", err)
		}
		if got := storeCount(t, s, keys...); got[0] != 0 {
			t.Errorf("declared waitlist: after ReleaseWait the lane counts %d, want 0", got[0])
		}
	}
	if st := c.Idempotency; st != nil {
		id, e := repeatID(), entry(NewToken())
		if _, ok, err := st.ClaimRepeat(ctx, id, e, time.Minute, false); err != nil || !ok {
			t.Fatalf("declared idempotency store: first claim = %v, %v; want claimed", ok, err)
		}
		if got, ok, err := st.GetRepeat(ctx, id); err != nil || !ok || got.Token != e.Token {
			t.Fatalf("declared idempotency store: GetRepeat = %+v, %v, %v; want the claim's entry", got, ok, err)
		}
	}
	if ts := c.Adaptive; ts != nil {
		key, state := NewPrefix()+"caps:tune", []byte("state-1")
		if err := ts.TuneSave(ctx, key, state); err != nil {
			t.Fatalf("declared adaptive state: TuneSave: %v", err)
		}
		r, err := ts.TuneExchange(ctx, key, tune.Window{Calls: 1}, time.Hour)
		if err != nil || !bytes.Equal(r.State, state) {
			t.Fatalf("declared adaptive state: TuneExchange = %+v, %v; want the state saved", r, err)
		}
	}
}
