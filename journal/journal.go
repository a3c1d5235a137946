package journal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/capgate/capgate/internal/randhex"
)

// Store keeps the groups' rosters and the incarnations' journals:
// redis.Store (a journal outlives the process), or memory.Store (for tests
// of processes sharing one in-process store: a real process's in-process
// lanes end with it and need no journal). Times are the store's clock. Its
// methods return the store's errors.
type Store interface {
	// JournalRenew sets incarnation self's liveness in group to ttl from
	// now, registering it if it is not (again, after it lapsed), keeps the
	// group's roster at least keep, and returns the group's other
	// incarnations, each with the liveness it has left (≤ 0: lapsed, or
	// it said goodbye).
	JournalRenew(ctx context.Context, group, self string, ttl, keep time.Duration) (map[string]time.Duration, error)
	// JournalWrite applies a batch to self's journal in group in one
	// round trip: each token of add holds leases in its keys, each token
	// of remove is forgotten, and, when it adds, the journal is kept at
	// least ttl. A journal left empty is gone.
	JournalWrite(ctx context.Context, group, self string, add map[string][]string, remove []string, ttl time.Duration) error
	// JournalRead returns incarnation id's records (token → keys) once it
	// is dead; while it lives, dead is false and left nil.
	JournalRead(ctx context.Context, group, id string) (left map[string][]string, dead bool, err error)
	// JournalForget forgets tokens in id's journal, and drops id from the
	// roster once its journal is empty and it is dead.
	JournalForget(ctx context.Context, group, id string, tokens []string) error
	// JournalLeave says goodbye for self: it is dead from now on, and gone
	// from the roster if its journal is empty (else the first live
	// incarnation of the group to renew releases what is left).
	JournalLeave(ctx context.Context, group, self string) error
}

// The defaults.
const (
	// DefaultHold is how long a process waits after Open before it
	// releases a dead incarnation's leases (capgate serve --restart-hold):
	// longer than the decision service's clients take to register a call
	// that still runs again (every 0.25 s), so such a call is counted
	// twice for a moment rather than not at all.
	DefaultHold = time.Second
	// DefaultLiveness is how long an incarnation counts as alive after its
	// last renewal; it renews every quarter of it. A killed incarnation's
	// leases are released this long after its last renewal at the
	// earliest (and Hold after its successor started).
	DefaultLiveness = time.Second
	// DefaultDeadline bounds each of the journal's own round trips (its
	// writes, renewals and reclaims), for a store with no deadline of its
	// own.
	DefaultDeadline = 5 * time.Second
	// MinRecordTTL is the least a journal is kept after a record was
	// written: twice the call's max hold, at least this.
	MinRecordTTL = time.Minute
)

// Options configure a Journal (Open).
type Options struct {
	// Store keeps the journal (required).
	Store Store
	// Group names the incarnations that release each other's leases once
	// dead (required): the process's kind, task id and instance, e.g.
	// "gateway:api-1:10.0.0.5:8080". Two processes of one group never
	// share a journal (each incarnation has its own id).
	Group string
	// Release releases a dead incarnation's leases (token → keys) and says
	// how many calls it released (required): Gate.ReleaseLeft of the
	// process's gate.
	Release func(ctx context.Context, left map[string][]string) (int, error)
	// Hold is how long after Open a dead incarnation's leases are released
	// at the earliest. 0: as soon as it is proven dead. Negative: refused.
	Hold time.Duration
	// Liveness is how long this incarnation counts as alive after its
	// last renewal; it renews every quarter of it. 0: DefaultLiveness.
	Liveness time.Duration
	// Deadline bounds each of the journal's round trips. 0:
	// DefaultDeadline.
	Deadline time.Duration
	// Logger gets the journal's warnings and what it released. nil:
	// slog.Default().
	Logger *slog.Logger
}

// Journal is one incarnation's journal: open with Open, record with Add
// and Remove, close with Close once the calls in flight have ended. Safe
// for concurrent use.
type Journal struct {
	store    Store
	group    string
	id       string
	release  func(ctx context.Context, left map[string][]string) (int, error)
	hold     time.Duration
	liveness time.Duration
	deadline time.Duration
	logger   *slog.Logger
	started  time.Time

	q queue

	stop     chan struct{}   // closed by stopLoop: the liveness loop ends
	stopOnce sync.Once       // stopLoop closes stop once
	loopDone chan struct{}   // closed when the liveness loop has ended
	closing  sync.Once       // Close runs once
	closeErr error           // Close's result
	noted    map[string]bool // live peers logged once past the hold; the loop's own
	failed   warnEvery       // renewals and reclaims failed; the loop's own (and Close's, after it)
}

// Open opens a new incarnation's journal in o.Group: it registers its
// liveness (a failure is logged, and retried at the next renewal: the
// journal records its calls meanwhile), and starts the loop that renews
// it and releases the leases of the group's dead incarnations. It returns
// an error only for options it refuses.
func Open(ctx context.Context, o Options) (*Journal, error) {
	switch {
	case o.Store == nil:
		return nil, errors.New("journal: no store")
	case o.Group == "":
		return nil, errors.New("journal: no group (the process's kind, task id and instance)")
	case o.Release == nil:
		return nil, errors.New("journal: no Release (the gate's ReleaseLeft)")
	case o.Hold < 0:
		return nil, fmt.Errorf("journal: hold %v: want 0 or more", o.Hold)
	case o.Liveness < 0:
		return nil, fmt.Errorf("journal: liveness %v: want 0 (the default) or more", o.Liveness)
	case o.Deadline < 0:
		return nil, fmt.Errorf("journal: deadline %v: want 0 (the default) or more", o.Deadline)
	}
	j := &Journal{store: o.Store, group: o.Group, id: randhex.String(8), release: o.Release, hold: o.Hold,
		liveness: o.Liveness, deadline: o.Deadline, logger: o.Logger, started: time.Now(),
		stop: make(chan struct{}), loopDone: make(chan struct{}), noted: map[string]bool{}}
	if j.liveness == 0 {
		j.liveness = DefaultLiveness
	}
	if j.deadline == 0 {
		j.deadline = DefaultDeadline
	}
	if j.logger == nil {
		j.logger = slog.Default()
	}
	j.q.init(j)
	next := j.round(ctx, false)
	go j.live(next)
	return j, nil
}

// ID returns the incarnation's id.
func (j *Journal) ID() string { return j.id }

// Group returns the incarnation's group.
func (j *Journal) Group() string { return j.group }

// Add queues the record that token holds leases in keys, kept at least
// twice maxHold (MinRecordTTL at least). It sends nothing. After Close it
// does nothing.
func (j *Journal) Add(token string, keys []string, maxHold time.Duration) {
	j.q.add(token, keys, max(2*maxHold, MinRecordTTL))
}

// AddNow records that token holds leases in keys as Add does, and writes
// it before it returns, with whatever else is queued (calls recording at
// once share one write): one round trip, for a caller that must know the
// record is in the store before it goes on — the decision service, which
// answers the app only then, so an app that starts its work has its call
// journalled. A write that fails is retried as Add's are, and its error
// returned. After Close it does nothing.
func (j *Journal) AddNow(ctx context.Context, token string, keys []string, maxHold time.Duration) error {
	if !j.q.add(token, keys, max(2*maxHold, MinRecordTTL)) {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, j.deadline)
	defer cancel()
	return j.q.write(ctx)
}

// Remove queues the removal of token's record, once its leases are
// released; a record still queued is dropped instead, never written. It
// sends nothing. After Close it does nothing.
func (j *Journal) Remove(token string) { j.q.remove(token) }

// Close says goodbye, once the calls in flight have ended: it stops the
// renewals, writes what is queued (the removals of the calls released
// last), releases at once the leases of the group's dead incarnations
// still held back by the hold, and leaves the roster (Store.JournalLeave).
// Records of calls still running stay, and the group's next live
// incarnation releases them at once. It returns the first error; calling
// it again returns the same.
func (j *Journal) Close(ctx context.Context) error {
	j.closing.Do(func() {
		j.stopLoop()
		wctx, cancel := context.WithTimeout(ctx, j.deadline)
		werr := j.q.close(wctx)
		cancel()
		j.round(ctx, true)
		lctx, cancel := context.WithTimeout(ctx, j.deadline)
		defer cancel()
		lerr := j.store.JournalLeave(lctx, j.group, j.id)
		if lerr != nil {
			lerr = fmt.Errorf("leave the journal's roster (its liveness lapses in %v): %w", j.liveness, lerr)
		}
		j.closeErr = errors.Join(werr, lerr)
	})
	return j.closeErr
}

// stopLoop ends the liveness loop and waits for it.
func (j *Journal) stopLoop() {
	j.stopOnce.Do(func() { close(j.stop) })
	<-j.loopDone
}

// warnEvery counts a failure and says when to log it: at the first one,
// then at most once per warnInterval.
type warnEvery struct {
	n      int
	logged time.Time
}

// warnInterval is how often, at most, a kind of journal failure is logged.
const warnInterval = time.Minute

// note counts one (or n) more and reports whether to log now, with the
// count since the last log.
func (w *warnEvery) note(n int) (log bool, count int) {
	w.n += n
	if now := time.Now(); w.logged.IsZero() || now.Sub(w.logged) >= warnInterval {
		w.logged, count, w.n = now, w.n, 0
		return true, count
	}
	return false, 0
}
