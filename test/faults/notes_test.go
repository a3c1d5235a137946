//go:build faults

package faults

// docNotes follows the table in docs/RELIABILITY.md.
const docNotes = `
## How the suite runs

Every scenario starts its own processes on 127.0.0.1 spare ports and kills them (process groups,
` + "`t.Cleanup`" + `) when it ends, pass or fail; the machine's own Redis (6379) and PostgreSQL (5432) are never
touched. Gateways are the real ` + "`capgate serve`" + ` binary built from this checkout, with
` + "`--task-id gw1|gw2|gw3`" + `, ` + "`--database postgres://…`" + ` (the suite's own cluster, initdb'd as the
postgres user) and ` + "`--redis`" + ` (or ` + "`--redis-sentinels`/`--redis-master`" + `), config cache 1 s
(` + "`CAPACITY_CONFIG_CACHE_SECONDS=1`" + `). The config is set with ` + "`capgate capacity set … --database`" + `
before the gateways start. Identity is the default (` + "`upstream`" + `): the counting upstream is
` + "`simapi`" + ` behind a wrapper that counts heavy calls in flight overall, bulk, semantic, per gateway
(one upstream listener per gateway), per tier and per user, and records each call's time upstream by
` + "`X-Request-ID`" + `, so "overhead" / "added latency" is client latency minus time upstream.

Fail-open scenarios (3–8, 10, 11) run enforce / all with limits the load never reaches, lease 15 s,
renew 5 s, and the default Redis settings spelled out: deadline 1 s, socket timeout 0.5 s, skip window
15 s; so every call must be 200, admitted or (store down) unavailable — counted by the gateway's
local lanes (degraded) and never refused by them at these limits. Scenarios 1 and 2 use small
limits (cluster 4 with 1 reserved for single-row calls, per task 2, es2_knn 2, tiers 3/2/2/2, per
user 2/1/1/1) and a 5 s Redis deadline, since they test the limits, not fail-open.
Scenarios 1, 2, 9 and 13 run with waiting off (` + "`wait.max_seconds=0`" + `): they test refusals.
Scenario 12 tests waiting.
A call already waiting for a slot when the config can't be read goes ahead too (the config
service serves enforce as shadow, and a waiter re-reads the config every 250 ms: docs/ARCHITECTURE.md,
*Mode and limits that change*), as shadow-refused or admitted, within the cache time plus 250 ms; the
root's ` + "`TestWaitGoesAheadWhenTheConfigDatabaseFails`" + ` checks that, not scenario 9.

| # | what is done | what is asserted |
|---|---|---|
| 1 | 3 gateways, 40 clients, 20 s, mixed bulk/single-row semantic $match, reranker $match, $rerank as 7 users of 4 tiers | upstream peaks ≤ every lane's limit; every answer 200 admitted or 429 refused with Retry-After; refused calls never reach the upstream; lanes empty after |
| 2 | the same load in shadow | nothing refused; every call reaches the upstream; body and API headers identical to a direct call; lanes empty after |
| 3 | SIGSTOP the Redis master for 20 s under load, then SIGCONT | every call 200; worst added latency ≤ deadline (+1.5 s slack); delayed calls come in ≤ one burst per gateway per skip window; every gateway counts again ≤ skip window + deadline + 1 s after SIGCONT; lanes empty after |
| 4 | kill -9 the master under load, restart it empty 3 s later; one long call per gateway spans the restart | every call 200; counting resumes; the restarted Redis counts no lease of a call from before the restart (renewals never revive one; those calls log lease_lost) |
| 5 | kill -9 the master of a master + replica + 3 Sentinels (quorum 2, down-after 1 s) under load | every call 200; Sentinel promotes the replica; every gateway counts on the new master ≤ skip window + deadline + 2 s after the promotion |
| 6 | kill -9 a gateway holding 6 calls while the other two serve load | the others answer every call 200; the dead gateway's leases are gone ≤ lease_seconds after the kill; nothing else leaks |
| 7 | 200 calls that hang up at random times (a quarter in the first 40 ms, a quarter while still sending the body) while the upstream holds them (up to 1 s longer than the latest abort) | no upstream call cut short by its client's abort; every call's leases held at least as long as the upstream ran it; every lane empty ≤ 1 s after the upstream's last call ended |
| 8 | one call per gateway running 3 × lease_seconds beside short-call load | the leases are live at every 1 s check, renewed about every 5 s, the log line says admitted without lease_lost, released at the end |
| 9 | enforce with tight limits; LOCK TABLE capacity_configs ACCESS EXCLUSIVE, unlock, stop PostgreSQL, start it | no call waits more than the 500 ms read timeout (+1 s slack); no refusal once the cache runs out while the config can't be read (enforce → shadow); refusals again once it can |
| 10 | gateway stdout is a pipe (shrunk to one page) nobody reads, then drained; a second gateway exits while its pipe stays blocked | calls/s and p99 overhead as with the pipe drained; lines + Σ log_dropped = gated calls; exit ≤ 3 s |
| 11 | malformed / oversized bodies, bad metadata and trace headers, bad tokens, huge headers, staff API errors, 1000 distinct users, 40 slow-loris connections | each gets the documented answer (gated or passed through, status, body); no crash or panic; no lease held by a slow client; lanes empty after |
| 12 | 3 gateways on one Redis, enforce, api_heavy 2, wait 20 s: two calls held 4 s on gw1; 8 calls queued one after another (3 as one user on gw1, 2 on gw2, 3 on gw3); kill -9 gw3 | gw1's and gw2's waiters all answered (200 admitted or 429), each within max_seconds of queueing, in fair order (ada, grace and linus in the first round, then ada, ada: round-robin across users; gw3's tickets skipped); gw3's calls end with it; upstream peak ≤ 2; lanes and waitlist empty after, fair work's records of running calls included (they end with the calls' leases, so gw3's unclaimed grants leave none); only the cost estimates stay, each expiring within ` + "`RunMaxAge`" + ` |
| 13 | one gateway; one user sends 400 calls at once, each held 5 s upstream, per_user 2; again as a user with per_user 0; again with the Redis master SIGSTOPped | exactly the limit admitted (with Redis stopped: unavailable, degraded:true in the log) and run upstream at once, every other call 429 with Retry-After, none let through uncounted; lanes empty after |
| 15 | 3 gateways, enforce, per_user 1, api_heavy 2, max_waiting 12; 7 users × 3 clients, each user on one gateway, calls held 3 s; the waitlist full; Redis kill -9 and started again at once, empty | no user over its limit of 1 at the upstream; no call through uncounted (` + "`unavailable`" + ` without ` + "`degraded`" + `) |
| 16 | as 15 with calls held 0.8 s; Redis SIGSTOP for 5 s (8 s in the full run), then SIGCONT and the skip window plus 6 s | no user over its limit of 1 at the upstream; no call through uncounted; lanes empty after |
`
