package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/idempotency"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/repeat"
	"github.com/capgate/capgate/settings"
)

// countedReads is a memory store whose GetRepeat reads are counted and
// held until release is closed.
type countedReads struct {
	*memory.Store
	reads   atomic.Int64
	release chan struct{}
}

// Caps declares the store itself as the idempotency store, so the gate's
// reads go through the counted GetRepeat.
func (s *countedReads) Caps() capgate.StoreCaps {
	c := s.Store.Caps()
	c.Idempotency = s
	return c
}

func (s *countedReads) GetRepeat(ctx context.Context, id string) (repeat.Entry, bool, error) {
	s.reads.Add(1)
	select {
	case <-s.release:
	case <-ctx.Done():
	}
	return s.Store.GetRepeat(context.WithoutCancel(ctx), id)
}

// awaitJoiners waits (yielding, no sleep) until rep counts n joiners.
func awaitJoiners(t *testing.T, rep *idempotency.Repeater, n int) {
	t.Helper()
	start := time.Now()
	for {
		if total, _ := rep.JoinersWaiting(""); total == n {
			return
		}
		if time.Since(start) > time.Minute {
			t.Fatalf("never %d joiners waiting", n)
		}
		runtime.Gosched()
	}
}

// Joiners of one key wait on one watch of its entry: 50 repeats of a call
// running read the store as one does, not 50 times as often.
func TestJoinersShareOneWatch(t *testing.T) {
	st := &countedReads{Store: memory.New(nil), release: make(chan struct{})}
	_, rep := repeatGate(t, st, func(c *settings.Config) { c.Wait.MaxWaitingPerUser, c.Wait.MaxWaiting = 100, 100 })
	ctx := t.Context()
	req := idempotency.RepeatRequest{ID: "id", User: "u", Fingerprint: "fp", CID: "c0", Replay: true}
	first, err := rep.Repeat(ctx, req)
	if err != nil || first.Outcome != idempotency.RepeatFirst {
		t.Fatalf("first = %+v, %v", first, err)
	}
	const n = 50
	var wg sync.WaitGroup
	got := make(chan *idempotency.Repeat, n)
	for i := range n {
		wg.Go(func() {
			r := req
			r.CID = fmt.Sprint("c", i+1)
			rp, err := rep.Repeat(ctx, r)
			if err != nil {
				t.Error(err)
				return
			}
			got <- rp
		})
	}
	awaitJoiners(t, rep, n)
	first.Finish(ctx, []byte("ans"))
	close(st.release)
	wg.Wait()
	close(got)
	for rp := range got {
		if rp.Outcome != idempotency.RepeatJoined || string(rp.Answer) != "ans" {
			t.Errorf("repeat = %+v; want joined with the answer", rp)
		}
	}
	if reads := st.reads.Load(); reads > 3 {
		t.Errorf("%d joiners read the entry %d times; want one watch (a read or two)", n, reads)
	}
}

// Joiners are waiters: repeats of a call running count against
// wait.max_waiting_per_user and wait.max_waiting; past them a repeat does
// not wait (ErrRepeatWaiters, at once).
func TestJoinersAreWaiters(t *testing.T) {
	st := &countedReads{Store: memory.New(nil), release: make(chan struct{})}
	_, rep := repeatGate(t, st, func(c *settings.Config) {
		c.Wait.MaxWaitingPerUser, c.Wait.MaxWaiting = 2, 3
	})
	ctx := t.Context()
	first := map[string]*idempotency.Repeat{}
	for _, u := range []string{"u", "v", "w"} {
		rp, err := rep.Repeat(ctx, idempotency.RepeatRequest{ID: "id-" + u, User: u, Fingerprint: "fp", Replay: true})
		if err != nil || rp.Outcome != idempotency.RepeatFirst {
			t.Fatalf("first of %s = %+v, %v", u, rp, err)
		}
		first[u] = rp
	}
	var wg sync.WaitGroup
	join := func(u string) {
		wg.Go(func() {
			rp, err := rep.Repeat(ctx, idempotency.RepeatRequest{ID: "id-" + u, User: u, Fingerprint: "fp", Replay: true})
			if err != nil || rp.Outcome != idempotency.RepeatJoined {
				t.Errorf("joiner of %s = %+v, %v; want joined", u, rp, err)
			}
		})
	}
	try := func(u string) error {
		ctx, cancel := context.WithTimeout(ctx, time.Minute) // a bug waits: the test fails, not hangs
		defer cancel()
		_, err := rep.Repeat(ctx, idempotency.RepeatRequest{ID: "id-" + u, User: u, Fingerprint: "fp", Replay: true})
		return err
	}
	join("u")
	join("u")
	awaitJoiners(t, rep, 2)
	if err := try("u"); !errors.Is(err, idempotency.ErrRepeatWaiters) {
		t.Errorf("a third joiner of u, past max_waiting_per_user 2: %v; want ErrRepeatWaiters", err)
	}
	join("v")
	awaitJoiners(t, rep, 3)
	if err := try("w"); !errors.Is(err, idempotency.ErrRepeatWaiters) {
		t.Errorf("a joiner of w, past max_waiting 3: %v; want ErrRepeatWaiters", err)
	}
	for _, rp := range first {
		rp.Finish(ctx, []byte("ans"))
	}
	close(st.release)
	wg.Wait()
	if total, _ := rep.JoinersWaiting(""); total != 0 {
		t.Errorf("%d joiners still counted after their calls ended", total)
	}
}
