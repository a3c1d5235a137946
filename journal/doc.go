// Package journal records the store leases of the calls a process holds,
// so that when the process dies without releasing them (SIGKILL, a crash,
// a lost host) another process releases them instead of leaving their
// places taken for lease_seconds — and releases only what is proven dead.
// The gateway (capgatehttp) and the decision service (decide) both keep
// one.
//
// # The model
//
// A process opens a Journal (Open): an incarnation with an id of its own,
// in a group — the process's kind, task id and instance (its listen
// address), "gateway:api-1:10.0.0.5:8080" — so that a restarted process
// finds its predecessors. In the store, each incarnation has
//
//   - a liveness record in its group's roster: a deadline by the store's
//     clock, renewed every quarter of Options.Liveness while the
//     incarnation runs (Store.JournalRenew), and
//   - a journal: token → the lane keys the call of that token holds leases
//     in.
//
// A call that holds leases queues its record (Add), and the record's
// removal once it has released them (Remove): nothing is sent on the
// call's path. A timer writes what is queued in one round trip a moment
// after the first entry (Store.JournalWrite); a record and its removal
// queued before a write cancel out.
//
// An incarnation is dead once its liveness has lapsed — it stopped
// renewing: killed, or cut off from the store for Liveness — or once it
// said goodbye (Close, after its last call ended: Store.JournalLeave). Each
// live incarnation of a group, at each renewal, learns the others'
// liveness, and releases the journalled leases of the dead ones once it
// has itself run for Options.Hold (Options.Release), then forgets them.
// An incarnation still alive is never released: not a gateway sent
// SIGTERM that still serves its calls (it renews until its last call
// ended), nor a twin of the same task id and address on another host
// sharing the store (its own id, its own journal). That a new process
// could bind the address proves nothing, and nothing here relies on it.
//
// # What is lost
//
// A call killed before its record was written (within the write delay),
// and a record dropped because the queue was full or a write kept
// failing, leave that call's leases to expire by themselves after
// lease_seconds, as with no journal. A live incarnation cut off from the
// store for longer than Liveness is taken for dead: a live incarnation of
// its group may then release its leases (its calls run on uncounted, as
// after any lost lease, until they end); it renews again when the store
// answers.
package journal
