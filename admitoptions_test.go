package capgate_test

import (
	"context"
	"testing"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/configtest"
	"github.com/capgate/capgate/lanetest"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/mock"
	"github.com/capgate/capgate/settings"
)

// optionsGate is a gate over in-process lanes in enforce for every call,
// core users at one call, waiting on (30 s).
func optionsGate(t *testing.T) (*capgate.Gate, *mock.Sink) {
	t.Helper()
	c := settings.Default(nil, settings.ModeEnforce)
	c.EnforceFor, c.Wait.MaxSeconds = settings.EnforceAll, 30
	configtest.SetNumbers(t, &c, "per_user.core", 1)
	sink := &mock.Sink{}
	g, err := capgate.NewGate(memory.New(nil), settings.NewFixed(c), sink, "task-a")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close(context.Background()) })
	return g, sink
}

func coreCall(cid string) capgate.Call {
	c := lanetest.OCLCall("match", 1, true, false, "cora", "core")
	c.CID = cid
	return c
}

// TestAdmitWithMayWait: a call the caller gives no room to wait is decided
// at once, refused with its hints; with room, it queues, Queued says for how
// long, and the room is given back when the wait ends.
func TestAdmitWithMayWait(t *testing.T) {
	g, _ := optionsGate(t)
	first := g.Admit(t.Context(), coreCall("1"))
	if first.Outcome().Decision != capgate.DecisionAdmitted {
		t.Fatalf("first: %s", first.Outcome().Decision)
	}
	asked := 0
	no := g.AdmitWith(t.Context(), coreCall("2"), capgate.AdmitOptions{
		MayWait: func() (func(), bool) { asked++; return nil, false },
		Queued:  func(time.Duration) { t.Error("a call with no room to wait was queued") },
	})
	if no.Outcome().Decision != capgate.DecisionRefused || asked != 1 {
		t.Errorf("no room to wait: %s (asked %d), want refused at once, asked once", no.Outcome().Decision, asked)
	}
	if ok := no.Outcome().RetryAfter > 0; !ok {
		t.Error("the refusal has no Retry-After")
	}
	if waited := no.Outcome().Queued; waited {
		t.Error("a call with no room to wait waited")
	}
	no.Release(t.Context())

	queued := make(chan time.Duration, 1)
	given := make(chan struct{})
	done := make(chan *capgate.Admission, 1)
	go func() {
		done <- g.AdmitWith(t.Context(), coreCall("3"), capgate.AdmitOptions{
			MayWait: func() (func(), bool) { return func() { close(given) }, true },
			Queued:  func(d time.Duration) { queued <- d },
		})
	}()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	select {
	case d := <-queued:
		if d != 30*time.Second {
			t.Errorf("Queued(%v), want wait.max_seconds, 30s", d)
		}
	case <-timer.C:
		t.Fatal("the call never queued")
	}
	first.Release(t.Context())
	select {
	case a := <-done:
		if a.Outcome().Decision != capgate.DecisionAdmitted {
			t.Errorf("the waiter: %s, want admitted", a.Outcome().Decision)
		}
		a.Release(t.Context())
	case <-timer.C:
		t.Fatal("the waiter was never admitted")
	}
	select {
	case <-given:
	case <-timer.C:
		t.Fatal("the room to wait was never given back")
	}
}

// TestAdmitWithResumed: a resumed call takes its place forced over a full
// lane, never waits, and its line says resumed.
func TestAdmitWithResumed(t *testing.T) {
	g, sink := optionsGate(t)
	first := g.Admit(t.Context(), coreCall("1"))
	a := g.AdmitWith(t.Context(), coreCall("2"), capgate.AdmitOptions{
		Resumed: true,
		Queued:  func(time.Duration) { t.Error("a resumed call queued") },
	})
	if !a.Outcome().Counted || a.Outcome().Decision == capgate.DecisionRefused || a.Outcome().Decision != capgate.DecisionShadowRefused {
		t.Errorf("resumed over a full lane: %s (counted %v), want shadow-refused and counted", a.Outcome().Decision, a.Outcome().Counted)
	}
	a.Release(t.Context())
	first.Release(t.Context())
	lines := sink.Wait(t, 2, 10*time.Second)
	var resumed int
	for _, l := range lines {
		if l["resumed"] == true {
			resumed++
			if l["cid"] != "2" {
				t.Errorf("resumed line %v, want the resumed call's", l)
			}
		}
	}
	if resumed != 1 {
		t.Errorf("%d resumed lines, want 1: %v", resumed, lines)
	}
}
