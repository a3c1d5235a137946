package journal

import (
	"context"
	"time"
)

// minWait is the shortest wait between two rounds: a peer whose liveness
// is about to lapse is looked at again this soon at the earliest.
const minWait = 10 * time.Millisecond

// live is the liveness loop: a round (renew, and release the dead
// incarnations' leases once the hold has passed) first next from now, then
// whenever the round before asked, until Close.
func (j *Journal) live(next time.Duration) {
	defer close(j.loopDone)
	t := time.NewTimer(next)
	defer t.Stop()
	for {
		select {
		case <-j.stop:
			return
		case <-t.C:
		}
		t.Reset(j.round(context.Background(), false))
	}
}

// round renews the incarnation's liveness, and releases the leases of the
// group's dead incarnations if the hold has passed (or closing). It
// returns when the next round is due: at the next renewal, or sooner when
// a peer's liveness lapses or the hold ends before it. It runs in the
// liveness loop, or in Open and Close when the loop does not run.
func (j *Journal) round(ctx context.Context, closing bool) time.Duration {
	every := j.liveness / 4
	rctx, cancel := context.WithTimeout(ctx, j.deadline)
	defer cancel()
	peers, err := j.store.JournalRenew(rctx, j.group, j.id, j.liveness, j.q.rosterKeep())
	if err != nil {
		j.warn("capgate: renew the journal's liveness (retried; cut off from the store for its liveness, this process may be taken for dead)",
			err)
		return every
	}
	next := every
	held := time.Until(j.started.Add(j.hold)) // > 0: within the hold
	for id, left := range peers {
		switch {
		case left > 0:
			// Alive: its leases stay. Looked at again as it would lapse.
			next = min(next, left)
			if held <= 0 && !j.noted[id] && !closing {
				j.noted[id] = true
				j.logger.Info("capgate: another incarnation of this journal's group is alive: its calls stay counted until it ends them or stops renewing",
					"group", j.group, "incarnation", id, "liveness_left", left.String())
			}
		case held > 0 && !closing:
			next = min(next, held)
		default:
			j.reclaim(ctx, id)
		}
	}
	return max(next, minWait)
}

// reclaim releases the leases dead incarnation id journalled and forgets
// them (those it could not release too: their leases expire by
// themselves); nothing when id renewed meanwhile.
func (j *Journal) reclaim(ctx context.Context, id string) {
	rctx, cancel := context.WithTimeout(ctx, j.deadline)
	left, dead, err := j.store.JournalRead(rctx, j.group, id)
	cancel()
	if err != nil {
		j.warn("capgate: read a dead incarnation's journal (retried at the next renewal)", err)
		return
	}
	if !dead {
		return
	}
	n, rerr := 0, error(nil)
	if len(left) > 0 {
		// Each release has the store's own deadline; the whole may take
		// longer than one round trip's.
		n, rerr = j.release(context.WithoutCancel(ctx), left)
	}
	tokens := make([]string, 0, len(left))
	for token := range left {
		tokens = append(tokens, token)
	}
	fctx, cancel := context.WithTimeout(ctx, j.deadline)
	defer cancel()
	ferr := j.store.JournalForget(fctx, j.group, id, tokens)
	switch {
	case rerr != nil:
		j.logger.Warn("capgate: release the calls a dead incarnation left held (the rest expire by themselves)",
			"group", j.group, "incarnation", id, "calls", len(left), "released", n, "error", rerr)
	case n > 0:
		j.logger.Info("capgate: released the calls a dead incarnation left held",
			"group", j.group, "incarnation", id, "calls", n, "hold", j.hold.String())
	}
	if ferr != nil {
		j.warn("capgate: forget a dead incarnation's journal (its records expire by themselves)", ferr)
		return
	}
	delete(j.noted, id) // gone from the roster, or renewing again: noted afresh if so
}

// warn logs a renewal's or reclaim's failure, at most once a minute.
func (j *Journal) warn(msg string, err error) {
	if log, count := j.failed.note(1); log {
		j.logger.Warn(msg, "group", j.group, "incarnation", j.id, "error", err, "failures", count)
	}
}
