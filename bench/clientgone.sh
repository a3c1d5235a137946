#!/usr/bin/env bash
# bench/clientgone.sh: how soon an aborted stream frees its place
# (docs/BENCHMARKS.md, "An aborted stream's place").
#
# bench/clientgone: the real capgatehttp.Gateway (in-process lanes, the
# inference example's policy, tokens identity, enforce) in front of
# simapi's inference engine; streamed chat calls of 4000 tokens one after
# another, each aborted by its client after 3 chunks: CALLS with
# on_client_gone cancel (the example's), HOLD_CALLS with hold (each runs
# its 9 s to the end); the time from the abort to the call's release (its
# place free) and to the engine stopping it. One JSON object per route
# setting on stdout. About 40 s on 2 cores.
#
#   bench/clientgone.sh
#   CALLS=200 bench/clientgone.sh
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
bench_init clientgone

log "building"
go build -o "$WORK/clientgone" "$ROOT/bench/clientgone"
"$WORK/clientgone" -policy "$ROOT/examples/inference/policy.yaml" -calls "${CALLS:-100}" -hold-calls "${HOLD_CALLS:-3}"
