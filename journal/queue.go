package journal

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// The queue: a call's record and its removal are queued, never sent on
// the call's path. A timer writes what is queued writeDelay after the
// first entry, in one round trip (Store.JournalWrite); a record and its
// removal queued before a write cancel out, so a call that begins and ends
// between two writes is never written. At most maxQueued entries wait;
// past that a new one is dropped, with a warning at most once a minute: a
// dropped record leaves that call's lease to expire by itself after a
// crash (lease_seconds, as with no journal), a dropped removal a record
// whose release by another incarnation finds nothing to release. A write
// that fails is put back and tried again retryDelay later.

const (
	// writeDelay is how long after the first entry queued the journal is
	// written.
	writeDelay = 50 * time.Millisecond
	// retryDelay is how long after a failed write the next is tried.
	retryDelay = time.Second
	// maxQueued bounds the entries waiting to be written.
	maxQueued = 10000
)

// queue holds a journal's entries until they are written. Set up with
// init.
type queue struct {
	j     *Journal
	every time.Duration // writeDelay; tests shorten it
	max   int           // maxQueued; tests lower it

	mu      sync.Mutex
	entries map[string]entry // token → what to write; requires mu held
	ttl     time.Duration    // the longest ttl of the records queued; requires mu held
	keep    time.Duration    // the longest ttl of any record queued so far: the roster's; requires mu held
	timer   *time.Timer      // requires mu held
	armed   bool             // a round is due or running; requires mu held
	closed  bool             // nothing more is queued; requires mu held
	dropped warnEvery        // entries dropped, the queue full; requires mu held
	failed  warnEvery        // writes failed; requires mu held

	writing sync.Mutex     // one write at a time, in the order the batches were taken
	rounds  sync.WaitGroup // the timer's rounds running
}

// entry is a token's entry in the queue: its record (add, the keys it
// holds leases in) or its removal.
type entry struct {
	add  bool
	keys []string
}

func (q *queue) init(j *Journal) {
	q.j, q.every, q.max, q.entries, q.keep = j, writeDelay, maxQueued, map[string]entry{}, MinRecordTTL
}

// rosterKeep returns how long the roster must outlive the last renewal:
// as long as any journal of this incarnation may live.
func (q *queue) rosterKeep() time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.keep
}

// add queues the record that token holds leases in keys, to keep at least
// ttl. It reports whether the record was queued (not after close, nor
// with the queue full).
func (q *queue) add(token string, keys []string, ttl time.Duration) bool {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false
	}
	if len(q.entries) >= q.max {
		q.dropLocked(1)
		return false // unlocked
	}
	q.entries[token] = entry{add: true, keys: keys}
	q.ttl = max(q.ttl, ttl)
	q.keep = max(q.keep, ttl)
	q.armLocked(q.every)
	q.mu.Unlock()
	return true
}

// remove queues the removal of token's record; a record still queued is
// dropped instead.
func (q *queue) remove(token string) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	if e, ok := q.entries[token]; ok && e.add {
		delete(q.entries, token)
		q.mu.Unlock()
		return
	}
	if len(q.entries) >= q.max {
		q.dropLocked(1)
		return // unlocked
	}
	q.entries[token] = entry{}
	q.armLocked(q.every)
	q.mu.Unlock()
}

// dropLocked counts n entries dropped, the queue full, and logs it at
// most once a minute. Requires mu held; it unlocks it.
func (q *queue) dropLocked(n int) {
	log, count := q.dropped.note(n)
	q.mu.Unlock()
	if log {
		q.j.logger.Warn("capgate: the journal's queue is full; entries dropped (a crash leaves those calls' leases for lease_seconds)",
			"dropped", count, "max_queued", q.max)
	}
}

// armLocked sets the timer to write the journal d from now, unless a
// round is due or running already. Requires mu held.
func (q *queue) armLocked(d time.Duration) {
	if q.armed || q.closed {
		return
	}
	q.armed = true
	if q.timer == nil {
		q.timer = time.AfterFunc(d, q.round)
	} else {
		q.timer.Reset(d)
	}
}

// round is the timer's: it writes what is queued, then sets the timer
// again if more was queued meanwhile (retryDelay later if the write
// failed).
func (q *queue) round() {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	q.rounds.Add(1) // before closed can be set: close waits for this round
	q.mu.Unlock()
	defer q.rounds.Done()
	var err error
	defer func() {
		if r := recover(); r != nil {
			q.j.logger.Error("capgate: the journal's write panicked", "panic", fmt.Sprint(r))
			err = errors.New("panic")
		}
		q.mu.Lock()
		defer q.mu.Unlock()
		q.armed = false
		if len(q.entries) > 0 {
			d := q.every
			if err != nil {
				d = retryDelay
			}
			q.armLocked(d)
		}
	}()
	// Not a call's context: the write outlives the calls it records.
	ctx, cancel := context.WithTimeout(context.Background(), q.j.deadline)
	defer cancel()
	err = q.write(ctx)
}

// write writes what is queued in one round trip. A batch that fails is put
// back, behind the entries queued meanwhile (a removal queued during the
// write stays: the record it removes may have been written).
func (q *queue) write(ctx context.Context) error {
	q.writing.Lock()
	defer q.writing.Unlock()
	q.mu.Lock()
	batch, ttl := q.entries, q.ttl
	if len(batch) == 0 {
		q.mu.Unlock()
		return nil
	}
	q.entries, q.ttl = make(map[string]entry, len(batch)), 0
	q.mu.Unlock()

	add := make(map[string][]string, len(batch))
	var remove []string
	for token, e := range batch {
		if e.add {
			add[token] = e.keys
		} else {
			remove = append(remove, token)
		}
	}
	err := q.j.store.JournalWrite(ctx, q.j.group, q.j.id, add, remove, ttl)
	if err == nil {
		return nil
	}
	q.mu.Lock()
	over := 0
	for token, e := range batch {
		if _, ok := q.entries[token]; ok {
			continue // e's record and its removal, queued since: keep the removal
		}
		if len(q.entries) >= q.max {
			over++
			continue
		}
		q.entries[token] = e
	}
	q.ttl = max(q.ttl, ttl)
	log, count := q.failed.note(1)
	if over > 0 {
		q.dropLocked(over) // unlocks
	} else {
		q.mu.Unlock()
	}
	if log {
		q.j.logger.Warn("capgate: write the journal (retried; calls go on: a crash meanwhile leaves their leases for lease_seconds)",
			"error", err, "failures", count)
	}
	return fmt.Errorf("write the journal: %w", err)
}

// close stops the timer, waits for a round running, and writes what is
// still queued with ctx. Entries queued after it are ignored.
func (q *queue) close(ctx context.Context) error {
	q.mu.Lock()
	q.closed = true
	if q.timer != nil {
		q.timer.Stop()
	}
	q.mu.Unlock()
	q.rounds.Wait()
	return q.write(ctx)
}
