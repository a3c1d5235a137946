#!/usr/bin/env bash
# bench/headers.sh: what request headers cost a gateway's memory. 1,000
# connections at once each send a request with 1 MB of headers to
# `capgate serve`; bench/headerflood samples the gateway's resident memory
# (VmRSS) before, at the peak, and for SETTLE after the connections close
# (the lowest sample is reported: the Go runtime gives freed memory back to
# the OS gradually).
#
# Everything runs on 127.0.0.1: capgate simapi as the upstream and capgate
# serve, on spare ports; every process started here is killed on exit.
# Bounded: each row takes about SETTLE plus a few seconds.
#
#   bench/headers.sh                  # this tree, --max-header-bytes default and 1 MiB
#   BEFORE_BIN=/path/to/old/capgate bench/headers.sh   # also a build from before the bound
#
# Prints one JSON line per row. Needs Go; raises the open-files limit to
# 4096 for the gateway (1,000 connections).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CONNS=${CONNS:-1000}
BYTES=${BYTES:-1048576}
SETTLE=${SETTLE:-20s}
BEFORE_BIN=${BEFORE_BIN:-}

# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_init headers
ulimit -n 4096

cd "$ROOT"
log "building"
go build -o "$WORK/capgate" ./cmd/capgate
go build -o "$WORK/headerflood" ./bench/headerflood

SPORT=$(free_port)
"$WORK/capgate" simapi --listen "127.0.0.1:$SPORT" --tokens "$WORK/tokens.json" 2>"$WORK/simapi.err" &
PIDS+=($!)
wait_port "$SPORT"

# row NAME BIN [SERVE ARG...]: one gateway, one flood, one JSON line.
row() {
	local name=$1 bin=$2 port pid out
	shift 2
	port=$(free_port)
	"$bin" serve --listen "127.0.0.1:$port" --upstream "http://127.0.0.1:$SPORT" --identity tokens \
		--tokens "$WORK/tokens.json" --database "sqlite:$WORK/$name.db" --task-id "$name" \
		--log-file "$WORK/$name.log" "$@" 2>>"$WORK/serve.err" &
	pid=$!
	GW_PIDS=("$pid")
	PIDS+=("$pid")
	wait_port "$port"
	sleep 1 # let the gateway's start-up settle before the baseline
	out=$("$WORK/headerflood" -addr "127.0.0.1:$port" -pid "$pid" -conns "$CONNS" -bytes "$BYTES" -settle "$SETTLE")
	printf '{"row":"%s",%s\n' "$name" "${out#\{}"
	stop_pids "$pid"
	GW_PIDS=()
}

log "load: $(uptime)"
row "max-header-bytes-default" "$WORK/capgate"
row "max-header-bytes-1MiB" "$WORK/capgate" --max-header-bytes 1048576
if [[ -n $BEFORE_BIN ]]; then
	row "before" "$BEFORE_BIN"
fi
