#!/usr/bin/env bash
# bench/seats.sh: seats and classes (issue 33), side by side in one run.
#
# Everything runs on 127.0.0.1: capgate simapi, capgate serve on spare
# ports with in-process lanes (one gateway) and its config in SQLite, and
# bench/seats, which drives groups of users and reads the gateway's log.
# Every process started here is killed on exit. Each row takes DURATION
# (default 40 s) plus up to a minute of draining; the whole run about
# 6 minutes.
#
# Rows (every row: enforce for all calls, the wait on; the bench's numbers
# come from the measured window, after WARM (default 8 s)):
#   seats          the inference example (examples/inference/policy.yaml),
#                  model lane limit 8: 6 users of big embeddings calls (64
#                  texts: 4 seats each) and 6 of small ones (8 texts: 1
#                  seat), 3 calls at once each, all one model. Wants the
#                  lane's seat utilization ≥ 0.95 and Jain in seats ≥ 0.95.
#   seats-1        the same users, every call small: the lane as full as
#                  one-seat calls keep it, for comparison.
#   classes        the built-in OCL policy, api_heavy limit 5 with
#                  reserve_single_row 1: 8 batch users (reranked $match of
#                  10 rows, 3 at once each) saturate the lane; 4 interactive
#                  users send single-row $match calls, Poisson, 0.15 a second
#                  each. Wants the interactive p95 wait ≤ 1 s.
#   classes-lend   the same with lending.api_heavy 1.
#   batch          the batch users alone, lending off: they can hold
#                  limit − reserve = 4 of the 5 seats.
#   batch-lend     the batch users alone, lending.api_heavy 1: wants the
#                  batch's seat utilization of the full limit ≥ 0.95.
#
#   bench/seats.sh                # prints the table
#   DURATION=60s bench/seats.sh   # longer rows
#   ROWS="seats batch" bench/seats.sh  # only those rows
#   KEEP_WORK=1 bench/seats.sh    # keeps the logs and JSON
#
# Needs Go and jq.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_init seats

command -v jq >/dev/null || { echo "bench/seats.sh: jq is needed" >&2; exit 1; }
command -v go >/dev/null || { echo "bench/seats.sh: Go is needed" >&2; exit 1; }
DURATION=${DURATION:-40s}
WARM=${WARM:-8s}

cd "$ROOT"
log "building"
go build -o "$WORK/capgate" ./cmd/capgate
go build -o "$WORK/seats" ./bench/seats
CG="$WORK/capgate"
INF=examples/inference/policy.yaml

# The inference users: u1..u12 of tier pro.
jq -n '[range(1; 13) | {token: "u\(.)-token", username: "u\(.)", auth_groups: ["pro"]}]' >"$WORK/inference-users.json"

IPORT=$(free_port)
"$CG" simapi --api inference --listen "127.0.0.1:$IPORT" --latency 1s 2>"$WORK/simapi-inference.err" &
PIDS+=($!)
wait_port "$IPORT"
OPORT=$(free_port)
"$CG" simapi --listen "127.0.0.1:$OPORT" --users-per-tier 12 --latency 1.2s-1.4s \
	--tokens "$WORK/ocl-tokens.json" 2>"$WORK/simapi-ocl.err" &
PIDS+=($!)
wait_port "$OPORT"
jq '[.[] | select(.auth_groups == ["core_user"])]' "$WORK/ocl-tokens.json" >"$WORK/ocl-users.json"

# texts N prints an embeddings body of N texts for model e5.
texts() { jq -cn --argjson n "$1" '{model: "e5", input: [range($n) | "some text \(.)"]}'; }
# rows N prints a $match body of N rows.
rows() { jq -cn --argjson n "$1" '{rows: [range($n) | {id: "\(.)", name: "malaria"}]}'; }
# tokens FILE FROM TO prints the tokens of users FROM..TO (1-based) of FILE.
tokens() { jq -c --argjson a "$2" --argjson b "$3" '[.[$a - 1:$b][] | .token]' "$1"; }

: >"$WORK/rows.tsv"

# row NAME POLICY(inference|ocl) GROUPS-JSON LANE LIMIT SETTINGS...
row() {
	local name=$1 which=$2 groups=$3 lane=$4 limit=$5
	shift 5
	local db="$WORK/$name.db" port policy=() upstream users event inflight
	if [[ $which == inference ]]; then
		policy=(--policy "$INF")
		upstream="http://127.0.0.1:$IPORT" users="$WORK/inference-users.json"
		event=capgate_call inflight=model_in_flight
	else
		upstream="http://127.0.0.1:$OPORT" users="$WORK/ocl-users.json"
		event=ocl_capacity inflight=in_flight
	fi
	"$CG" capacity set --create --database "sqlite:$db" "${policy[@]}" mode=enforce enforce_for=all \
		wait.max_seconds=120 wait.max_waiting=1000 wait.max_waiting_per_user=100 "$@" >"$WORK/$name.set" 2>&1
	echo "$groups" >"$WORK/$name.groups.json"
	port=$(free_port)
	"$CG" serve --listen "127.0.0.1:$port" --upstream "$upstream" "${policy[@]}" --identity tokens \
		--tokens "$users" --database "sqlite:$db" --task-id gw1 --log-file "$WORK/$name.log" \
		2>>"$WORK/serve.err" &
	GW_PIDS=($!)
	PIDS+=($!)
	wait_port "$port"
	log "$name"
	"$WORK/seats" --url "http://127.0.0.1:$port" --groups "$WORK/$name.groups.json" --duration "$DURATION" \
		--warm "$WARM" --log "$WORK/$name.log" --event "$event" --lane "$lane" \
		--in-flight-key "$inflight" --limit "$limit" --json "$WORK/$name.json" >/dev/null 2>"$WORK/$name.err"
	stop_pids "${GW_PIDS[@]}"
	GW_PIDS=()
	jq -r --arg n "$name" '
		[$n, .utilization, .jain_seats, .max_in_flight,
		 ([.groups[] | "\(.name): \(.ok) ok, \(.refused_429) 429, \(.errors) errors, \(.share_of_lane * 100 | round) % of the seats, wait p50 \(.wait_p50_ms) ms p95 \(.wait_p95_ms) ms max \(.wait_max_ms) ms"] | join("; "))
		] | @tsv' "$WORK/$name.json" >>"$WORK/rows.tsv"
}

BIG=$(tokens "$WORK/inference-users.json" 1 6)
SMALL=$(tokens "$WORK/inference-users.json" 7 12)
ALL=$(tokens "$WORK/inference-users.json" 1 12)
B64=$(texts 64 | jq -Rs .)
B8=$(texts 8 | jq -Rs .)
emb() { # name tokens body
	echo "{\"name\":\"$1\",\"tokens\":$2,\"scheme\":\"Bearer\",\"workers\":3,\"method\":\"POST\",\"path\":\"/v1/embeddings\",\"body\":$3}"
}
INFSET=(lanes.model=8 lanes.cluster=100 lanes.user.pro=8 lanes.user.free=8)

BATCH=$(tokens "$WORK/ocl-users.json" 1 8)
INTER=$(tokens "$WORK/ocl-users.json" 9 12)
R10=$(rows 10 | jq -Rs .)
R1=$(rows 1 | jq -Rs .)
MATCH='/concepts/$match/?reranker=true'
batch="{\"name\":\"batch\",\"tokens\":$BATCH,\"scheme\":\"Token\",\"workers\":3,\"method\":\"POST\",\"path\":\"$MATCH\",\"body\":$R10}"
inter="{\"name\":\"interactive\",\"tokens\":$INTER,\"scheme\":\"Token\",\"rate\":0.15,\"method\":\"POST\",\"path\":\"$MATCH\",\"body\":$R1}"
OCLSET=(api_heavy.cluster=5 reserve_single_row=1 api_heavy.per_task=100 es2_knn=100 tiers.core=100 per_user.core=10)

log "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
START=$(date +%s)
want() { [[ -z ${ROWS:-} || " $ROWS " == *" $1 "* ]]; }
want seats && row seats inference "[$(emb big "$BIG" "$B64"),$(emb small "$SMALL" "$B8")]" model 8 "${INFSET[@]}"
want seats-1 && row seats-1 inference "[$(emb small "$ALL" "$B8")]" model 8 "${INFSET[@]}"
want classes && row classes ocl "[$batch,$inter]" api_heavy 5 "${OCLSET[@]}"
want classes-lend && row classes-lend ocl "[$batch,$inter]" api_heavy 5 "${OCLSET[@]}" lending.api_heavy=1
want batch && row batch ocl "[$batch]" api_heavy 5 "${OCLSET[@]}"
want batch-lend && row batch-lend ocl "[$batch]" api_heavy 5 "${OCLSET[@]}" lending.api_heavy=1
log "done in $(($(date +%s) - START)) s; load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"

{
	echo "| row | seat utilization of the lane | Jain in seats (backlogged users) | most seats held | the groups |"
	echo "|---|---|---|---|---|"
	awk -F'\t' '{ printf "| %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5 }' "$WORK/rows.tsv"
} | tee "$WORK/table.md"
