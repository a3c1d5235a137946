package idempotency

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/capgate/capgate/repeat"
)

// Joiners are waiters: a repeat of a call running (it joins that call,
// Repeater.Repeat, Repeat.Wait) counts against the same bounds as a call
// waiting for a lane place, wait.max_waiting_per_user and wait.max_waiting,
// and the joiners of one key wait on one watch of its entry, not a poll
// each. The counts are the process's own (its one Repeater's, shared by
// its front doors and the gates Gate.ForTask derives, as the skip window
// is); a ticket on the store's waitlist counts there, store-wide.

// ErrRepeatWaiters is the error of a repeat of a call running that finds
// the bounds of waiting calls full (wait.max_waiting_per_user for its
// user, or wait.max_waiting in all, joiners counted): it does not wait.
// The caller decides it as a call that may not wait (capgate.AdmitOptions.MayWait
// false): refused with the usual hints when a lane is full.
var ErrRepeatWaiters = errors.New("too many calls waiting: the repeat does not join the call running")

// joinWaits is a process's joiners: their counts, and one watch per key
// joined. Safe for concurrent use. The zero value is ready.
type joinWaits struct {
	mu      sync.Mutex
	total   int                   // joiners waiting; requires mu held
	perUser map[string]int        // joiners waiting per user; requires mu held
	watches map[string]*joinWatch // by key id + the token joined; requires mu held
}

// joinWatch is the one watch of a call running that its joiners share:
// a goroutine reads the key's entry until the call has ended (its entry
// gone, holding an answer, or another call's), the watch's bound passes,
// or its last joiner leaves.
type joinWatch struct {
	done chan struct{} // closed once e, ok and err are set
	e    repeat.Entry  // the entry that ended the watch
	ok   bool          // the entry existed
	err  error         // the store's error, or errWatchEnded

	n      int // joiners on it; requires joinWaits.mu held
	cancel context.CancelFunc
}

// errWatchEnded ends a watch whose bound passed before its call did.
var errWatchEnded = errors.New("the watch of the call running ended")

// enter counts a joiner of user, unless the bounds are full: maxTotal
// joiners in all, maxUser of the user (0: no bound).
func (j *joinWaits) enter(user string, maxTotal, maxUser int) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if (maxTotal > 0 && j.total >= maxTotal) || (maxUser > 0 && j.perUser[user] >= maxUser) {
		return ErrRepeatWaiters
	}
	if j.perUser == nil {
		j.perUser = map[string]int{}
	}
	j.total++
	j.perUser[user]++
	return nil
}

// leave uncounts a joiner of user.
func (j *joinWaits) leave(user string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.total--
	if j.perUser[user]--; j.perUser[user] <= 0 {
		delete(j.perUser, user)
	}
}

// Waiting returns the joiners waiting, in all and of user.
func (j *joinWaits) waiting(user string) (total, ofUser int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.total, j.perUser[user]
}

// watch returns the watch of the call token running at id, started (a
// goroutine reading st until until) when it has none, and adds a joiner
// to it; the joiner calls unwatch when it stops waiting.
func (j *joinWaits) watch(rep *Repeater, st repeat.Store, id, token string, until time.Time) *joinWatch {
	k := id + "\x00" + token
	j.mu.Lock()
	defer j.mu.Unlock()
	if w := j.watches[k]; w != nil {
		w.n++
		return w
	}
	if j.watches == nil {
		j.watches = map[string]*joinWatch{}
	}
	// The watch's reads outlive any one joiner's ctx; its last joiner
	// leaving cancels them.
	ctx, cancel := context.WithDeadline(context.Background(), until)
	w := &joinWatch{done: make(chan struct{}), n: 1, cancel: cancel}
	j.watches[k] = w
	go func() {
		defer func() { _ = recover() }() // a failing read never fails the process
		w.run(ctx, rep, st, id, token)
		j.mu.Lock()
		if j.watches[k] == w {
			delete(j.watches, k)
		}
		j.mu.Unlock()
		cancel()
	}()
	return w
}

// unwatch takes a joiner off w (the watch of id and token); the last one
// ends its reads.
func (j *joinWaits) unwatch(w *joinWatch, id, token string) {
	k := id + "\x00" + token
	j.mu.Lock()
	defer j.mu.Unlock()
	if w.n--; w.n > 0 {
		return
	}
	if j.watches[k] == w {
		delete(j.watches, k)
	}
	w.cancel()
}

// run reads the entry at id, from repeatPollFirst apart, doubling up to
// repeatPollMax, until the call token has ended or ctx ends; then it sets
// the result and closes done.
func (w *joinWatch) run(ctx context.Context, rep *Repeater, st repeat.Store, id, token string) {
	defer close(w.done)
	poll := repeatPollFirst
	timer := time.NewTimer(poll)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			w.err = errWatchEnded
			return
		case <-timer.C:
		}
		sctx, cancel := rep.storeCtx(ctx)
		e, ok, err := st.GetRepeat(sctx, id)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				w.err = errWatchEnded
			} else {
				w.err = err
			}
			return
		}
		if !ok || e.Token != token || e.Answer != nil {
			w.e, w.ok = e, ok
			return
		}
		poll = min(2*poll, repeatPollMax)
		timer.Reset(poll)
	}
}

// awaitEnd waits, counted as a waiter of user, until the call token
// running at id ends: its entry then (ok false: gone). It returns
// ErrRepeatWaiters when the bounds are full, ErrRepeatWait once until
// passes, ctx's error (wrapped) when ctx ends, or the store's.
func (r *Repeat) awaitEnd(ctx context.Context, token string, until time.Time) (repeat.Entry, bool, error) {
	j := &r.rep.joins
	if err := j.enter(r.req.User, r.cfg.Wait.MaxWaiting, r.cfg.Wait.MaxWaitingPerUser); err != nil {
		return repeat.Entry{}, false, err
	}
	defer j.leave(r.req.User)
	if !time.Now().Before(until) {
		return repeat.Entry{}, false, ErrRepeatWait
	}
	w := j.watch(r.rep, r.st, r.req.ID, token, until)
	defer j.unwatch(w, r.req.ID, token)
	limit := time.NewTimer(time.Until(until))
	defer limit.Stop()
	select {
	case <-ctx.Done():
		return repeat.Entry{}, false, r.failed(ctx, "idempotency wait", ctx.Err())
	case <-limit.C:
		return repeat.Entry{}, false, ErrRepeatWait
	case <-w.done:
	}
	switch {
	case errors.Is(w.err, errWatchEnded):
		return repeat.Entry{}, false, ErrRepeatWait
	case w.err != nil:
		return repeat.Entry{}, false, r.failed(ctx, "idempotency wait", w.err)
	}
	return w.e, w.ok, nil
}
