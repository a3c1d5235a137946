package idempotency_test

import (
	"context"
	"errors"
	"testing"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/idempotency"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/mock"
	"github.com/capgate/capgate/settings"
)

// repeatGate returns a gate over store, in shadow with idempotency mode
// key (mutate changes the config), and its process's Repeater.
func repeatGate(t *testing.T, store capgate.LaneStore, mutate func(*settings.Config)) (*capgate.Gate, *idempotency.Repeater) {
	t.Helper()
	cfg := settings.Default(nil, settings.ModeShadow)
	cfg.Idempotency.Mode = settings.IdempotencyKey
	if mutate != nil {
		mutate(&cfg)
	}
	g, err := capgate.NewGate(store, settings.NewFixed(cfg), nil, "task-1")
	if err != nil {
		t.Fatal(err)
	}
	return g, idempotency.New(g)
}

func TestRepeatOutcomes(t *testing.T) {
	_, rep := repeatGate(t, memory.New(nil), nil)
	ctx := t.Context()
	req := idempotency.RepeatRequest{ID: "id", Fingerprint: "fp", CID: "c1", Replay: true}
	first, err := rep.Repeat(ctx, req)
	if err != nil || first.Outcome != idempotency.RepeatFirst {
		t.Fatalf("first = %+v, %v", first, err)
	}
	other := req
	other.Fingerprint = "fp2"
	if r, err := rep.Repeat(ctx, other); err != nil || r.Outcome != idempotency.RepeatReused {
		t.Fatalf("other request = %+v, %v; want reused", r, err)
	}
	// A repeat of the call running waits, and gets its answer.
	joined := make(chan *idempotency.Repeat, 1)
	go func() {
		r, err := rep.Repeat(ctx, idempotency.RepeatRequest{ID: "id", Fingerprint: "fp", CID: "c2", Replay: true})
		if err != nil {
			t.Error(err)
		}
		joined <- r
	}()
	// Finishing before the repeat asked is fine too: it is then replayed.
	if !first.Finish(ctx, []byte("ans")) {
		t.Fatal("answer not kept")
	}
	r := <-joined
	if (r.Outcome != idempotency.RepeatJoined && r.Outcome != idempotency.RepeatReplayed) || r.Of != "c1" || string(r.Answer) != "ans" {
		t.Fatalf("repeat = %+v", r)
	}
	if first.Finish(ctx, nil) {
		t.Fatal("a second Finish kept something")
	}
}

// An answer past max_answer_kib is not kept, and the key is let go.
func TestRepeatAnswerTooLarge(t *testing.T) {
	_, rep := repeatGate(t, memory.New(nil), func(c *settings.Config) { c.Idempotency.MaxAnswerKiB = 1 })
	ctx := t.Context()
	req := idempotency.RepeatRequest{ID: "id", Fingerprint: "fp", Replay: true}
	first, _ := rep.Repeat(ctx, req)
	if first.Finish(ctx, make([]byte, 1025)) {
		t.Fatal("an answer past the bound was kept")
	}
	if r, err := rep.Repeat(ctx, req); err != nil || r.Outcome != idempotency.RepeatFirst {
		t.Fatalf("after = %+v, %v; want the next call to run", r, err)
	}
}

// A repeat leaves at once when its caller does.
func TestRepeatWaitBounds(t *testing.T) {
	_, rep := repeatGate(t, memory.New(nil), nil)
	ctx := t.Context()
	req := idempotency.RepeatRequest{ID: "id", Fingerprint: "fp", Replay: true}
	first, _ := rep.Repeat(ctx, req)
	defer first.Finish(ctx, nil)
	gone, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := rep.Repeat(gone, req); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v; want the caller's", err)
	}
}

// A store that keeps no idempotency entries: the call runs, and says why.
func TestRepeatFailsOpen(t *testing.T) {
	_, rep := repeatGate(t, &mock.LaneStore{Base: memory.New(nil), CapsFn: func() capgate.StoreCaps { return capgate.StoreCaps{} }}, nil)
	if _, err := rep.Repeat(t.Context(), idempotency.RepeatRequest{ID: "id"}); !errors.Is(err, idempotency.ErrNoRepeatStore) {
		t.Fatalf("err %v; want ErrNoRepeatStore", err)
	}
}

// TestRepeatPeek: a Peek repeat of a call running is returned at once,
// joined, with the call's cid; its Wait ends when that call finishes (or
// its ctx ends), and a call after it runs.
func TestRepeatPeek(t *testing.T) {
	_, rep := repeatGate(t, memory.New(nil), nil)
	ctx := t.Context()
	req := idempotency.RepeatRequest{ID: "id", Fingerprint: "fp", CID: "c1", Peek: true}
	first, err := rep.Repeat(ctx, req)
	if err != nil || first.Outcome != idempotency.RepeatFirst {
		t.Fatalf("first = %+v, %v", first, err)
	}
	peek := req
	peek.CID = "c2"
	r, err := rep.Repeat(ctx, peek)
	if err != nil || r.Outcome != idempotency.RepeatJoined || r.Of != "c1" || r.Answer != nil {
		t.Fatalf("peek = %+v, %v; want joined c1 at once, no answer", r, err)
	}
	gone, cancel := context.WithCancel(ctx)
	cancel()
	if err := r.Wait(gone); err == nil || !errors.Is(err, context.Canceled) {
		t.Errorf("Wait with its ctx done = %v, want context.Canceled", err)
	}
	waited := make(chan error, 1)
	go func() { waited <- r.Wait(ctx) }()
	first.Finish(ctx, nil)
	if err := <-waited; err != nil {
		t.Errorf("Wait after the first finished = %v, want nil", err)
	}
	if again, err := rep.Repeat(ctx, peek); err != nil || again.Outcome != idempotency.RepeatFirst {
		t.Errorf("after the first finished = %+v, %v; want first", again, err)
	} else {
		again.Finish(ctx, nil)
	}
	if err := first.Wait(ctx); err != nil {
		t.Errorf("Wait of a first call = %v, want nil at once", err)
	}
}
