package capgate

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// The gate's renewer: one timer for all the calls of a gateway that hold
// leases, instead of a goroutine per call. Each call is renewed every
// renew_seconds from when it took its leases, until Release, a lost lease,
// or max_hold_seconds; the timer is set for the earliest renewal due, and
// each time it fires the calls that are due are renewed, side by side when
// there are several (at most renewWorkers at once). Admitting and
// releasing a call only adds it to and removes it from a list: nothing is
// started or waited for.

// renewer is the gate's set of calls to renew. The zero value is ready.
type renewer struct {
	mu     sync.Mutex
	live   []*Admission // the calls renewed; each one's renewSlot is 1 + its index; requires mu held
	timer  *time.Timer  // nil until the first call; requires mu held
	armed  time.Time    // when timer fires; zero when stopped; requires mu held
	closed bool         // requires mu held
	rounds sync.WaitGroup
}

// startRenewer hands the call to the gate's renewer, which renews its
// leases every renew_seconds until Release, a lost lease, or
// max_hold_seconds.
func (a *Admission) startRenewer(ctx context.Context) error {
	// Kept for its values: the renewals outlive the request's
	// cancellation (renew detaches it), each bounded by the store's own
	// deadline.
	a.renewCtx = ctx
	every := time.Duration(a.cfg.RenewSeconds) * time.Second
	if h := a.g.hooks; h != nil && h.startRenewer != nil {
		return h.startRenewer(func() { a.g.rn.add(a, every) })
	}
	a.g.rn.add(a, every)
	return nil
}

// add puts a in the set, its first renewal every from now.
func (r *renewer) add(a *Admission, every time.Duration) {
	now := time.Now() // the renewer's own clock: it sleeps on real timers
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || a.renewSlot != 0 {
		return
	}
	a.renewBegan, a.renewAt = now, now.Add(every)
	r.live = append(r.live, a)
	a.renewSlot = len(r.live)
	r.armLocked(a.g, a.renewAt)
}

// remove takes a out of the set; a renewal of it in flight may still end.
func (r *renewer) remove(a *Admission) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.removeLocked(a)
}

// removeLocked requires r.mu held.
func (r *renewer) removeLocked(a *Admission) {
	i := a.renewSlot - 1
	if i < 0 {
		return
	}
	last := len(r.live) - 1
	r.live[i] = r.live[last]
	r.live[i].renewSlot = i + 1
	r.live[last] = nil
	r.live = r.live[:last]
	a.renewSlot = 0
	// The timer stays set: when it fires with nothing due, it only sets
	// itself again.
}

// armLocked sets the timer to fire at at, unless it fires before then
// already. Requires r.mu held.
func (r *renewer) armLocked(g *Gate, at time.Time) {
	if r.closed || (!r.armed.IsZero() && !at.Before(r.armed)) {
		return
	}
	d := max(time.Until(at), 0)
	if r.timer == nil {
		r.timer = time.AfterFunc(d, g.renewDue)
	} else {
		r.timer.Reset(d)
	}
	r.armed = at
}

// close stops the renewer: no call is renewed after it returns, or after
// the round in progress ends (wait).
func (r *renewer) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	if r.timer != nil {
		r.timer.Stop()
	}
	for _, a := range r.live {
		a.renewSlot = 0
	}
	r.live = nil
}

// renewDue renews the calls that are due, on the timer's goroutine, and
// sets the timer for the next one.
func (g *Gate) renewDue() {
	r := &g.rn
	now := time.Now()
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.armed = time.Time{}
	var due []*Admission
	var next time.Time
	for i := 0; i < len(r.live); {
		a := r.live[i]
		if !now.Before(a.renewAt) {
			if now.Sub(a.renewBegan) >= time.Duration(a.cfg.MaxHoldSeconds)*time.Second {
				r.removeLocked(a) // the leases expire lease_seconds later
				continue
			}
			a.renewAt = now.Add(time.Duration(a.cfg.RenewSeconds) * time.Second)
			due = append(due, a)
		}
		if next.IsZero() || a.renewAt.Before(next) {
			next = a.renewAt
		}
		i++
	}
	if !next.IsZero() {
		r.armLocked(g, next)
	}
	r.rounds.Add(1) // before closed can be set: Close waits for this round
	r.mu.Unlock()
	defer r.rounds.Done()
	if len(due) == 1 {
		g.renewSafely(due[0])
		return
	}
	// Side by side, a few at a time: one slow renewal must not hold back
	// the others until their leases expire, and a round must not flood the
	// store. The workers end with the round; none is started per call.
	var taken atomic.Int64
	var wg sync.WaitGroup
	for range min(len(due), renewWorkers) {
		wg.Go(func() {
			for {
				i := int(taken.Add(1)) - 1
				if i >= len(due) || r.stopped() {
					return
				}
				g.renewSafely(due[i])
			}
		})
	}
	wg.Wait()
}

// renewSafely renews a's leases once; a panic (a bug) is logged, and the
// other calls' renewals go on.
func (g *Gate) renewSafely(a *Admission) {
	defer func() {
		if p := recover(); p != nil {
			g.logger().Error("capacity gate: renewer panicked", "panic", fmt.Sprint(p))
		}
	}()
	a.renew()
}

// renewWorkers bounds the renewals of one round that run at once.
const renewWorkers = 8

func (r *renewer) stopped() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

// renew renews the call's leases once. A lease found lost marks the call
// and ends its renewals; nothing is recorded on a call released meanwhile.
func (a *Admission) renew() {
	g := a.g
	ctx := context.WithoutCancel(a.renewCtx)
	lease := time.Duration(a.cfg.LeaseSeconds) * time.Second
	if a.local {
		// In process: never fails, and a local lease lost is no news.
		_, _ = g.Local.Renew(ctx, a.token, a.keys, lease)
	}
	if !a.taken && !a.stored.Load() {
		return
	}
	if g.skipping() {
		g.storeSkipped("renew")
		return
	}
	held, err := g.Store.Renew(ctx, a.token, a.keys, lease)
	if err != nil {
		g.storeFailed("renew", err)
	}
	a.mu.Lock()
	lost := false
	switch {
	case a.released:
		// Its log line is written; a lease it gave back is no loss.
	case err != nil:
		a.err = err
	case held < len(a.keys):
		a.leaseLost, lost = true, true
	}
	a.mu.Unlock()
	if lost {
		g.rn.remove(a)
	}
}
