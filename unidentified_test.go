package capgate_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/lanetest"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/mock"
	"github.com/capgate/capgate/settings"
)

// A call whose caller could not be identified is counted in the gateway's
// own lane "(unidentified)" under the unidentified limit, never passed
// uncounted, and never asks the store.
func TestUnidentifiedCallsShareOneLocalLane(t *testing.T) {
	ctx := context.Background()
	cfg := settings.Default(nil, settings.ModeEnforce)
	cfg.EnforceFor = settings.EnforceAll
	var asked atomic.Int32
	store := &mock.LaneStore{Base: memory.New(nil), AcquireFn: func(context.Context, capgate.AcquireRequest, []int) (bool, error) {
		asked.Add(1)
		return false, errors.New("the store must not be asked")
	}}
	sink := &mock.Sink{}
	g, err := capgate.NewGate(store, settings.NewFixed(cfg), sink, "t1")
	if err != nil {
		t.Fatal(err)
	}
	g.Local = memory.New(nil)
	defer g.Close(ctx)
	call := lanetest.OCLCall("match", 2, true, false, "pam", "core")
	cause := errors.New("identity: timeout")

	first := g.AdmitWith(ctx, call, capgate.AdmitOptions{Unidentified: cause})
	if first.Outcome().Decision != capgate.DecisionUnavailable || !first.Outcome().Degraded || !first.Outcome().Counted {
		t.Fatalf("first: %s degraded %v counted %v; want unavailable, degraded, counted", first.Outcome().Decision, first.Outcome().Degraded, first.Outcome().Counted)
	}
	if c := first.Outcome().Call; c.UserID != capgate.UnidentifiedUser || c.Tier != "preview" {
		t.Errorf("call %+v; want user %q, tier preview", c, capgate.UnidentifiedUser)
	}
	second := g.AdmitWith(ctx, call, capgate.AdmitOptions{Unidentified: cause})
	if second.Outcome().Decision != capgate.DecisionRefused || second.Outcome().Scope != capgate.LaneName("user") {
		t.Errorf("second at limit 1: %s scope %q; want refused, scope user", second.Outcome().Decision, second.Outcome().Scope)
	}
	second.Release(ctx)
	first.Release(ctx)
	third := g.AdmitWith(ctx, call, capgate.AdmitOptions{Unidentified: cause})
	if third.Outcome().Decision == capgate.DecisionRefused || !third.Outcome().Counted {
		t.Errorf("after the release: %s; want a place", third.Outcome().Decision)
	}
	third.Release(ctx)
	if n := asked.Load(); n != 0 {
		t.Errorf("the store was asked %d times", n)
	}
	lines := sink.All(t)
	if len(lines) != 3 || lines[0]["user_id"] != capgate.UnidentifiedUser || lines[0]["error"] != "identity: timeout" {
		t.Errorf("log lines %v", lines)
	}

	// Shadow counts and never refuses; off passes untouched.
	cfg.Mode = settings.ModeShadow
	cfg.Unidentified = 0
	g.Source = settings.NewFixed(cfg)
	if a := g.AdmitWith(ctx, call, capgate.AdmitOptions{Unidentified: cause}); a.Outcome().Decision == capgate.DecisionRefused || !a.Outcome().Counted {
		t.Errorf("shadow: %s counted %v", a.Outcome().Decision, a.Outcome().Counted)
	} else {
		a.Release(ctx)
	}
	cfg.Mode = settings.ModeOff
	g.Source = settings.NewFixed(cfg)
	if a := g.AdmitWith(ctx, call, capgate.AdmitOptions{Unidentified: cause}); a.Outcome().Decision != capgate.DecisionNone {
		t.Errorf("off: %s", a.Outcome().Decision)
	}
}

// Without local lanes, a store in this process counts the call itself;
// with neither, an enforced call is refused.
func TestUnidentifiedWithoutLocalLanes(t *testing.T) {
	ctx := context.Background()
	cfg := settings.Default(nil, settings.ModeEnforce)
	cfg.EnforceFor = settings.EnforceAll
	call := lanetest.OCLCall("rerank", 1, false, false, "pam", "core")
	g, err := capgate.NewGate(memory.New(nil), settings.NewFixed(cfg), nil, "t1")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(ctx)
	first := g.AdmitWith(ctx, call, capgate.AdmitOptions{Unidentified: errors.New("timeout")})
	if first.Outcome().Decision != capgate.DecisionAdmitted || !first.Outcome().Counted {
		t.Errorf("in-process store: %s counted %v; want admitted, counted", first.Outcome().Decision, first.Outcome().Counted)
	}
	if second := g.AdmitWith(ctx, call, capgate.AdmitOptions{Unidentified: errors.New("timeout")}); second.Outcome().Decision != capgate.DecisionRefused {
		t.Errorf("second: %s; want refused", second.Outcome().Decision)
	}
	first.Release(ctx)

	g2, err := capgate.NewGate(&mock.LaneStore{Base: memory.New(nil), CapsFn: func() capgate.StoreCaps { return capgate.StoreCaps{} }}, settings.NewFixed(cfg), nil, "t1")
	if err != nil {
		t.Fatal(err)
	}
	defer g2.Close(ctx)
	if a := g2.AdmitWith(ctx, call, capgate.AdmitOptions{Unidentified: errors.New("timeout")}); a.Outcome().Decision != capgate.DecisionRefused || a.Outcome().Counted {
		t.Errorf("nothing to count in: %s counted %v; want refused", a.Outcome().Decision, a.Outcome().Counted)
	}
}
