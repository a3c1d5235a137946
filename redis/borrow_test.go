package redis_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/lanetest"
	"github.com/capgate/capgate/redis"
)

// TestBorrowArgs: a call without Borrow (nil, or every Key "") sends the
// ARGV tail and KEYS it did before lending (the seats only when one
// exceeds 1, no class key); with one, the seats (1 each by default), each
// lane's reserve, each lane's lend, then the number of lanes, and its
// class keys in lane order.
func TestBorrowArgs(t *testing.T) {
	none := []capgate.Borrow{{}, {}}
	lend := []capgate.Borrow{{}, {Key: "{p}:b:class", Reserve: 2, Lend: 1}}
	for _, c := range []struct {
		name   string
		seats  []int
		borrow []capgate.Borrow
		want   []any
		keys   []string
	}{
		{"none", nil, nil, []any{}, nil},
		{"1 seat each", []int{1, 1}, nil, []any{}, nil},
		{"seats", []int{2, 1}, nil, []any{2, 1}, nil},
		{"keys all empty", nil, none, []any{}, nil},
		{"keys all empty, seats", []int{1, 3}, none, []any{1, 3}, nil},
		{"lends", nil, lend, []any{1, 1, 0, 2, 0, 1, 2}, []string{"{p}:b:class"}},
		{"lends, seats", []int{3, 1}, lend, []any{3, 1, 0, 2, 0, 1, 2}, []string{"{p}:b:class"}},
	} {
		if got := redis.AppendBorrow([]any{}, c.seats, c.borrow, 2); !slices.Equal(got, c.want) {
			t.Errorf("%s: ARGV tail %v, want %v", c.name, got, c.want)
		}
		if got := redis.ClassKeys(c.borrow); !slices.Equal(got, c.keys) {
			t.Errorf("%s: class keys %v, want %v", c.name, got, c.keys)
		}
	}
}

// TestWaitTicketKeepsBorrowOnlyWhenSet: a queued ticket's JSON (P:wait:t)
// has b only when some lane lends it, so a ticket without Borrow is
// stored as before lending.
func TestWaitTicketKeepsBorrowOnlyWhenSet(t *testing.T) {
	t.Run("miniredis", func(t *testing.T) {
		_, h := openMini(t)
		testTicketBorrowStored(t, h)
	})
	t.Run("real Redis", func(t *testing.T) {
		testTicketBorrowStored(t, openHarness(t, redis.RealRedisURL(t)))
	})
}

func testTicketBorrowStored(t *testing.T, h harness) {
	p := lanetest.NewPrefix() + "ocl"
	shared, class := p+":api_heavy", p+":api_heavy:class:single"
	h.SetLease(t, shared, lanetest.NewToken(), time.Minute) // full at limit 1
	ticket := func(user string, borrow []capgate.Borrow) capgate.Ticket {
		return capgate.Ticket{Prefix: p, Token: lanetest.NewToken(), Keys: []string{shared, p + ":user:" + user},
			Limits: []int{1, 10}, UserID: user, UserLane: 2, Lease: time.Minute, TicketLease: time.Minute,
			Claim: 30 * time.Second, MaxWaiting: 10, MaxPerUser: 10, Borrow: borrow}
	}
	for _, c := range []struct {
		name   string
		borrow []capgate.Borrow
		want   any
	}{
		{"no Borrow", nil, nil},
		{"Borrow without keys", []capgate.Borrow{{}, {}}, nil},
		// Reserve 1 with the class holding 1: lends nothing, so it waits.
		{"Borrow", []capgate.Borrow{{Key: class, Reserve: 1, Lend: 1}, {}},
			[]any{[]any{class, 1.0, 1.0}, []any{"", 0.0, 0.0}}},
	} {
		h.SetLease(t, class, lanetest.NewToken(), time.Minute)
		tk := ticket(c.name, c.borrow)
		counts := make([]int, 3)
		if res, err := h.Join(t.Context(), tk, counts); err != nil || !res.Queued {
			t.Fatalf("%s: Join = %+v, %v; want queued", c.name, res, err)
		}
		raw, err := h.raw.HGet(t.Context(), p+":wait:t", tk.Token).Result()
		if err != nil {
			t.Fatal(err)
		}
		var stored map[string]any
		if err := json.Unmarshal([]byte(raw), &stored); err != nil {
			t.Fatal(err)
		}
		got, ok := stored["b"]
		if c.want == nil {
			if ok {
				t.Errorf("%s: the ticket keeps b = %v, want none: %s", c.name, got, raw)
			}
			continue
		}
		if b, _ := json.Marshal(got); string(b) != mustJSON(t, c.want) {
			t.Errorf("%s: the ticket keeps b = %s, want %s", c.name, b, mustJSON(t, c.want))
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
