package lanetest

import (
	"context"
	"testing"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/settings"
)

// testWaitNoLongerEnforced: an enforced call waiting behind a full lane
// goes ahead once the mode turns to shadow (as it does when the config
// can't be read): it leaves the waitlist by the waiter's next re-check and
// takes its lease forced, shadow-refused, long before max_seconds. A store
// without a Waitlist never lets a call wait: it is refused at once.
func testWaitNoLongerEnforced(t *testing.T, e *Env) {
	e.Enforce(func(c *settings.Config) {
		c.Wait = settings.Wait{MaxSeconds: 20, MaxWaiting: 10, MaxWaitingPerUser: 5}
	})
	user := e.Key(capgate.LaneName("user"), "p")
	first := e.Admit(Match("p", "preview"))
	wantDecision(t, first, capgate.DecisionAdmitted)
	done := make(chan *capgate.Admission, 1)
	go func() { done <- e.Gate.Admit(context.Background(), Match("p", "preview")) }()
	wl := e.Store.Caps().Waitlist
	if wl == nil {
		a := <-done
		a.Release(context.Background())
		wantDecision(t, a, capgate.DecisionRefused)
		return
	}
	waiting := func() int {
		t.Helper()
		counts := make([]int, 1)
		if err := wl.Waiting(context.Background(), e.Gate.KeyPrefix, []string{user}, counts); err != nil {
			t.Fatal(err)
		}
		return counts[0]
	}
	for deadline := time.Now().Add(5 * time.Second); waiting() != 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the second call never queued")
		}
	}
	e.Cfg.Edit(func(c *settings.Config) { c.Mode = settings.ModeShadow })
	changed := time.Now()
	var a *capgate.Admission
	select {
	case a = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("still waiting 10 s after the mode went to shadow")
	}
	defer a.Release(context.Background())
	// A re-check every 250 ms, then two store round trips; the slack is
	// for a loaded machine, still far under max_seconds (20 s).
	if d := time.Since(changed); d > 3*time.Second {
		t.Errorf("went ahead %v after the mode went to shadow, want by the next re-check", d)
	}
	wantDecision(t, a, capgate.DecisionShadowRefused)
	if a.Outcome().Enforced || !a.Outcome().Holding {
		t.Errorf("enforced %v, holding %v; want false, true (counted as a shadow call)", a.Outcome().Enforced, a.Outcome().Holding)
	}
	if n := waiting(); n != 0 {
		t.Errorf("waiting after it went ahead = %d, want 0", n)
	}
	if m := e.Store.Members(t, user); len(m) != 2 {
		t.Errorf("user lane holds %v, want both calls", m)
	}
}
