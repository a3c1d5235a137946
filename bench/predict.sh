#!/usr/bin/env bash
# bench/predict.sh: how many calls wait the whole wait.max_seconds only to be
# refused, before and after the predicted wait (predict.go), in one run.
#
# The Mapper's capacity client pattern: 12 core users × 8 bulk semantic
# $match calls of 10 rows (8 workers each), the retry-after client (the
# Mapper web client's rules), through two gateways sharing one Redis, enforce,
# wait.max_seconds 20, the adaptive Retry-After. Bottleneck api_heavy
# (cluster 5 − reserve 1 = 4 bulk calls; per_task 3), every call 2–3 s in
# capgate simapi: 96 calls need about a minute of the bottleneck, so calls at
# the back of the queue can't be served within 20 s. Each build (BEFORE_REF,
# default the commit before the predicted wait, and the working tree) runs
# ROUNDS rounds, alternating; each round's gateways first serve one call
# each (a warm-up: a running gateway has a hold history). From the gateways'
# lines: calls that waited the whole wait and were refused (wait_ms ≥
# max_seconds − 0.5 s), calls refused at once, all 429s, the makespan.
#
# Everything on 127.0.0.1 (a redis-server of its own on a spare port);
# every process started here is killed on exit. About 6 minutes on 2 cores.
#
#   bench/predict.sh                # prints the table
#   ROUNDS=1 bench/predict.sh
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
ROUNDS=${ROUNDS:-2}
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_init predict

command -v jq >/dev/null || { echo "bench/predict.sh: jq is needed" >&2; exit 1; }
need_tools redis-server:redis-server

cd "$ROOT"
BEFORE_REF=${BEFORE_REF:-$(git log -1 --format=%H --diff-filter=A -- predict.go)^}
log "building the working tree and $BEFORE_REF"
go build -o "$WORK/capgate-after" ./cmd/capgate
mkdir -p "$WORK/before-src"
git archive "$BEFORE_REF" | tar -x -C "$WORK/before-src"
(cd "$WORK/before-src" && go build -o "$WORK/capgate-before" ./cmd/capgate)
CG="$WORK/capgate-after"

SPORT=$(free_port)
"$CG" simapi --listen "127.0.0.1:$SPORT" --users-per-tier 12 --latency 2s-3s \
	--tokens "$WORK/tokens.json" 2>"$WORK/simapi.err" &
PIDS+=($!)
wait_port "$SPORT"
jq '[.[] | select(.auth_groups == ["core_user"])]' "$WORK/tokens.json" >"$WORK/users.json"
SIM="http://127.0.0.1:$SPORT"
start_redis

: >"$WORK/rows.tsv"
# run runs one round of build $1 (before|after), round $2.
run() {
	local build=$1 round=$2 name="$1-$2" bin="$WORK/capgate-$1" urls="" i port pids=()
	local db="$WORK/$name.db"
	"$bin" capacity set --create --database "sqlite:$db" mode=enforce enforce_for=all reserve_single_row=1 \
		es2_knn=24 tiers.core=24 per_user.core=8 retry_after.policy=adaptive api_heavy.cluster=5 \
		api_heavy.per_task=3 wait.max_seconds=20 wait.max_waiting=200 wait.max_waiting_per_user=20 >/dev/null
	for i in 1 2; do
		port=$(free_port)
		"$bin" serve --listen "127.0.0.1:$port" --upstream "$SIM" --identity tokens \
			--tokens "$WORK/users.json" --database "sqlite:$db" --task-id "gw$i" \
			--redis "$REDIS_URL" --key-prefix "predict:$name" \
			--log-file "$WORK/$name-$i.log" 2>>"$WORK/serve.err" &
		pids+=($!)
		PIDS+=($!)
		wait_port "$port"
		urls+="${urls:+,}http://127.0.0.1:$port"
	done
	jq -c '[.[:2][] | {token, username, auth_groups}]' "$WORK/users.json" >"$WORK/warm.json"
	"$bin" loadgen --url "$urls" --users "$WORK/warm.json" --client plain --calls 1 --workers 1 >/dev/null 2>&1 || true
	: >"$WORK/$name-1.log.mark"
	local skip1 skip2
	skip1=$(wc -l <"$WORK/$name-1.log") skip2=$(wc -l <"$WORK/$name-2.log")
	log "$name"
	"$CG" loadgen --url "$urls" --users "$WORK/users.json" --client retry-after --calls 8 --workers 8 \
		--rows 10 --bottleneck-limit 4 --duration 240s --grace 5s \
		--json "$WORK/$name.json" >"$WORK/$name.txt" 2>"$WORK/$name.err" || true
	stop_pids "${pids[@]}"
	{ tail -n +"$((skip1 + 1))" "$WORK/$name-1.log"; tail -n +"$((skip2 + 1))" "$WORK/$name-2.log"; } |
		grep '"event":"ocl_capacity"' >"$WORK/$name.lines" || true
	jq -rs --arg b "$build" --arg r "$round" --slurpfile rep "$WORK/$name.json" '
		[.[] | select(.decision == "refused")] as $ref |
		[$b, $r,
		 ([$ref[] | select((.wait_ms // 0) >= 19500)] | length),
		 ([$ref[] | select(.wait_ms == null)] | length),
		 ($ref | length),
		 ([.[] | select(.decision == "admitted")] | length),
		 ($rep[0].Makespan / 1e9 | round)] | @tsv' "$WORK/$name.lines" >>"$WORK/rows.tsv"
}

log "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq "$ROUNDS"); do
	run before "$round"
	run after "$round"
done
log "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
{
	echo "| build | round | 429 after waiting the whole 20 s | 429 at once | all 429s | calls admitted | makespan (s) |"
	echo "|---|---|---|---|---|---|---|"
	awk -F'\t' '{ printf "| %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7 }' "$WORK/rows.tsv"
} | tee "$WORK/table.md"
