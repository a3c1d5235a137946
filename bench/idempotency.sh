#!/usr/bin/env bash
# bench/idempotency.sh: idempotent heavy calls, measured (docs/BENCHMARKS.md,
# "Idempotent heavy calls").
#
# A redis-server of our own on a spare port (never the machine's 6379),
# then bench/idempotency: two gateways (capgatehttp.Gateway, each its own
# redis.Store and gate) on that Redis in front of an API that takes CALL
# per heavy call; CLIENTS clients, each with one call of its own, retry at
# once after their own TIMEOUT, to the two gateways in turn, in idempotency
# modes off, key and auto. Then REPLAYS replays of a kept answer through a
# gateway against the same read straight from the store. One JSON object
# per measurement on stdout. About 40 s on 2 cores.
#
#   bench/idempotency.sh
#   CLIENTS=50 CALL=3s TIMEOUT=1s bench/idempotency.sh
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
bench_init idempotency
need_tools redis-server:redis-server

start_redis
log "redis on $RPORT; building"
go build -o "$WORK/idempotency" "$ROOT/bench/idempotency"
"$WORK/idempotency" -redis "$REDIS_URL" -clients "${CLIENTS:-20}" -call "${CALL:-3s}" \
	-timeout "${TIMEOUT:-1s}" -replays "${REPLAYS:-300}"
