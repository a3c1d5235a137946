package lanetest

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/repeat"
)

// RepeatStore is a lane store that keeps idempotency entries
// (repeat.Store), under test.
type RepeatStore interface {
	capgate.LaneStore
	repeat.Store
}

// RepeatFactory opens an empty RepeatStore for one test and registers its
// cleanup on t. advance moves the store's clock on (memory's Now,
// miniredis's time); nil for a store on a real clock (real Redis), whose
// expiry cases are then skipped.
type RepeatFactory func(t testing.TB) (s RepeatStore, advance func(time.Duration))

// RunRepeats runs the conformance suite of repeat.Store.
func RunRepeats(t *testing.T, open RepeatFactory) {
	tests := []struct {
		name string
		fn   func(t *testing.T, open RepeatFactory)
	}{
		{"ClaimJoinFinishReplay", testRepeatLifecycle},
		{"FinishWithoutAnswerLetsGo", testRepeatLetGo},
		{"OnlyTheOwnerTouchesAndFinishes", testRepeatOwner},
		{"AnswerBytesRoundTrip", testRepeatBytes},
		{"OneClaimWins", testRepeatOneClaim},
		{"TotalBound", testRepeatTotal},
		{"PerUserBound", testRepeatPerUser},
		{"Expiry", testRepeatExpiry},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, open) })
	}
}

// repeatID returns an id of its own for each test, so that runs on a
// shared Redis don't meet.
func repeatID() string { return NewToken() }

func entry(tok string) repeat.Entry {
	return repeat.Entry{Token: tok, CID: "cid-" + tok[:6], Fingerprint: "fp-1"}
}

func testRepeatLifecycle(t *testing.T, open RepeatFactory) {
	s, _ := open(t)
	ctx := t.Context()
	id, first, second := repeatID(), entry(NewToken()), entry(NewToken())
	if _, ok, err := s.ClaimRepeat(ctx, id, first, time.Minute, false); err != nil || !ok {
		t.Fatalf("first claim = %v, %v; want claimed", ok, err)
	}
	cur, ok, err := s.ClaimRepeat(ctx, id, second, time.Minute, false)
	if err != nil || ok || cur.Token != first.Token || cur.CID != first.CID || cur.Fingerprint != first.Fingerprint || cur.Answer != nil {
		t.Fatalf("second claim = %+v, %v, %v; want not claimed, the first's entry running", cur, ok, err)
	}
	// replaceFinished does not replace a call running.
	if cur, ok, err := s.ClaimRepeat(ctx, id, second, time.Minute, true); err != nil || ok || cur.Token != first.Token {
		t.Fatalf("claim replacing finished = %+v, %v, %v; want the running first's", cur, ok, err)
	}
	if e, ok, err := s.GetRepeat(ctx, id); err != nil || !ok || e.Token != first.Token || e.Answer != nil {
		t.Fatalf("get = %+v, %v, %v; want the first running", e, ok, err)
	}
	answer := []byte("200\nContent-Type: application/json\n\n{\"ok\":1}")
	if kept, err := s.FinishRepeat(ctx, id, first.Token, answer, time.Minute, repeat.Bound{Total: 1 << 20, PerUser: 1 << 20}); err != nil || !kept {
		t.Fatalf("finish = %v, %v; want kept", kept, err)
	}
	if e, ok, err := s.GetRepeat(ctx, id); err != nil || !ok || e.Token != first.Token || e.CID != first.CID || !bytes.Equal(e.Answer, answer) {
		t.Fatalf("get = %+v, %v, %v; want the kept answer", e, ok, err)
	}
	cur, ok, err = s.ClaimRepeat(ctx, id, second, time.Minute, false)
	if err != nil || ok || !bytes.Equal(cur.Answer, answer) || cur.CID != first.CID {
		t.Fatalf("claim after finish = %+v, %v, %v; want the kept answer", cur, ok, err)
	}
	// Mode auto: a finished call counts as none.
	if _, ok, err := s.ClaimRepeat(ctx, id, second, time.Minute, true); err != nil || !ok {
		t.Fatalf("claim replacing finished = %v, %v; want claimed", ok, err)
	}
	if e, _, _ := s.GetRepeat(ctx, id); e.Token != second.Token || e.Answer != nil {
		t.Fatalf("get = %+v; want the second running", e)
	}
}

func testRepeatLetGo(t *testing.T, open RepeatFactory) {
	s, _ := open(t)
	ctx := t.Context()
	id, first := repeatID(), entry(NewToken())
	if _, ok, err := s.ClaimRepeat(ctx, id, first, time.Minute, false); err != nil || !ok {
		t.Fatalf("claim = %v, %v", ok, err)
	}
	if kept, err := s.FinishRepeat(ctx, id, first.Token, nil, time.Minute, repeat.Bound{Total: 1 << 20, PerUser: 1 << 20}); err != nil || kept {
		t.Fatalf("finish with no answer = %v, %v; want not kept", kept, err)
	}
	if e, ok, err := s.GetRepeat(ctx, id); err != nil || ok {
		t.Fatalf("get = %+v, %v, %v; want none", e, ok, err)
	}
	if _, ok, err := s.ClaimRepeat(ctx, id, entry(NewToken()), time.Minute, false); err != nil || !ok {
		t.Fatalf("claim after let go = %v, %v; want claimed", ok, err)
	}
}

func testRepeatOwner(t *testing.T, open RepeatFactory) {
	s, _ := open(t)
	ctx := t.Context()
	id, first, other := repeatID(), entry(NewToken()), NewToken()
	if _, ok, err := s.ClaimRepeat(ctx, id, first, time.Minute, false); err != nil || !ok {
		t.Fatalf("claim = %v, %v", ok, err)
	}
	if ok, err := s.TouchRepeat(ctx, id, other, time.Minute); err != nil || ok {
		t.Fatalf("touch by another = %v, %v; want false", ok, err)
	}
	if kept, err := s.FinishRepeat(ctx, id, other, []byte("x"), time.Minute, repeat.Bound{Total: 1 << 20, PerUser: 1 << 20}); err != nil || kept {
		t.Fatalf("finish by another = %v, %v; want not kept", kept, err)
	}
	if kept, err := s.FinishRepeat(ctx, id, other, nil, time.Minute, repeat.Bound{Total: 1 << 20, PerUser: 1 << 20}); err != nil || kept {
		t.Fatalf("let go by another = %v, %v", kept, err)
	}
	if e, ok, _ := s.GetRepeat(ctx, id); !ok || e.Token != first.Token || e.Answer != nil {
		t.Fatalf("get = %+v, %v; want the first running, untouched by another", e, ok)
	}
	if ok, err := s.TouchRepeat(ctx, id, first.Token, time.Minute); err != nil || !ok {
		t.Fatalf("touch by the owner = %v, %v; want true", ok, err)
	}
	if ok, err := s.TouchRepeat(ctx, repeatID(), first.Token, time.Minute); err != nil || ok {
		t.Fatalf("touch of no entry = %v, %v; want false", ok, err)
	}
	if kept, err := s.FinishRepeat(ctx, id, first.Token, []byte("a"), time.Minute, repeat.Bound{Total: 1 << 20, PerUser: 1 << 20}); err != nil || !kept {
		t.Fatalf("finish = %v, %v", kept, err)
	}
	// Finished: neither touched nor finished again.
	if ok, err := s.TouchRepeat(ctx, id, first.Token, time.Minute); err != nil || ok {
		t.Fatalf("touch after finish = %v, %v; want false", ok, err)
	}
	if kept, err := s.FinishRepeat(ctx, id, first.Token, nil, time.Minute, repeat.Bound{Total: 1 << 20, PerUser: 1 << 20}); err != nil || kept {
		t.Fatalf("second finish = %v, %v", kept, err)
	}
	if e, _, _ := s.GetRepeat(ctx, id); string(e.Answer) != "a" {
		t.Fatalf("answer %q after a second finish; want it kept", e.Answer)
	}
}

func testRepeatBytes(t *testing.T, open RepeatFactory) {
	s, _ := open(t)
	ctx := t.Context()
	for _, answer := range [][]byte{{}, {0, 0xff, '\n', 0}, bytes.Repeat([]byte{0xfe, 0}, 40000)} {
		id, e := repeatID(), entry(NewToken())
		if _, ok, err := s.ClaimRepeat(ctx, id, e, time.Minute, false); err != nil || !ok {
			t.Fatalf("claim = %v, %v", ok, err)
		}
		if kept, err := s.FinishRepeat(ctx, id, e.Token, answer, time.Minute, repeat.Bound{Total: 1 << 20, PerUser: 1 << 20}); err != nil || !kept {
			t.Fatalf("finish = %v, %v", kept, err)
		}
		got, ok, err := s.GetRepeat(ctx, id)
		if err != nil || !ok || got.Answer == nil || !bytes.Equal(got.Answer, answer) {
			t.Fatalf("answer of %d bytes came back as %d bytes (nil %v), %v, %v", len(answer), len(got.Answer), got.Answer == nil, ok, err)
		}
	}
}

func testRepeatOneClaim(t *testing.T, open RepeatFactory) {
	s, _ := open(t)
	id := repeatID()
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for range 8 {
		wg.Go(func() {
			_, ok, err := s.ClaimRepeat(t.Context(), id, entry(NewToken()), time.Minute, false)
			if err != nil {
				t.Error(err)
			}
			if ok {
				mu.Lock()
				won++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if won != 1 {
		t.Fatalf("%d of 8 concurrent claims won; want 1", won)
	}
}

func testRepeatTotal(t *testing.T, open RepeatFactory) {
	s, advance := open(t)
	ctx := t.Context()
	const size = 3000
	answer := bytes.Repeat([]byte("a"), size)
	keep := func(id, tok string, max int64, d time.Duration) bool {
		t.Helper()
		if _, ok, err := s.ClaimRepeat(ctx, id, entry(tok), time.Minute, false); err != nil || !ok {
			t.Fatalf("claim = %v, %v", ok, err)
		}
		kept, err := s.FinishRepeat(ctx, id, tok, answer, d, repeat.Bound{Total: max, PerUser: max})
		if err != nil {
			t.Fatal(err)
		}
		return kept
	}
	idA, idB := repeatID(), repeatID()
	// No room at all: not kept, and the entry is let go.
	if keep(idA, NewToken(), size-1, time.Minute) {
		t.Fatal("an answer past the bound was kept")
	}
	if _, ok, _ := s.GetRepeat(ctx, idA); ok {
		t.Fatal("an answer not kept left its entry")
	}
	if advance == nil {
		return // the rest needs a store of its own: a shared Redis counts others' answers
	}
	if !keep(idA, NewToken(), 2*size-1, time.Minute) {
		t.Fatal("an answer within the bound was not kept")
	}
	if keep(idB, NewToken(), 2*size-1, time.Minute) {
		t.Fatal("a second answer past the bound of all kept answers was kept")
	}
	advance(time.Minute + time.Second)
	if !keep(idB, NewToken(), 2*size-1, time.Minute) {
		t.Fatal("an answer was not kept though the one before it expired")
	}
}

func testRepeatExpiry(t *testing.T, open RepeatFactory) {
	s, advance := open(t)
	if advance == nil {
		t.Skip("the store's clock can't be moved")
	}
	ctx := t.Context()
	id, first := repeatID(), entry(NewToken())
	if _, ok, err := s.ClaimRepeat(ctx, id, first, 10*time.Second, false); err != nil || !ok {
		t.Fatalf("claim = %v, %v", ok, err)
	}
	advance(6 * time.Second)
	if ok, err := s.TouchRepeat(ctx, id, first.Token, 10*time.Second); err != nil || !ok {
		t.Fatalf("touch = %v, %v", ok, err)
	}
	advance(6 * time.Second) // 12 s from the claim, 6 from the touch
	if _, ok, _ := s.GetRepeat(ctx, id); !ok {
		t.Fatal("a touched marker expired")
	}
	advance(5 * time.Second)
	if e, ok, _ := s.GetRepeat(ctx, id); ok {
		t.Fatalf("a marker not touched for its life is still there: %+v", e)
	}
	// A marker gone: the next call claims the key.
	second := entry(NewToken())
	if _, ok, err := s.ClaimRepeat(ctx, id, second, 10*time.Second, false); err != nil || !ok {
		t.Fatalf("claim after expiry = %v, %v", ok, err)
	}
	if kept, err := s.FinishRepeat(ctx, id, second.Token, []byte("x"), 30*time.Second, repeat.Bound{Total: 1 << 20, PerUser: 1 << 20}); err != nil || !kept {
		t.Fatalf("finish = %v, %v", kept, err)
	}
	advance(29 * time.Second)
	if e, ok, _ := s.GetRepeat(ctx, id); !ok || string(e.Answer) != "x" {
		t.Fatalf("the answer expired before its time: %+v, %v", e, ok)
	}
	advance(2 * time.Second)
	if _, ok, _ := s.GetRepeat(ctx, id); ok {
		t.Fatal("the answer outlived its keep")
	}
}

// testRepeatPerUser: one user's kept answers are bounded apart from the
// total: past its bound its next answer is not kept, while another
// user's still is.
func testRepeatPerUser(t *testing.T, open RepeatFactory) {
	s, _ := open(t)
	ctx := t.Context()
	const size = 1000
	answer := bytes.Repeat([]byte("a"), size)
	// Tags of their own per run, so runs on a shared Redis don't meet.
	userA, userB := NewToken(), NewToken()
	keep := func(user string) bool {
		t.Helper()
		id, tok := repeatID(), NewToken()
		e := entry(tok)
		e.User = user
		if _, ok, err := s.ClaimRepeat(ctx, id, e, time.Minute, false); err != nil || !ok {
			t.Fatalf("claim = %v, %v", ok, err)
		}
		kept, err := s.FinishRepeat(ctx, id, tok, answer, time.Minute, repeat.Bound{User: user, Total: 100 * size, PerUser: 3 * size})
		if err != nil {
			t.Fatal(err)
		}
		return kept
	}
	for i := range 3 {
		if !keep(userA) {
			t.Fatalf("answer %d of user A, within its bound, not kept", i+1)
		}
	}
	if keep(userA) {
		t.Fatal("a fourth answer of user A, past its bound of three, was kept")
	}
	if !keep(userB) {
		t.Fatal("user B's answer was not kept: user A's filled the store for everyone")
	}
}
