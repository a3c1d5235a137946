// Package idempotency is the gate's side of idempotent heavy calls (the
// config key "idempotency"): a call that repeats one still running
// (anywhere in the cluster) waits for it and gets its answer instead of
// running again, and, with an Idempotency-Key, a repeat of a call that
// finished gets its kept answer. The front door (capgatehttp, decide) says
// what a request is (its key and its fingerprint) and what its answer was;
// a Repeater keeps the entries in the lane store (a
// repeat.Store) and says whether a call is the first, a
// repeat, or a reuse of a key for another request.
//
// A process makes one Repeater (New) over its gate, and every front door
// of the process shares it: the waiting repeats' counts and the watch of
// each key joined are the process's own, as the gate's skip window is.
package idempotency

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/internal/randhex"
	"github.com/capgate/capgate/repeat"
	"github.com/capgate/capgate/settings"
)

// Repeater runs the idempotency of a process's heavy calls over its gate:
// the lane store, config, skip window, clock, logger and Observer are the
// gate's (and, being shared, those of every gate Gate.ForTask derives from
// it). Make one per process with New. Safe for concurrent use.
type Repeater struct {
	g     *capgate.Gate
	joins joinWaits // the repeats waiting, and one watch per key (joins.go)
}

// New returns the Repeater of g's process. A nil Repeater (or one of a
// nil gate) is idempotency off: Mode is off and Repeat returns
// ErrNoRepeatStore.
func New(g *capgate.Gate) *Repeater { return &Repeater{g: g} }

// ErrNoRepeatID is Repeater.Repeat's error for a request with no ID: calls
// of different callers with no key would join each other.
var ErrNoRepeatID = errors.New("idempotency: the repeat request has no id")

// RepeatRequest is a heavy call that may repeat another.
type RepeatRequest struct {
	// ID is the key: a hash of the caller and the Idempotency-Key, or of
	// the caller and the request (mode auto). Ids never cross callers.
	ID          string
	User        string // the caller's user id: its kept answers are bounded apart from others'
	Fingerprint string // a hash of the request
	CID         string // the call's request id
	// Replay makes a finished call's kept answer answer this call (an
	// Idempotency-Key was sent). false: it only joins a call running.
	Replay bool
	// Peek returns a repeat of a call running at once (RepeatJoined, Of
	// set, Answer nil) rather than waiting for its answer; Repeat.Wait
	// then waits for that call to end. For the decision service, which
	// never sees an answer and tells the app at once.
	Peek bool
}

// RepeatOutcome is what Repeater.Repeat found.
type RepeatOutcome int

// The outcomes of Repeater.Repeat.
const (
	// RepeatFirst: no call with the key runs; this one runs, holding the
	// key until Finish.
	RepeatFirst RepeatOutcome = iota
	// RepeatReplayed: the call with the key finished and its answer was
	// kept; this call gets it at once.
	RepeatReplayed
	// RepeatJoined: the call with the key was running; this call waited
	// for it and gets its answer.
	RepeatJoined
	// RepeatReused: the key names a different request (422).
	RepeatReused
)

// The errors of Repeater.Repeat that are not the store's.
var (
	// ErrRepeatWait: the call it repeats ran longer than max_hold_seconds
	// while this one waited.
	ErrRepeatWait = errors.New("the call this one repeats ran past max_hold_seconds")
	// ErrNoRepeatStore: the lane store keeps no idempotency entries.
	ErrNoRepeatStore = errors.New("the lane store keeps no idempotency entries")
)

// Repeat is one call's passage through idempotency: what Repeater.Repeat
// found and, for the first call, the key it holds until Finish. Safe for
// concurrent use.
type Repeat struct {
	Outcome RepeatOutcome
	Of      string // the cid of the call repeated (Replayed, Joined)
	Answer  []byte // its answer (Replayed, Joined)

	rep   *Repeater
	st    repeat.Store
	cfg   settings.Config
	req   RepeatRequest
	token string
	// ofToken is the running call a Peek repeat found; until is when its
	// Wait gives up (max_hold_seconds from Repeater.Repeat).
	ofToken string
	until   time.Time
	stop    chan struct{} // closed by Finish: the marker's refresh ends
	done    chan struct{} // closed when the refresh has ended
	finish  sync.Once
}

// repeatPoll bounds how often the watch of a call joined (joins.go) reads
// its entry: from repeatPollFirst, doubling up to repeatPollMax. A repeat
// learns of the answer at most repeatPollMax late; however many repeats
// join one call, its gateway reads the entry 10 times a second at most.
const (
	repeatPollFirst = 5 * time.Millisecond
	repeatPollMax   = 100 * time.Millisecond
)

// autoKeep is how long mode auto keeps a finished answer: only for the
// repeats that joined the call while it ran to read it (they poll every
// repeatPollMax); a call arriving later runs (replaceFinished).
const autoKeep = 10 * time.Second

// Mode returns the idempotency settings in force; mode off when the
// gate's mode is off (nothing is gated then), and for a nil Repeater.
func (rep *Repeater) Mode(ctx context.Context) settings.Idempotency {
	if rep == nil || rep.g == nil || rep.g.Source == nil {
		return settings.Idempotency{Mode: settings.IdempotencyOff}
	}
	cfg, _ := rep.g.Config(ctx)
	if cfg.Mode == settings.ModeOff || cfg.Idempotency.Mode == "" {
		cfg.Idempotency.Mode = settings.IdempotencyOff
	}
	return cfg.Idempotency
}

// Repeat looks up req's key. It returns RepeatFirst (claimed: the caller
// runs the call and must Finish the Repeat), RepeatReplayed or
// RepeatJoined (Answer and Of set: the caller answers with it), or
// RepeatReused. A repeat of a call running waits for it, holding nothing
// but counted as a waiting call (joins.go: past wait.max_waiting_per_user
// or wait.max_waiting it returns ErrRepeatWaiters at once), on the one
// watch of the key its process keeps, until that call finishes (its answer
// kept: RepeatJoined; not kept: this call claims the key and runs), ctx
// ends (ctx's error) or max_hold_seconds pass (ErrRepeatWait). A store
// failure (or the gate's skip window: capgate.ErrSkipped) returns an error
// and a nil Repeat: the caller runs the call as if idempotency were off,
// and says why on its line (AdmitOptions.DedupErr).
func (rep *Repeater) Repeat(ctx context.Context, req RepeatRequest) (*Repeat, error) {
	if req.ID == "" {
		return nil, ErrNoRepeatID // no key: it would join whoever else sent none
	}
	if rep == nil || rep.g == nil {
		return nil, ErrNoRepeatStore
	}
	g := rep.g
	st := rep.caps().Idempotency
	if st == nil {
		return nil, ErrNoRepeatStore
	}
	cfg, err := g.Config(ctx)
	if err != nil {
		return nil, err
	}
	r := &Repeat{rep: rep, st: st, cfg: cfg, req: req, token: randhex.String(16)}
	lease := time.Duration(cfg.LeaseSeconds) * time.Second
	waitUntil := time.Now().Add(time.Duration(cfg.MaxHoldSeconds) * time.Second)
	for {
		if g.Skipping() {
			if g.Observer != nil {
				g.Observer.StoreSkipped("idempotency")
			}
			return nil, capgate.ErrSkipped
		}
		mine := repeat.Entry{Token: r.token, CID: req.CID, Fingerprint: req.Fingerprint, User: userTag(req.User)}
		sctx, cancel := rep.storeCtx(ctx)
		cur, claimed, err := st.ClaimRepeat(sctx, req.ID, mine, lease, !req.Replay)
		cancel()
		if err != nil {
			return nil, r.failed(ctx, "idempotency claim", err)
		}
		if claimed {
			r.Outcome = RepeatFirst
			r.startTouching(lease, time.Duration(cfg.RenewSeconds)*time.Second)
			return r, nil
		}
		if cur.Fingerprint != req.Fingerprint {
			r.Outcome = RepeatReused
			return r, nil
		}
		if cur.Answer != nil {
			r.Outcome, r.Of, r.Answer = RepeatReplayed, cur.CID, cur.Answer
			return r, nil
		}
		if req.Peek {
			r.Outcome, r.Of, r.ofToken, r.until = RepeatJoined, cur.CID, cur.Token, waitUntil
			return r, nil
		}
		// Running: wait for it, holding nothing, counted as a waiter.
		e, ok, err := r.awaitEnd(ctx, cur.Token, waitUntil)
		if err != nil {
			return nil, err
		}
		if ok && e.Token == cur.Token {
			r.Outcome, r.Of, r.Answer = RepeatJoined, e.CID, e.Answer
			return r, nil
		}
		// Gone (not kept) or another call's: claim again.
	}
}

// Wait waits, holding nothing, until the running call a Peek repeat
// found has ended (its entry gone, holding an answer, or another call's):
// nil then. It waits counted as a waiting call, as Repeater.Repeat's
// joiners do (ErrRepeatWaiters at once past the bounds). It returns
// ErrRepeatWait once max_hold_seconds have passed since Repeater.Repeat,
// ctx's error (wrapped) when ctx ends, or the store's.
// It returns nil at once for any other Repeat.
func (r *Repeat) Wait(ctx context.Context) error {
	if r == nil || r.ofToken == "" {
		return nil
	}
	_, _, err := r.awaitEnd(ctx, r.ofToken, r.until)
	return err
}

// failed records a store failure of op (a caller that gave up is not one)
// and returns it wrapped. Idempotency can only turn deduplication off,
// never limiting: a full, failing or slow idempotency store costs this
// call its deduplication (its line says why: dedup_error), and the lane
// store's skip window stays as it was (repeatFailed).
func (r *Repeat) failed(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w: %w", errRepeatGone, ctx.Err())
	}
	r.rep.repeatFailed(op, err)
	return fmt.Errorf("%s: %w", op, err)
}

// repeatFailed records a failure of the idempotency store: told to the
// gate's Observer and logged as a lane store failure is, but it never
// opens the skip window, which would let every call of every user run
// uncounted.
func (rep *Repeater) repeatFailed(op string, err error) {
	g := rep.g
	if g.Observer != nil {
		g.Observer.StoreError(op, err)
	}
	logger := g.Logger
	if logger == nil {
		logger = slog.Default()
	}
	logger.Warn("capacity idempotency store failed: the call runs without deduplication", "op", op, "error", err)
}

// storeDeadline is the longest one idempotency store operation may take:
// the lane store's own bound, or capgate.DefaultStoreDeadline when it
// states none (as the gate bounds its lane operations).
func (rep *Repeater) storeDeadline() time.Duration {
	if d := rep.caps().Deadline; d > 0 {
		return d
	}
	return capgate.DefaultStoreDeadline
}

// caps returns what the gate's lane store offers; nothing without one.
func (rep *Repeater) caps() capgate.StoreCaps {
	if rep.g.Store == nil {
		return capgate.StoreCaps{}
	}
	return rep.g.Store.Caps()
}

// storeCtx bounds one idempotency store operation by the store's
// deadline, so a slow store costs a call its deduplication, not its wait.
func (rep *Repeater) storeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, rep.storeDeadline())
}

// userTag is the tag by which a repeat.Store bounds a user's entries:
// a hash of the user id, 16 hex digits (never a user id in the store).
func userTag(user string) string {
	h := sha256.Sum256([]byte(user))
	return hex.EncodeToString(h[:8])
}

// errRepeatGone is the error of a call whose caller left before it
// learnt whether it repeats one.
var errRepeatGone = errors.New("caller gone while waiting for the call it repeats")

// startTouching keeps the first call's marker alive while it runs: a
// marker lives one lease, so the repeats of a call whose gateway died run
// once it has expired.
func (r *Repeat) startTouching(lease, every time.Duration) {
	r.stop, r.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(r.done)
		defer func() { _ = recover() }() // a failing refresh never fails the call
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-r.stop:
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), r.rep.storeDeadline())
			_, err := r.st.TouchRepeat(ctx, r.req.ID, r.token, lease)
			cancel()
			if err != nil {
				r.rep.repeatFailed("idempotency touch", err)
			}
		}
	}()
}

// Finish ends the first call's hold on its key: answer (nil: none worth
// keeping) is kept for its repeats — within the byte bounds, for
// ttl_seconds with an Idempotency-Key, else only for the repeats that
// joined it — or the key is let go, so the next repeat runs. It does
// nothing for a Repeat that is not RepeatFirst, or a second time, and runs
// even when ctx is done (bounded by the store's deadline). It returns
// whether the answer was kept.
func (r *Repeat) Finish(ctx context.Context, answer []byte) (kept bool) {
	if r == nil || r.Outcome != RepeatFirst || r.stop == nil {
		return false
	}
	r.finish.Do(func() {
		close(r.stop)
		<-r.done
		idem := r.cfg.Idempotency
		keep := idem.TTL()
		if !r.req.Replay {
			keep = min(keep, autoKeep)
		}
		if len(answer) > idem.MaxAnswerBytes() {
			answer = nil
		}
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.rep.storeDeadline())
		defer cancel()
		var err error
		b := repeat.Bound{User: userTag(r.req.User), Total: idem.MaxTotalBytes(), PerUser: idem.MaxUserBytes()}
		kept, err = r.st.FinishRepeat(fctx, r.req.ID, r.token, answer, keep, b)
		if err != nil {
			r.rep.repeatFailed("idempotency finish", err)
		}
	})
	return kept
}

// MaxAnswerBytes is the largest answer the first call may keep
// (idempotency.max_answer_kib as it was read for the call).
func (r *Repeat) MaxAnswerBytes() int { return r.cfg.Idempotency.MaxAnswerBytes() }

// Repeated returns g's admission of a call answered by the call it
// repeats (rp's outcome RepeatReplayed or RepeatJoined), or of one that
// gave up waiting for it (err; rp nil): capgate.Gate.AdmitWith with AdmitOptions.Repeated, whose line
// says decision replayed or joined and dedup_of the cid of the call it
// repeated. g is the gate of the call's task: the Repeater's own, or one
// Gate.ForTask derived from it.
func Repeated(ctx context.Context, g *capgate.Gate, call capgate.Call, rp *Repeat, err error) *capgate.Admission {
	var of string
	replayed := false
	if rp != nil {
		of, replayed = rp.Of, rp.Outcome == RepeatReplayed
	}
	a := g.AdmitWith(ctx, call, capgate.AdmitOptions{Repeated: true, Replayed: replayed, DedupOf: of})
	if err != nil {
		a.Interrupt(err)
	}
	return a
}
