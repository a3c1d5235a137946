package capgate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/capgate/capgate/settings"
)

// The config key "idempotency" and the gate's side of idempotent heavy
// calls: a call that repeats one still running (anywhere in the cluster)
// waits for it and gets its answer instead of running again, and, with an
// Idempotency-Key, a repeat of a call that finished gets its kept answer.
// The gateway (capgatehttp) says what a request is (its key and its
// fingerprint) and what its answer was; the gate keeps the entries in the
// lane store (an IdempotencyStore) and says whether a call is the first,
// a repeat, or a reuse of a key for another request.

// IdempotencyStore is the optional part of a LaneStore that keeps the
// entries of idempotent calls: per key, the call running (a marker that
// expires unless touched) or its kept answer (expiring after the ttl).
// Keys are opaque ids the gate makes (hex hashes); the store lays them
// out (on a Redis Cluster each in a hash slot of its own). Every error
// is a store failure: the call runs as it would without idempotency.
// memory.Store and redis.Store implement it.
type IdempotencyStore interface {
	// ClaimRepeat sets id's entry to e, a call running, expiring after
	// ttl, when id has none; else it changes nothing and returns the entry
	// it has (claimed false). With replaceFinished, an entry holding an
	// answer counts as none.
	ClaimRepeat(ctx context.Context, id string, e RepeatEntry, ttl time.Duration, replaceFinished bool) (cur RepeatEntry, claimed bool, err error)
	// GetRepeat returns id's entry; ok is false when there is none.
	GetRepeat(ctx context.Context, id string) (e RepeatEntry, ok bool, err error)
	// TouchRepeat makes the entry of the running call token at id expire
	// ttl from now; false (and nothing changed) when id holds no running
	// call of token.
	TouchRepeat(ctx context.Context, id, token string, ttl time.Duration) (bool, error)
	// FinishRepeat ends the running call token at id. With answer
	// non-nil the entry keeps it for keep, if every answer the store
	// keeps then fits in b.Total bytes and the answers of b.User in
	// b.PerUser; else (answer nil, or no room: kept false) the entry is
	// deleted. Nothing changes when id holds no running call of token.
	FinishRepeat(ctx context.Context, id, token string, answer []byte, keep time.Duration, b KeepBound) (kept bool, err error)
}

// KeepBound bounds the answers an IdempotencyStore keeps: in all, and per
// user, so that one user can neither fill the store nor evict the answers
// of others.
type KeepBound struct {
	User    string // whose answer: an opaque tag of the caller (RepeatEntry.User), [0-9a-f] or ""
	Total   int64  // bytes of all the answers kept, at most
	PerUser int64  // bytes of one user's answers kept, at most
}

// RepeatEntry is what the store keeps for one key.
type RepeatEntry struct {
	Token       string // the running call's own random token
	CID         string // its request id: the dedup_of of its repeats
	Fingerprint string // a hash of the request (method, path, query, body, the headers that change the answer)
	Answer      []byte // the kept answer; nil while the call runs
	// User tags whose entry it is (the gate sets a hash of the user id,
	// hex): the store bounds each user's entries (KeepBound).
	User string
}

// ErrNoRepeatID is Gate.Repeat's error for a request with no ID: calls
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

// RepeatOutcome is what Gate.Repeat found.
type RepeatOutcome int

// The outcomes of Gate.Repeat.
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

// The errors of Gate.Repeat that are not the store's.
var (
	// ErrRepeatWait: the call it repeats ran longer than max_hold_seconds
	// while this one waited.
	ErrRepeatWait = errors.New("the call this one repeats ran past max_hold_seconds")
	// ErrNoRepeatStore: the lane store keeps no idempotency entries.
	ErrNoRepeatStore = errors.New("the lane store keeps no idempotency entries")
)

// Repeat is one call's passage through idempotency: what Gate.Repeat found
// and, for the first call, the key it holds until Finish. Safe for
// concurrent use.
type Repeat struct {
	Outcome RepeatOutcome
	Of      string // the cid of the call repeated (Replayed, Joined)
	Answer  []byte // its answer (Replayed, Joined)

	g     *Gate
	st    IdempotencyStore
	cfg   settings.Config
	req   RepeatRequest
	token string
	// ofToken is the running call a Peek repeat found; until is when its
	// Wait gives up (max_hold_seconds from Gate.Repeat).
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

// Idempotency returns the idempotency settings in force; mode off when the
// gate's mode is off (nothing is gated then).
func (g *Gate) Idempotency(ctx context.Context) settings.Idempotency {
	if g.Source == nil {
		return settings.Idempotency{Mode: settings.IdempotencyOff}
	}
	cfg, _ := g.config(ctx)
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
// watch of the key its gateway keeps, until that call finishes (its answer
// kept: RepeatJoined; not kept: this call claims the key and runs), ctx
// ends (ctx's error) or max_hold_seconds pass (ErrRepeatWait). A store failure (or the skip window: ErrSkipped)
// returns an error and a nil Repeat: the caller runs the call as if
// idempotency were off, and says why on its line (Admission.NoteRepeat).
func (g *Gate) Repeat(ctx context.Context, req RepeatRequest) (*Repeat, error) {
	if req.ID == "" {
		return nil, ErrNoRepeatID // no key: it would join whoever else sent none
	}
	st := capsOf(g.Store).Idempotency
	if st == nil {
		return nil, ErrNoRepeatStore
	}
	cfg, err := g.config(ctx)
	if err != nil {
		return nil, err
	}
	r := &Repeat{g: g, st: st, cfg: cfg, req: req, token: newToken()}
	lease := time.Duration(cfg.LeaseSeconds) * time.Second
	waitUntil := time.Now().Add(time.Duration(cfg.MaxHoldSeconds) * time.Second)
	for {
		if g.skipping() {
			g.storeSkipped("idempotency")
			return nil, ErrSkipped
		}
		mine := RepeatEntry{Token: r.token, CID: req.CID, Fingerprint: req.Fingerprint, User: userTag(req.User)}
		sctx, cancel := g.repeatCtx(ctx)
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
// nil then. It waits counted as a waiting call, as Gate.Repeat's joiners
// do (ErrRepeatWaiters at once past the bounds). It returns ErrRepeatWait
// once max_hold_seconds have passed since Gate.Repeat, ctx's error
// (wrapped) when ctx ends, or the store's.
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
	r.g.repeatFailed(op, err)
	return fmt.Errorf("%s: %w", op, err)
}

// repeatFailed records a failure of the idempotency store: told to the
// Observer and logged as a lane store failure is, but it never opens the
// skip window, which would let every call of every user run uncounted.
func (g *Gate) repeatFailed(op string, err error) {
	if g.Observer != nil {
		g.Observer.StoreError(op, err)
	}
	g.logger().Warn("capacity idempotency store failed: the call runs without deduplication", "op", op, "error", err)
}

// repeatCtx bounds one idempotency store operation by the store's
// deadline, so a slow store costs a call its deduplication, not its wait.
func (g *Gate) repeatCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, g.storeDeadline())
}

// userTag is the tag by which an IdempotencyStore bounds a user's entries:
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
			ctx, cancel := context.WithTimeout(context.Background(), r.g.storeDeadline())
			_, err := r.st.TouchRepeat(ctx, r.req.ID, r.token, lease)
			cancel()
			if err != nil {
				r.g.repeatFailed("idempotency touch", err)
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
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.g.storeDeadline())
		defer cancel()
		var err error
		b := KeepBound{User: userTag(r.req.User), Total: idem.MaxTotalBytes(), PerUser: idem.MaxUserBytes()}
		kept, err = r.st.FinishRepeat(fctx, r.req.ID, r.token, answer, keep, b)
		if err != nil {
			r.g.repeatFailed("idempotency finish", err)
		}
	})
	return kept
}

// MaxAnswerBytes is the largest answer the first call may keep
// (idempotency.max_answer_kib as it was read for the call).
func (r *Repeat) MaxAnswerBytes() int { return r.cfg.Idempotency.MaxAnswerBytes() }

// Repeated returns the admission of a call answered by the call it
// repeats (rp's outcome RepeatReplayed or RepeatJoined), or of one that
// gave up waiting for it (err; rp nil): it holds no lane place, and its
// Release writes its line (decision replayed or joined, dedup_of the
// cid of the call it repeated) and tells the Observer. In mode off it
// passes untouched, as from Admit.
func (g *Gate) Repeated(ctx context.Context, call Call, rp *Repeat, err error) *Admission {
	cfg, _ := g.config(ctx)
	a := g.newAdmission(cfg, call)
	if a.off {
		return a
	}
	a.decision = DecisionJoined
	if rp != nil {
		if rp.Outcome == RepeatReplayed {
			a.decision = DecisionReplayed
		}
		a.repeatOf = rp.Of
	}
	if err != nil {
		a.setErr(err)
	}
	g.admitted(a)
	return a
}

// NoteRepeat records why the call could not be checked for repeats (the
// store failed): it runs as it would without idempotency, and its line
// says why (dedup_error). Call it before Release.
func (a *Admission) NoteRepeat(err error) {
	if a == nil || a.off || err == nil {
		return
	}
	a.mu.Lock()
	a.repeatErr = err
	a.mu.Unlock()
}
