package capgate_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/configtest"
	"github.com/capgate/capgate/lanetest"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/settings"
)

// Failure never means uncounted: the store side (lease.go,
// degraded.go, wait.go).

// failWhile makes e's acquires fail while the flag it returns (set) is.
func failWhile(e *faultEnv) *atomic.Bool {
	var stalled atomic.Bool
	stalled.Store(true)
	acquire := e.store.AcquireFn
	e.store.AcquireFn = func(ctx context.Context, req capgate.AcquireRequest, counts []int) (bool, error) {
		if stalled.Load() {
			return false, errRefused
		}
		return acquire(ctx, req, counts)
	}
	return &stalled
}

// TestStallThenRecoverCountsTheDegradedCalls: a call the local lanes
// admitted while the store failed is written into the store when it is
// back, so the store refuses the same user's next call on another gateway
// (limit 1), and the lease there is given back when the call ends.
func TestStallThenRecoverCountsTheDegradedCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, local := newLocalEnv(t)
		enforce(e, func(c *settings.Config) { configtest.SetNumbers(t, c, "per_user.preview", 1) })
		other, err := capgate.NewGate(e.mem, e.cfg, nil, "task-b") // another gateway
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = other.Close(context.WithoutCancel(t.Context())) }()
		stalled := failWhile(e)
		first := e.gate.Admit(t.Context(), lanetest.Match("u", "preview"))
		if !first.Outcome().Degraded || !first.Outcome().Counted || first.Outcome().Decision == capgate.DecisionRefused {
			t.Fatalf("during the stall: degraded %v counted %v decision %q", first.Outcome().Degraded, first.Outcome().Counted, first.Outcome().Decision)
		}
		stalled.Store(false) // the store is back
		time.Sleep(capgate.DefaultSkipDuration + time.Second)
		synctest.Wait()
		if n := e.userLane(t, "u"); n != 1 {
			t.Fatalf("the store counts %d of the user's calls after it recovered, want 1 (the degraded call)", n)
		}
		second := other.Admit(t.Context(), lanetest.Match("u", "preview"))
		defer second.Release(t.Context())
		if second.Outcome().Decision != capgate.DecisionRefused {
			t.Fatalf("the user's second call: %q, want refused (limit 1, one running)", second.Outcome().Decision)
		}
		time.Sleep(time.Minute) // renewed in the store past its first lease
		if n := e.userLane(t, "u"); n != 1 {
			t.Fatalf("the store counts %d of the user's calls a lease later, want 1 (renewed)", n)
		}
		first.Release(t.Context())
		if n, l := e.userLane(t, "u"), localUserLane(t, local, "u"); n != 0 || l != 0 {
			t.Errorf("after release: store %d, local %d, want 0 and 0", n, l)
		}
	})
}

// stallingStore is a memory waitlist whose joins fail while stalled.
type stallingStore struct {
	*memory.Store
	stalled atomic.Bool
}

// Caps declares the store itself as the waitlist, so the gate joins
// through Join here.
func (s *stallingStore) Caps() capgate.StoreCaps {
	c := s.Store.Caps()
	c.Waitlist = s
	return c
}

func (s *stallingStore) Join(ctx context.Context, t capgate.Ticket, counts []int) (capgate.JoinResult, error) {
	if s.stalled.Load() {
		return capgate.JoinResult{}, errRefused
	}
	return s.Store.Join(ctx, t, counts)
}

// TestRecoveredStoreCountsDegradedCallsBeforeDeciding: with waiting on
// (calls skip the local pre-check), the first call after the skip window
// closes finds the degraded call already written (it is written before the
// store decides, even before the background loop runs), so it waits for
// the user's one slot instead of running beside it.
func TestRecoveredStoreCountsDegradedCallsBeforeDeciding(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newWaitEnv(t)
		s := &stallingStore{Store: memory.New(nil)}
		e.gate.Store = s
		e.gate.Local = memory.New(nil)
		s.stalled.Store(true)
		first := e.gate.Admit(t.Context(), lanetest.Match("u", "preview"))
		if !first.Outcome().Degraded || !first.Outcome().Counted {
			t.Fatalf("during the stall: degraded %v counted %v decision %q", first.Outcome().Degraded, first.Outcome().Counted, first.Outcome().Decision)
		}
		s.stalled.Store(false)
		e.gate.ResetSkip() // the window closes between two loop rounds
		ch := e.admitAsync(t.Context(), lanetest.Match("u", "preview"))
		synctest.Wait()
		select {
		case a := <-ch:
			a.Release(t.Context())
			t.Fatalf("the user's second call was decided (%q) while its first runs, want it waiting", a.Outcome().Decision)
		default:
		}
		counts := make([]int, 1)
		if err := s.Waiting(t.Context(), "ocl:capacity", []string{"ocl:capacity:user:u"}, counts); err != nil || counts[0] != 1 {
			t.Fatalf("waiting on u's lane: %d (%v), want 1", counts[0], err)
		}
		first.Release(t.Context())
		second := <-ch
		defer second.Release(t.Context())
		mustDecide(t, second, capgate.DecisionAdmitted)
	})
}

// timeoutErr is a store error whose answer may have been lost on the way:
// Redis may have run the operation.
type timeoutErr struct{}

func (timeoutErr) Error() string { return "no answer from Redis within 1.0 s" }
func (timeoutErr) Timeout() bool { return true }

// TestLostAcquireAnswerIsReleasedInTheBackground: the store ran the
// acquire but its answer was lost; the call went ahead unavailable, and
// the lease nobody renews is released by its token once the store is used
// again, not left to hold the user's slot until it expires.
func TestLostAcquireAnswerIsReleasedInTheBackground(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newFaultEnv(t)
		enforce(e, func(c *settings.Config) { configtest.SetNumbers(t, c, "per_user.preview", 1) })
		e.store.AcquireFn = func(ctx context.Context, req capgate.AcquireRequest, counts []int) (bool, error) {
			if _, err := e.mem.Acquire(ctx, req, counts); err != nil {
				return false, err
			}
			return false, timeoutErr{}
		}
		a := e.gate.Admit(t.Context(), lanetest.Match("u", "preview"))
		if a.Outcome().Decision != capgate.DecisionUnavailable {
			t.Fatalf("decision %q, want unavailable", a.Outcome().Decision)
		}
		a.Release(t.Context())
		time.Sleep(capgate.DefaultSkipDuration + time.Second)
		synctest.Wait()
		if n := e.userLane(t, "u"); n != 0 {
			t.Errorf("the lost acquire's lease is still in the store (%d), want released", n)
		}
	})
}

// lossyStore is a memory waitlist that can lose every waiting ticket, as a
// Redis restart or failover does: once lost is set, a pump finds its
// ticket gone.
type lossyStore struct {
	*memory.Store
	lost atomic.Bool
}

// Caps declares the store itself as the waitlist, so the gate's pumps go
// through Pump here.
func (s *lossyStore) Caps() capgate.StoreCaps {
	c := s.Store.Caps()
	c.Waitlist = s
	return c
}

func (s *lossyStore) Pump(ctx context.Context, t capgate.Ticket) (capgate.JoinResult, error) {
	if s.lost.Load() {
		if _, err := s.Store.Leave(ctx, t); err != nil {
			return capgate.JoinResult{}, err
		}
		return capgate.JoinResult{}, nil // neither queued nor granted: gone
	}
	return s.Store.Pump(ctx, t)
}

// TestLostTicketFallsBackToTheDegradedLimits: a waiter whose ticket the
// store lost is decided by the local lanes with the degraded limits: with
// the user's one slot taken here, it is refused, never sent on uncounted.
// A waiter with room in the local lanes (the cluster lane it waited on is
// full of another gateway's calls) goes ahead, counted, and is written
// into the store.
func TestLostTicketFallsBackToTheDegradedLimits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newWaitEnv(t)
		e.cfg.Edit(func(c *settings.Config) {
			configtest.SetNumbers(t, c, "per_user.preview", 1, "tiers.preview", 10, "es2_knn", 10, "api_heavy.cluster", 5, "api_heavy.per_task", 10)
		})
		s := &lossyStore{Store: memory.New(nil)}
		e.gate.Store = s
		e.gate.Local = memory.New(nil)
		other, err := capgate.NewGate(s, e.cfg, nil, "task-b") // another gateway
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = other.Close(context.WithoutCancel(t.Context())) }()
		first := e.gate.Admit(t.Context(), lanetest.Match("u", "preview"))
		defer first.Release(t.Context())
		mustDecide(t, first, capgate.DecisionAdmitted)
		for _, user := range []string{"v1", "v2", "v3"} { // api_heavy full: 4 of 4
			elsewhere := other.Admit(t.Context(), lanetest.Match(user, "preview"))
			defer elsewhere.Release(t.Context())
			if elsewhere.Outcome().Decision != capgate.DecisionAdmitted {
				t.Fatalf("%s on the other gateway: %q scope %q", user, elsewhere.Outcome().Decision, elsewhere.Outcome().Scope)
			}
		}
		// u waits on its own lane, w on the full api_heavy lane.
		chU := e.admitAsync(t.Context(), lanetest.Match("u", "preview"))
		chW := e.admitAsync(t.Context(), lanetest.Match("w", "preview"))
		synctest.Wait()
		s.lost.Store(true)
		second, third := <-chU, <-chW // at their next pump
		defer second.Release(t.Context())
		defer third.Release(t.Context())
		if second.Outcome().Decision != capgate.DecisionRefused || !errors.Is(second.Err(), capgate.ErrTicketLost) {
			t.Errorf("u's waiter after its ticket was lost: %q (error %v), want refused by the local lanes", second.Outcome().Decision, second.Err())
		}
		if !third.Outcome().Degraded || !third.Outcome().Counted || third.Outcome().Decision == capgate.DecisionRefused {
			t.Errorf("w's waiter: degraded %v counted %v decision %q, want degraded and counted", third.Outcome().Degraded, third.Outcome().Counted, third.Outcome().Decision)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		counts := make([]int, 1)
		if err := s.Count(t.Context(), []string{"ocl:capacity:user:w"}, counts); err != nil {
			t.Fatal(err)
		}
		if counts[0] != 1 {
			t.Errorf("w's call is counted %d times in the store, want 1 (written after the loss)", counts[0])
		}
	})
}

// TestFullWaitlistMakesRoomForANewUser: 10 places, two users' floods fill
// them; a third user with nothing waiting still gets a place: the newest
// ticket of a user holding the most is dropped, and that call gets its 429
// at once (woken, not left to time out).
func TestFullWaitlistMakesRoomForANewUser(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newWaitEnv(t) // max_waiting 10, 5 per user, per_user 1
		e.cfg.Edit(func(c *settings.Config) {
			configtest.SetNumbers(t, c, "tiers.preview", 10, "es2_knn", 10, "api_heavy.cluster", 10, "api_heavy.per_task", 10)
		})
		var running []*capgate.Admission
		for _, u := range []string{"a", "b", "c"} {
			a := e.gate.Admit(t.Context(), lanetest.Match(u, "preview"))
			mustDecide(t, a, capgate.DecisionAdmitted)
			running = append(running, a)
		}
		defer func() {
			for _, a := range running {
				a.Release(t.Context())
			}
		}()
		var flood []<-chan *capgate.Admission
		for _, u := range []string{"a", "b"} {
			for range 5 {
				flood = append(flood, e.admitAsync(t.Context(), lanetest.Match(u, "preview")))
				synctest.Wait() // in arrival order
			}
		}
		if n := e.waiting(t, "a") + e.waiting(t, "b"); n != 10 {
			t.Fatalf("waiting = %d, want the full 10", n)
		}
		newcomer := e.admitAsync(t.Context(), lanetest.Match("c", "preview"))
		synctest.Wait()
		select {
		case a := <-newcomer:
			a.Release(t.Context())
			t.Fatalf("the newcomer was decided at once (%q): no place made for it", a.Outcome().Decision)
		default:
		}
		if n := e.waiting(t, "c"); n != 1 {
			t.Fatalf("c's tickets waiting = %d, want 1", n)
		}
		dropped := <-flood[4] // a's newest: a and b hold 5 each, the tie goes to a
		if dropped.Outcome().Decision != capgate.DecisionRefused || dropped.Outcome().Scope != capgate.LaneName("user") {
			t.Errorf("a's newest waiter: %q scope %q, want refused on its user lane", dropped.Outcome().Decision, dropped.Outcome().Scope)
		}
		if ok := dropped.Outcome().RetryAfter > 0; !ok {
			t.Error("the dropped call has no Retry-After")
		}
		for _, a := range running {
			a.Release(t.Context())
		}
		running = nil
		got := []*capgate.Admission{<-newcomer}
		for i, ch := range flood {
			if i != 4 {
				got = append(got, <-ch)
			}
		}
		for _, a := range got {
			a.Release(t.Context())
		}
	})
}

// TestRestartedStoreDoesNotAdmitPastTheLocalCount: the store restarted
// empty while a user's call runs here; with waiting on (no local
// pre-check), the store admits the user's next call, but this gateway
// alone already runs the user's limit: the store's answer does not stand.
func TestRestartedStoreDoesNotAdmitPastTheLocalCount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newWaitEnv(t) // per_user 1
		e.gate.Local = memory.New(nil)
		first := e.gate.Admit(t.Context(), lanetest.Match("u", "preview"))
		defer first.Release(t.Context())
		mustDecide(t, first, capgate.DecisionAdmitted)
		restarted := memory.New(nil)
		synctest.Wait()          // the gate's background count of the gateways is done
		e.gate.Store = restarted // empty: the first call's lease is gone
		second := e.gate.Admit(t.Context(), lanetest.Match("u", "preview"))
		defer second.Release(t.Context())
		if second.Outcome().Decision != capgate.DecisionRefused || second.Outcome().Scope != capgate.LaneName("user") {
			t.Fatalf("the user's second call after the restart: %q scope %q, want refused on its user lane", second.Outcome().Decision, second.Outcome().Scope)
		}
		counts := make([]int, 1)
		if err := restarted.Count(t.Context(), []string{"ocl:capacity:user:u"}, counts); err != nil || counts[0] != 0 {
			t.Errorf("the restarted store counts %d (%v) for the user, want 0: the refused call's lease given back", counts[0], err)
		}
	})
}
