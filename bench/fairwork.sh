#!/usr/bin/env bash
# bench/fairwork.sh: the wait's fairness by work (fairness.by), side by side.
#
# bench/fairwork drives users' closed loops through real capgate Gates in
# process on one lane (the built-in OCL policy's api_heavy, limit 2 for bulk
# $match calls; enforce for all, the wait on): one gateway on a memory store,
# two gateways on one Redis (a redis-server of our own on a spare port), and
# two on a Redis Cluster when CLUSTER names one (its seeds, comma-separated;
# scripts/cluster.sh starts one). Every row: each user keeps CLIENTS calls
# at once (default 4: always some waiting), DURATION measured (default 30 s)
# after WARM (5 s). Times are scaled down from the issue's 2 s and 0.2 s.
#
# Rows, per store:
#   time / calls   user A's calls hold the lane 400 ms, B's 40 ms; fairness.by
#                  time wants A's share of the held time in [0.35, 0.65],
#                  calls shows today's ≈ 10/11.
#   usage          A's and B's calls hold it 400 ms each, A's report 2,000
#                  tokens, B's 200: wants A's share of the tokens in
#                  [0.33, 0.67].
#   six            (Redis only, two gateways) six users of identical 200 ms
#                  calls, 2 at once each, fairness.by time: wants the lane
#                  ≥ 0.95 busy and Jain ≥ 0.98 over their held time.
# Every row wants the utilization ≥ 0.95 and at most 2 calls held at once.
#
#   bench/fairwork.sh
#   CLUSTER=127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002 bench/fairwork.sh
#   STORES=memory DURATION=10s bench/fairwork.sh
#
# Needs Go, jq and redis-server. Everything runs on 127.0.0.1.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_init fairwork

command -v jq >/dev/null || { echo "bench/fairwork.sh: jq is needed" >&2; exit 1; }
DURATION=${DURATION:-30s}
WARM=${WARM:-5s}
CLIENTS=${CLIENTS:-4}
STORES=${STORES:-memory redis cluster}

cd "$ROOT"
go build -o "$WORK/fairwork" ./bench/fairwork
start_redis

row() { # STORE NAME ARGS...
	local store=$1 name=$2
	shift 2
	log "$store $name"
	"$WORK/fairwork" -store "$store" -redis "$REDIS_URL" -cluster "${CLUSTER:-}" -clients "$CLIENTS" \
		-duration "$DURATION" -warm "$WARM" "$@" |
		jq -r --arg name "$name" '"| \(.store) (\(.gateways) gw) | \($name) | \(.by) | \(.utilization) | \(.most_held) | " +
			([.users | to_entries[] | "\(.key): \(.value.calls) calls, \(.value.hold_ms) ms, time \(.value.time_share), usage \(.value.usage_share)"] | join("; ")) +
			" | \(.jain_time // "–") | \(.refused) | \(.errors) |"'
}

echo "| store | row | fairness.by | utilization | most held | users (share of held time, of usage) | Jain (time) | 429s | errors |"
echo "|---|---|---|---|---|---|---|---|---|"
for store in $STORES; do
	if [[ $store == cluster && -z "${CLUSTER:-}" ]]; then
		log "no CLUSTER: the Redis Cluster rows are skipped"
		continue
	fi
	for by in time calls; do
		row "$store" "time" -by "$by" -users A:400ms:2000,B:40ms:200
	done
	row "$store" "usage" -by usage -users A:400ms:2000,B:400ms:200
	if [[ $store == redis ]]; then
		row "$store" "six" -by time -clients 2 -users U1:200ms:0,U2:200ms:0,U3:200ms:0,U4:200ms:0,U5:200ms:0,U6:200ms:0
	fi
done
