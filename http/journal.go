package http

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// A gateway's journal: the store leases of the calls it holds, recorded in
// the lane store, so that its next incarnation (the same task id,
// listening where it listened) releases what a killed one left instead of
// leaving those places taken for lease_seconds (Gateway.Recover). The
// next incarnation journals under the same name: the records it found stay
// until it has released their leases, so one killed during its hold leaves
// them to the one after it.
//
// A gated call only queues its record, once it holds leases in the store,
// and the record's removal, after it released them: nothing is sent on its
// path. A timer writes what is queued journalEvery after the first entry,
// in one round trip (Journal.JournalWrite); a record and its removal
// queued before a write cancel out, so a call that begins and ends between
// two writes is never written. At most journalMaxQueued entries wait; past that a new one is
// dropped, with a warning at most once a minute: a dropped record leaves
// that call's lease to expire by itself after a crash (lease_seconds, as
// with no journal), a dropped removal a record whose release by the next
// incarnation finds nothing to release. A write that fails is put back and
// tried again journalRetry later. A gateway killed before a call's record
// was written leaves that lease for lease_seconds, as with no journal.

// Journal is where a Gateway records the store leases of the calls it
// holds (GatewayConfig.Journal). redis.Store is one; a memory store needs
// none, its lanes end with the process. Its methods return the store's
// errors.
type Journal interface {
	// JournalWrite records under name, in one round trip, that each token
	// of add holds leases in its keys, forgets each token of remove, and,
	// when it adds, keeps the record at least ttl.
	JournalWrite(ctx context.Context, name string, add map[string][]string, remove []string, ttl time.Duration) error
	// JournalRead returns every lease recorded under name (token → keys),
	// leaving them there.
	JournalRead(ctx context.Context, name string) (map[string][]string, error)
}

// DefaultRestartHold is how long after Recover a gateway releases the
// leases a killed predecessor left (capgate serve --restart-hold), as the
// decision service's decide.DefaultRecoverDelay.
const DefaultRestartHold = time.Second

const (
	// journalEvery is how long after the first entry queued the journal
	// is written.
	journalEvery = 50 * time.Millisecond
	// journalRetry is how long after a failed write the next is tried.
	journalRetry = time.Second
	// journalMaxQueued bounds the entries waiting to be written.
	journalMaxQueued = 10000
	// journalWriteTimeout bounds a write of the timer's, for a store
	// with no deadline of its own.
	journalWriteTimeout = 5 * time.Second
	// journalWarnEvery is how often, at most, a kind of journal failure
	// is logged.
	journalWarnEvery = time.Minute
)

// journal queues a gateway's records and writes them in batches; see
// above. Create one with newJournal. Safe for concurrent use.
type journal struct {
	store  Journal
	logger *slog.Logger
	every  time.Duration
	max    int
	// hold returns a channel that fires d from now, and its stop: the
	// wait before a predecessor's leases are released (Recover).
	hold func(d time.Duration) (<-chan time.Time, func() bool)

	mu      sync.Mutex
	name    string                  // "" until Recover: nothing is queued; requires mu held
	queue   map[string]journalEntry // token → what to write; requires mu held
	ttl     time.Duration           // the longest ttl of the records queued; requires mu held
	timer   *time.Timer             // requires mu held
	armed   bool                    // a round is due or running; requires mu held
	closing bool                    // close began; requires mu held
	closed  bool                    // nothing more is queued; requires mu held
	dropped warnEvery               // entries dropped, the queue full; requires mu held
	failed  warnEvery               // writes failed; requires mu held
	stop    chan struct{}           // closed by close: release a predecessor's leases now; requires mu held

	writing    sync.Mutex     // one write at a time, in the order the batches were taken
	rounds     sync.WaitGroup // the timer's rounds running
	recovering sync.WaitGroup // Recover's release
}

// journalEntry is a token's entry in the queue: its record (add, the keys
// it holds leases in, the ttl) or its removal.
type journalEntry struct {
	add  bool
	keys []string
}

// warnEvery counts a failure and says when to log it: at the first one,
// then at most once per journalWarnEvery.
type warnEvery struct {
	n      int
	logged time.Time
}

// note counts one (or n) more and reports whether to log now, with the
// count since the last log.
func (w *warnEvery) note(n int) (log bool, count int) {
	w.n += n
	if now := time.Now(); w.logged.IsZero() || now.Sub(w.logged) >= journalWarnEvery {
		w.logged, count, w.n = now, w.n, 0
		return true, count
	}
	return false, 0
}

func newJournal(store Journal, logger *slog.Logger) *journal {
	return &journal{store: store, logger: logger, every: journalEvery, max: journalMaxQueued,
		hold: func(d time.Duration) (<-chan time.Time, func() bool) {
			t := time.NewTimer(d)
			return t.C, t.Stop
		},
		queue: map[string]journalEntry{}, stop: make(chan struct{})}
}

// start names the journal: from now on it records. It reports false when
// the journal is named already or closed.
func (j *journal) start(name string) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.name != "" || j.closed {
		return false
	}
	j.name = name
	return true
}

// add queues the record that token holds leases in keys, to keep at least
// ttl. It sends nothing.
func (j *journal) add(token string, keys []string, ttl time.Duration) {
	j.mu.Lock()
	if j.name == "" || j.closed {
		j.mu.Unlock()
		return
	}
	if len(j.queue) >= j.max {
		j.dropLocked(1)
		return // unlocked
	}
	j.queue[token] = journalEntry{add: true, keys: keys}
	j.ttl = max(j.ttl, ttl)
	j.armLocked(j.every)
	j.mu.Unlock()
}

// remove queues the removal of token's record, once its leases are
// released; a record still queued is dropped instead, never written. It
// sends nothing.
func (j *journal) remove(token string) {
	j.mu.Lock()
	if j.name == "" || j.closed {
		j.mu.Unlock()
		return
	}
	if e, ok := j.queue[token]; ok && e.add {
		delete(j.queue, token)
		j.mu.Unlock()
		return
	}
	if len(j.queue) >= j.max {
		j.dropLocked(1)
		return // unlocked
	}
	j.queue[token] = journalEntry{}
	j.armLocked(j.every)
	j.mu.Unlock()
}

// dropLocked counts n entries dropped, the queue full, and logs it at
// most once a minute. Requires mu held; it unlocks it.
func (j *journal) dropLocked(n int) {
	log, count := j.dropped.note(n)
	j.mu.Unlock()
	if log {
		j.logger.Warn("capgate: the journal's queue is full; entries dropped (a crash leaves those calls' leases for lease_seconds)",
			"dropped", count, "max_queued", j.max)
	}
}

// armLocked sets the timer to write the journal d from now, unless a
// round is due or running already. Requires mu held.
func (j *journal) armLocked(d time.Duration) {
	if j.armed || j.closed {
		return
	}
	j.armed = true
	if j.timer == nil {
		j.timer = time.AfterFunc(d, j.round)
	} else {
		j.timer.Reset(d)
	}
}

// round is the timer's: it writes what is queued, then sets the timer
// again if more was queued meanwhile (journalRetry later if the write
// failed).
func (j *journal) round() {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return
	}
	j.rounds.Add(1) // before closed can be set: close waits for this round
	j.mu.Unlock()
	defer j.rounds.Done()
	var err error
	defer func() {
		if r := recover(); r != nil {
			j.logger.Error("capgate: the journal's write panicked", "panic", fmt.Sprint(r))
			err = errors.New("panic")
		}
		j.mu.Lock()
		defer j.mu.Unlock()
		j.armed = false
		if len(j.queue) > 0 {
			d := j.every
			if err != nil {
				d = journalRetry
			}
			j.armLocked(d)
		}
	}()
	// Not the request's context: the write outlives the calls it records.
	ctx, cancel := context.WithTimeout(context.Background(), journalWriteTimeout)
	defer cancel()
	err = j.write(ctx)
}

// write writes what is queued in one round trip. A batch that fails is put
// back, behind the entries queued meanwhile (a removal queued during the
// write stays: the record it removes may have been written).
func (j *journal) write(ctx context.Context) error {
	j.writing.Lock()
	defer j.writing.Unlock()
	j.mu.Lock()
	batch, ttl, name := j.queue, j.ttl, j.name
	if len(batch) == 0 || name == "" {
		j.mu.Unlock()
		return nil
	}
	j.queue, j.ttl = make(map[string]journalEntry, len(batch)), 0
	j.mu.Unlock()

	add := make(map[string][]string, len(batch))
	var remove []string
	for token, e := range batch {
		if e.add {
			add[token] = e.keys
		} else {
			remove = append(remove, token)
		}
	}
	err := j.store.JournalWrite(ctx, name, add, remove, ttl)
	if err == nil {
		return nil
	}
	j.mu.Lock()
	over := 0
	for token, e := range batch {
		if _, ok := j.queue[token]; ok {
			continue // e's record and its removal, queued since: keep the removal
		}
		if len(j.queue) >= j.max {
			over++
			continue
		}
		j.queue[token] = e
	}
	j.ttl = max(j.ttl, ttl)
	log, count := j.failed.note(1)
	if over > 0 {
		j.dropLocked(over) // unlocks
	} else {
		j.mu.Unlock()
	}
	if log {
		j.logger.Warn("capgate: write the journal (retried; calls go on: a crash meanwhile leaves their leases for lease_seconds)",
			"error", err, "failures", count)
	}
	return fmt.Errorf("write the journal: %w", err)
}

// close releases now a predecessor's leases still held, stops the timer,
// waits for a round running, and writes what is still queued with ctx.
// Entries queued after it are ignored.
func (j *journal) close(ctx context.Context) error {
	j.mu.Lock()
	if j.closing {
		j.mu.Unlock()
		return nil
	}
	j.closing = true
	close(j.stop)
	j.mu.Unlock()
	j.recovering.Wait() // their removals queued
	j.mu.Lock()
	j.closed = true
	if j.timer != nil {
		j.timer.Stop()
	}
	j.mu.Unlock()
	j.rounds.Wait()
	return j.write(ctx)
}

// Recover starts the gateway's journal, named by its gate's task id and
// instance: the address it listens on, as bound (two live gateways can't
// listen on one; a restarted one listens where its predecessor did). It
// reads the leases a previous incarnation recorded there and never
// released (it was killed) and releases them hold later, in the
// background, or at once when ctx ends or the gateway closes; their
// records are removed then. release waits for that and says how many calls
// it released. Call it once, after the gateway's listener is bound and
// before it serves: what it reads must be the predecessor's alone. Until
// it is called nothing is journalled. Without a Journal it does nothing.
//
// Nobody can tell a call that ended with the killed gateway from one the
// API still runs (a sync worker finishes a view whose client is gone, and
// no client is left to register it again), so hold chooses between two
// errors. Released early, the places of the calls that ended are free at
// once, and a call the API still runs goes uncounted until it ends
// (bounded by the API's own request timeout). Held, those places stay
// taken for hold; past lease_seconds it changes nothing, the leases have
// expired by then.
//
// It returns an error when called again, and when the journal can't be
// read: the predecessor's leases then expire by themselves, and the
// gateway journals its own calls nonetheless.
func (g *Gateway) Recover(ctx context.Context, instance string, hold time.Duration) (release func() (int, error), err error) {
	none := func() (int, error) { return 0, nil }
	j := g.journal
	if j == nil {
		return none, nil
	}
	name := "gateway:" + g.cfg.Gate.TaskID + ":" + instance
	if !j.start(name) {
		return nil, errors.New("recover: the journal is started already (or closed)")
	}
	left, err := j.store.JournalRead(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("read the previous incarnation's leases: %w", err)
	}
	if len(left) == 0 {
		return none, nil
	}
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	j.mu.Lock()
	stopped := j.stop
	j.mu.Unlock()
	j.recovering.Add(1)
	go func() {
		defer j.recovering.Done()
		fired, stop := j.hold(hold)
		defer stop()
		select {
		case <-fired:
		case <-ctx.Done(): // shutting down: release now
		case <-stopped:
		}
		n, err := g.cfg.Gate.ReleaseLeft(context.WithoutCancel(ctx), left)
		for token := range left {
			j.remove(token) // released, or left to expire by itself
		}
		done <- result{n, err}
	}()
	var once sync.Once
	var res result
	return func() (int, error) {
		once.Do(func() { res = <-done })
		return res.n, res.err
	}, nil
}

// Close writes the journal's last entries (the removals of the calls
// released last: after a clean shutdown the journal is empty) and stops
// it, releasing at once a predecessor's leases Recover still holds. Call
// it once the calls in flight have ended: the records of calls that end
// later stay, and the next incarnation releases their leases. It returns
// the write's error. Without a Journal it does nothing.
func (g *Gateway) Close(ctx context.Context) error {
	if g.journal == nil {
		return nil
	}
	return g.journal.close(ctx)
}
