package capgate_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/configtest"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/settings"
)

// predictGate enforces one core call per user, with waits of up to
// maxWait seconds, on a fake clock.
func predictGate(t *testing.T, maxWait int) (*capgate.Gate, *fakeNow) {
	t.Helper()
	c := settings.Default(nil, settings.ModeEnforce)
	c.EnforceFor, c.Wait.MaxSeconds = settings.EnforceAll, maxWait
	configtest.SetNumbers(t, &c, "per_user.core", 1)
	g, err := capgate.NewGate(memory.New(nil), settings.NewFixed(c), nil, "task-a")
	if err != nil {
		t.Fatal(err)
	}
	clk := &fakeNow{t: time.Now()}
	g.Now = clk.Now
	t.Cleanup(func() { _ = g.Close(context.Background()) })
	return g, clk
}

type fakeNow struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fakeNow) Now() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.t }
func (f *fakeNow) Add(d time.Duration) {
	f.mu.Lock()
	f.t = f.t.Add(d)
	f.mu.Unlock()
}

// holdFor gives the gate a hold history: one call held d.
func holdFor(t *testing.T, g *capgate.Gate, clk *fakeNow, d time.Duration) {
	t.Helper()
	a := g.Admit(t.Context(), coreCall("history"))
	if a.Outcome().Decision != capgate.DecisionAdmitted {
		t.Fatalf("history call: %s", a.Outcome().Decision)
	}
	clk.Add(d)
	a.Release(t.Context())
}

// A call whose predicted wait (one call ahead × a 45 s hold ÷ limit 1) is
// past wait.max_seconds (20) is refused at once, never queued, with
// Retry-After when a retry's wait would fit: 45 − 20 = 25 s.
func TestPredictedWaitRefusesAtOnce(t *testing.T) {
	g, clk := predictGate(t, 20)
	holdFor(t, g, clk, 45*time.Second)
	running := g.Admit(t.Context(), coreCall("running"))
	defer running.Release(t.Context())
	a := g.AdmitWith(t.Context(), coreCall("late"), capgate.AdmitOptions{
		Queued: func(time.Duration) { t.Error("a call predicted to wait past max_seconds was queued") },
	})
	defer a.Release(t.Context())
	if a.Outcome().Decision != capgate.DecisionRefused {
		t.Fatalf("decision %s; want refused at once", a.Outcome().Decision)
	}
	if secs, ok := a.Outcome().RetryAfter, a.Outcome().RetryAfter > 0; !ok || secs != 25 {
		t.Errorf("Retry-After = %d, %v; want the prediction − max_seconds, 25", secs, ok)
	}
	if waited := a.Outcome().Queued; waited {
		t.Error("the refused call waited")
	}
}

// A prediction within max_seconds, and a lane with no hold history (the
// limiter can't judge), both wait as before.
func TestPredictedWaitWaitsWhenItFitsOrCantJudge(t *testing.T) {
	for _, tt := range []struct {
		name string
		hold time.Duration // 0: no history
	}{{"within max_seconds", 10 * time.Second}, {"no history", 0}} {
		t.Run(tt.name, func(t *testing.T) {
			g, clk := predictGate(t, 20)
			if tt.hold > 0 {
				holdFor(t, g, clk, tt.hold)
			}
			running := g.Admit(t.Context(), coreCall("running"))
			queued := make(chan struct{})
			done := make(chan *capgate.Admission, 1)
			go func() {
				done <- g.AdmitWith(t.Context(), coreCall("waits"), capgate.AdmitOptions{
					Queued: func(time.Duration) { close(queued) },
				})
			}()
			select {
			case <-queued:
			case a := <-done:
				a.Release(t.Context())
				t.Fatalf("decided %s without waiting; want queued", a.Outcome().Decision)
			}
			running.Release(t.Context())
			a := <-done
			defer a.Release(t.Context())
			if a.Outcome().Decision != capgate.DecisionAdmitted {
				t.Fatalf("decision %s; want admitted after its wait", a.Outcome().Decision)
			}
		})
	}
}
