// Package capgate caps how many heavy calls of an HTTP API run at once:
// in the lanes its policy names (package policy) — across the cluster, per
// API host (task), on a shared backend, per user tier, per user, per value
// of a call field.
//
// # The model: plan, outcome, lease
//
// A heavy call passes through three phases, one type each, all in
// Gate.Admit (or Gate.AdmitWith) and the Admission it returns:
//
//   - The plan (plan.go). The gate reads the config in force from its
//     settings.Source (a config.Service, or a settings.Fixed; a config
//     settings.Config.Check refuses makes the call unavailable, never a
//     store failure), and lays the call out over the config's policy
//     (Keys.AppendPlan): the lanes that take it, each lane's key in the
//     store, its limit (a tier's, a key value's own from key_limits, an
//     adaptive limit), the seats the call takes there (policy.Seats) and
//     the part kept for a reserve class, then the store's request. The
//     plan is pure: no I/O, no clock.
//   - The outcome (decision.go). The lane store (a LaneStore: memory.Store
//     in one process, redis.Store for a cluster of gateways; its optional
//     parts, StoreCaps, declared by its Caps) counts the lanes and takes
//     the call's seats in every lane at once, or none when a lane is full;
//     then one pure function decides, given the mode in force as a value.
//     An enforced call (mode enforce, and enforce_for says it counts) that
//     finds a lane full may wait for a slot on the store's Waitlist, else
//     is refused (DecisionRefused, with Retry-After, the full lane as its
//     scope and a suggested concurrency). An unenforced one has its seats
//     taken even past a full lane (AcquireRequest.Force): it runs, and is
//     recorded as one that would have been refused (DecisionShadowRefused).
//     In mode off the gate does nothing at all (DecisionNone). A store
//     that fails makes the call unavailable: it goes ahead uncounted (or
//     counted in the gate's local lanes, Local), and the store is skipped
//     for SkipFor — the limiter never refuses a call for its own error.
//     What was decided is an Outcome, a plain value fixed when Admit
//     returns (Admission.Outcome), which the headers, the 429's body, the
//     decision service's answer, the metrics and the log line all read.
//   - The lease (admission.go, lease.go). An admitted call holds its seats
//     as a lease that expires unless renewed (lease_seconds): the gate
//     renews it in the background while the call runs, and
//     Admission.Release gives it back (a release that fails is retried in
//     the background, and at worst the lease expires), then writes the
//     call's log line through the Sink and tells the Observer. A process
//     that dies with calls held leaves leases that expire, or that the
//     journal (package journal) releases once it is proven dead; a call
//     its client re-registers is resumed (AdmitOptions.Resumed).
//
// Idempotent calls (package idempotency) join a call running with the
// same key before they are planned; the adaptive limits' runner (package
// adaptive, through Gate.Tune) moves adaptive lanes' limits between calls.
//
// Most users need three names: NewGate, which makes the Gate over a lane
// store (memory.New, or redis.Open for a cluster of gateways) and a config
// source; Gate.Admit, which decides one heavy call and returns its
// Admission (Release it when the call ends, however it ends); and, in front
// of an http.Handler, capgatehttp.NewMiddleware (package
// github.com/capgate/capgate/http), which does both for each request.
// Example and Example_admit show the two ways.
//
// The root package is the engine. It imports the standard library, the
// pure policy package (which calls are heavy and where they count), the
// pure settings package (the runtime config model), the pure tune package
// (the adaptive limits' algorithm), the pure repeat package (the entries
// of idempotent calls a lane store keeps), the status package (the lanes'
// live state it reports) and the module's small internal/ helpers (JSON,
// random ids, truncation), nothing else. The adaptive limits' loop (adaptive),
// lane stores (memory, redis), config stores (sqlite, postgres), the log
// sink and the HTTP adapters live in subpackages; docs/ARCHITECTURE.md has
// the packages, their layers and where each step above is in the code.
package capgate
