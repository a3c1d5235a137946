package idempotency_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/idempotency"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/settings"
)

// Silent traps Repeat refuses (the root's traps_test.go has the gate's).

// A repeat request with no id would join any other call with none, a
// different caller's: Repeat refuses it.
func TestRepeatRefusesAnEmptyID(t *testing.T) {
	cfg := settings.Default(nil, settings.ModeShadow)
	cfg.Idempotency.Mode = settings.IdempotencyKey
	g, err := capgate.NewGate(memory.New(nil), settings.NewFixed(cfg), nil, "task-a")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rep := idempotency.New(g)
	first, err := rep.Repeat(ctx, idempotency.RepeatRequest{CID: "alice's", Fingerprint: "fp"})
	if !errors.Is(err, idempotency.ErrNoRepeatID) {
		t.Fatalf("Repeat(no id) = %+v, %v; want ErrNoRepeatID", first, err)
	}
	if r, err := rep.Repeat(ctx, idempotency.RepeatRequest{CID: "bob's", Fingerprint: "fp", Peek: true}); !errors.Is(err, idempotency.ErrNoRepeatID) {
		t.Fatalf("a second Repeat(no id) = %+v, %v; want ErrNoRepeatID, not joined to the first", r, err)
	}
}

// Under the zero config Repeat returns the config's error: no claim with
// a lease of 0, no ticker of period 0 (a panic swallowed).
func TestRepeatUnderAZeroConfig(t *testing.T) {
	g, err := capgate.NewGate(memory.New(nil), settings.NewFixed(settings.Config{}), nil, "task-a")
	if err != nil {
		t.Fatal(err)
	}
	r, err := idempotency.New(g).Repeat(context.Background(), idempotency.RepeatRequest{ID: "id", CID: "c1", Fingerprint: "fp"})
	if err == nil || r != nil || !strings.Contains(err.Error(), "config") {
		t.Fatalf("Repeat under the zero config = %+v, %v; want an error naming the config", r, err)
	}
}

// A nil Repeater (a front door given none: capgatehttp.WithRepeater(nil),
// decide.Server{Repeater: nil}) is idempotency off, never a panic: Mode
// is off whatever the config says, and Repeat claims nothing.
func TestANilRepeaterIsOff(t *testing.T) {
	var rep *idempotency.Repeater
	if m := rep.Mode(t.Context()).Mode; m != settings.IdempotencyOff {
		t.Fatalf("a nil Repeater's mode = %q, want off", m)
	}
	if r, err := rep.Repeat(t.Context(), idempotency.RepeatRequest{ID: "id", Fingerprint: "fp"}); r != nil || !errors.Is(err, idempotency.ErrNoRepeatStore) {
		t.Fatalf("a nil Repeater's Repeat = %+v, %v; want ErrNoRepeatStore", r, err)
	}
	if r, err := rep.Repeat(t.Context(), idempotency.RepeatRequest{Fingerprint: "fp"}); !errors.Is(err, idempotency.ErrNoRepeatID) {
		t.Fatalf("a nil Repeater's Repeat with no id = %+v, %v; want ErrNoRepeatID", r, err)
	}
}
