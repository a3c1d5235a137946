package capgate_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/lanetest"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/settings"
)

// hookStore is a memory store that runs afterRelease once, after the first
// release (of a call that waited or not) it is given once armed.
type hookStore struct {
	*memory.Store
	armed        atomic.Bool
	afterRelease func()
}

// Caps declares the store itself as the waitlist, so the gate's releases
// of calls that waited go through ReleaseWait here.
func (s *hookStore) Caps() capgate.StoreCaps {
	c := s.Store.Caps()
	c.Waitlist = s
	return c
}

func (s *hookStore) after() {
	if s.armed.CompareAndSwap(true, false) {
		s.afterRelease()
	}
}

func (s *hookStore) Release(ctx context.Context, token string, keys []string) error {
	err := s.Store.Release(ctx, token, keys)
	s.after()
	return err
}

func (s *hookStore) ReleaseWait(ctx context.Context, prefix, token string, keys []string, c capgate.Charge) error {
	err := s.Store.ReleaseWait(ctx, prefix, token, keys, c)
	s.after()
	return err
}

// TestReleaseFreesTheLocalLanesBeforeTheStore: a waiter of the same gateway
// that the store's release lets in checks the local lanes (so a store that
// lost calls can't put a user past its limit); it must not find the call
// that just ended still counted there, or it is refused while a slot is
// free.
func TestReleaseFreesTheLocalLanesBeforeTheStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := settings.Default(nil, settings.ModeEnforce)
		c.EnforceFor = settings.EnforceAll
		c.Wait = settings.Wait{MaxSeconds: 20, MaxWaiting: 10, MaxWaitingPerUser: 5}
		store := &hookStore{Store: memory.New(nil)}
		gate, err := capgate.NewGate(store, settings.NewFixed(c), nil, "task-a")
		if err != nil {
			t.Fatal(err)
		}
		gate.Local = memory.New(nil)
		t.Cleanup(func() { _ = gate.Close(context.WithoutCancel(t.Context())) })

		first := gate.Admit(t.Context(), lanetest.Match("p", "preview"))
		mustDecide(t, first, capgate.DecisionAdmitted)
		ch := make(chan *capgate.Admission, 1)
		go func() { ch <- gate.Admit(t.Context(), lanetest.Match("p", "preview")) }()
		synctest.Wait() // the second call waits for p's one slot
		// The waiter runs to its decision while the first call's release
		// is still returning from the store.
		var second *capgate.Admission
		store.afterRelease = func() { second = <-ch }
		store.armed.Store(true)
		first.Release(t.Context())
		if second == nil {
			t.Fatal("the store's release did not let the waiter in")
		}
		defer second.Release(t.Context())
		mustDecide(t, second, capgate.DecisionAdmitted)
	})
}
