package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/configtest"
	"github.com/capgate/capgate/idempotency"
	"github.com/capgate/capgate/lanetest"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/repeat"
	"github.com/capgate/capgate/settings"
)

// slowRepeats is a memory store whose idempotency claims block until their
// ctx ends: a store that answers too slowly.
type slowRepeats struct{ *memory.Store }

// Caps declares the store itself as the idempotency store, and a deadline
// that bounds each store operation, the claims too.
func (s slowRepeats) Caps() capgate.StoreCaps {
	c := s.Store.Caps()
	c.Idempotency, c.Deadline, c.Bounded = s, time.Millisecond, true
	return c
}

func (s slowRepeats) ClaimRepeat(ctx context.Context, id string, e repeat.Entry, ttl time.Duration, replace bool) (repeat.Entry, bool, error) {
	<-ctx.Done()
	return repeat.Entry{}, false, fmt.Errorf("claim repeat: %w", ctx.Err())
}

// Idempotency can only turn deduplication off, never limiting: a full
// idempotency store fails the claim of the call that finds it full (it
// runs without deduplication), but the lane store's skip window stays
// shut, so every call is still gated.
func TestRepeatStoreFullLeavesLimitingOn(t *testing.T) {
	g, rep := repeatGate(t, memory.New(nil), enforceOne(t))
	ctx := t.Context()
	// Many users, each within its own bound, fill the store with kept
	// answers.
	for i := range memory.MaxRepeatEntries {
		r, err := rep.Repeat(ctx, idempotency.RepeatRequest{ID: fmt.Sprint("id", i), User: fmt.Sprint("u", i%1000), Fingerprint: "fp", Replay: true})
		if err != nil {
			t.Fatalf("claim %d: %v", i, err)
		}
		r.Finish(ctx, []byte("400"))
	}
	_, err := rep.Repeat(ctx, idempotency.RepeatRequest{ID: "one-more", User: "u1", Fingerprint: "fp", Replay: true})
	if err == nil {
		t.Fatal("a claim on a full store succeeded")
	}
	if g.Skipping() {
		t.Fatal("a full idempotency store opened the lane store's skip window: limiting is off for everyone")
	}
	// Still gated: a user at its limit is refused.
	assertGated(t, g)
}

// One user can't fill the store for the others: past its share of the
// entries its own claims fail (it runs without deduplication), while
// another user's are still deduplicated.
func TestRepeatStorePerUser(t *testing.T) {
	g, rep := repeatGate(t, memory.New(nil), enforceOne(t))
	ctx := t.Context()
	claim := func(user string, i int) error {
		r, err := rep.Repeat(ctx, idempotency.RepeatRequest{ID: fmt.Sprint(user, i), User: user, Fingerprint: "fp", Replay: true})
		if err == nil {
			r.Finish(ctx, []byte("400"))
		}
		return err
	}
	for i := range memory.MaxRepeatEntriesPerUser {
		if err := claim("hog", i); err != nil {
			t.Fatalf("claim %d of the hog, within its share: %v", i, err)
		}
	}
	if err := claim("hog", -1); err == nil {
		t.Fatal("a claim past the hog's share succeeded")
	}
	if err := claim("other", 0); err != nil {
		t.Fatalf("another user's claim failed: %v", err)
	}
	if g.Skipping() {
		t.Fatal("the skip window opened")
	}
}

// A slow idempotency store costs the call its deduplication only after
// the store's deadline, and leaves the skip window shut.
func TestRepeatStoreSlowLeavesLimitingOn(t *testing.T) {
	g, rep := repeatGate(t, slowRepeats{memory.New(nil)}, enforceOne(t))
	_, err := rep.Repeat(t.Context(), idempotency.RepeatRequest{ID: "id", Fingerprint: "fp", Replay: true})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v; want the store's deadline", err)
	}
	if g.Skipping() {
		t.Fatal("a slow idempotency store opened the lane store's skip window")
	}
	assertGated(t, g)
}

// assertGated checks that g still enforces: calls of one user past the
// user's limit are refused.
func assertGated(t *testing.T, g *capgate.Gate) {
	t.Helper()
	ctx := t.Context()
	var held []*capgate.Admission
	defer func() {
		for _, a := range held {
			a.Release(ctx)
		}
	}()
	for i := range 50 {
		a := g.Admit(ctx, coreCall(fmt.Sprint("c", i)))
		held = append(held, a)
		if a.Outcome().Decision == capgate.DecisionRefused {
			return
		}
		if a.Outcome().Decision == capgate.DecisionUnavailable {
			t.Fatalf("call %d ran %s: uncounted", i, a.Outcome().Decision)
		}
	}
	t.Fatal("50 calls of one user all ran: not gated")
}

// enforceOne enforces a limit of one core call per user, refused at once.
func enforceOne(t *testing.T) func(*settings.Config) {
	return func(c *settings.Config) {
		c.Mode, c.EnforceFor, c.Wait.MaxSeconds = settings.ModeEnforce, settings.EnforceAll, 0
		configtest.SetNumbers(t, c, "per_user.core", 1)
	}
}

// coreCall is a core call of one row of cora's: its user lane is
// per_user.core.
func coreCall(cid string) capgate.Call {
	c := lanetest.OCLCall("match", 1, true, false, "cora", "core")
	c.CID = cid
	return c
}
