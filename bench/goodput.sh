#!/usr/bin/env bash
# bench/goodput.sh: how busy enforce keeps the capacity it protects, and how
# fairly it shares it (issue 11's "done when").
#
# Everything runs on 127.0.0.1: capgate simapi (every heavy call takes
# 1.2-1.4 s), capgate serve on spare ports, and for the three-gateway
# scenario a redis-server of our own on a spare port (never the machine's
# 6379). Every process started here is killed on exit. Bounded: each row
# ends within 95 s; the whole script takes about 2.5 minutes on 2 cores while
# the wait rows are n/a, and should stay under 6 with them (the wait makes
# each row about as long as its ideal makespan: 16, 8 and 24 s).
#
# Scenarios (every user core tier, enforce, enforce_for all, bulk semantic
# $match calls of 10 rows):
#   one     one gateway, in-process lanes; six users, 4 workers, 4 calls each;
#           bottleneck api_heavy_task (per_task 2)
#   three   three gateways sharing the Redis, task ids gw1..gw3, users spread
#           over them; the same users and calls; bottleneck api_heavy
#           (cluster 5 - reserve 1 = 4 for bulk calls; per_task 3 each)
#   heavy   one gateway as in "one"; core-1 has 8 workers and 16 calls, the
#           five others 4 workers and 4 calls
# Rows: for each scenario, the clients plain, retry-after and aware, with
# the server-side wait off and on (retry_after.policy adaptive); with
# BEFORE=1 also, in scenario "one", the three clients under the fixed
# policy (main's behaviour: the "before" rows; about two minutes more, as
# the fixed policy keeps the lane idle). A wait-on row sets wait.max_seconds; a
# build whose config has no "wait" key refuses it, and the row says
# "n/a (wait not available)".
#
# Each gateway serves one call before a row is measured (a warm-up with the
# plain client, not counted), so the adaptive policy starts from a history
# as a running gateway has; the fixed policy ignores it.
#
#   bench/goodput.sh                # prints the table
#   BEFORE=1 bench/goodput.sh       # with the fixed-policy rows
#   KEEP_WORK=1 bench/goodput.sh    # and keeps the logs and reports
#
# Needs Go and jq; installs redis-server with apt-get if missing.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_init goodput

command -v jq >/dev/null || { echo "bench/goodput.sh: jq is needed" >&2; exit 1; }
command -v go >/dev/null || { echo "bench/goodput.sh: Go is needed" >&2; exit 1; }
need_tools redis-server:redis-server

cd "$ROOT"
log "building"
go build -o "$WORK/capgate" ./cmd/capgate
CG="$WORK/capgate"

SPORT=$(free_port)
"$CG" simapi --listen "127.0.0.1:$SPORT" --users-per-tier 6 --latency 1.2s-1.4s \
	--tokens "$WORK/tokens.json" 2>"$WORK/simapi.err" &
PIDS+=($!)
wait_port "$SPORT"
jq '[.[] | select(.auth_groups == ["core_user"])]' "$WORK/tokens.json" >"$WORK/users.json"
SIM="http://127.0.0.1:$SPORT"

start_redis

GW_URLS=""
# start_gateways starts $1 gateways over database $2 (with Redis when more
# than one), logging to $3-<n>.log.
start_gateways() {
	local n=$1 db=$2 logs=$3 i port redis=()
	GW_PIDS=()
	GW_URLS=""
	if ((n > 1)); then
		redis=(--redis "$REDIS_URL" --key-prefix "goodput:$RANDOM$RANDOM")
	fi
	for i in $(seq "$n"); do
		port=$(free_port)
		"$CG" serve --listen "127.0.0.1:$port" --upstream "$SIM" --identity tokens \
			--tokens "$WORK/users.json" --database "sqlite:$db" --task-id "gw$i" \
			--log-file "$logs-$i.log" "${redis[@]}" 2>>"$WORK/serve.err" &
		GW_PIDS+=($!)
		PIDS+=($!)
		wait_port "$port"
		GW_URLS+="${GW_URLS:+,}http://127.0.0.1:$port"
	done
}

stop_gateways() {
	stop_pids "${GW_PIDS[@]}"
	GW_PIDS=()
}

# The table, one row per line, tab-separated.
: >"$WORK/rows.tsv"

# row runs one row: $1 scenario, $2 policy, $3 wait (off|on), $4 client.
row() {
	local scenario=$1 policy=$2 wait=$3 client=$4
	local name="$scenario-$policy-wait$wait-$client"
	local db="$WORK/$name.db" gws=1 limit=2 set=(api_heavy.cluster=9 api_heavy.per_task=2)
	local load=(--calls 4 --workers 4)
	case $scenario in
	three) gws=3 limit=4 set=(api_heavy.cluster=5 api_heavy.per_task=3) ;;
	heavy) load+=(--heavy core-1:8:16) ;;
	esac
	"$CG" capacity set --create --database "sqlite:$db" mode=enforce enforce_for=all reserve_single_row=1 \
		es2_knn=24 tiers.core=24 per_user.core=8 retry_after.policy="$policy" "${set[@]}" >/dev/null
	if [[ $wait == off ]]; then
		# A build with the wait has it on by default: turn it off. A build
		# without it refuses the key, and there is nothing to turn off.
		"$CG" capacity set --database "sqlite:$db" wait.max_seconds=0 >/dev/null 2>&1 || true
	else
		if ! "$CG" capacity set --database "sqlite:$db" wait.max_seconds=30 wait.max_waiting=100 \
			wait.max_waiting_per_user=16 >"$WORK/$name.wait" 2>&1 &&
			! "$CG" capacity set --database "sqlite:$db" wait.max_seconds=30 >"$WORK/$name.wait" 2>&1; then
			log "$name: n/a (wait not available): $(head -c 200 "$WORK/$name.wait")"
			printf '%s\t%s\t%s\t%s\tn/a (wait not available)\n' "$scenario" "$policy" "$wait" "$client" >>"$WORK/rows.tsv"
			return
		fi
	fi
	start_gateways "$gws" "$db" "$WORK/$name"
	# Warm-up: one call per gateway, not measured.
	jq -c "[.[:$gws][] | {token, username, auth_groups}]" "$WORK/users.json" >"$WORK/warm.json"
	"$CG" loadgen --url "$GW_URLS" --users "$WORK/warm.json" --client plain --calls 1 --workers 1 \
		>/dev/null 2>&1 || true
	log "$name"
	"$CG" loadgen --url "$GW_URLS" --users "$WORK/users.json" --client "$client" "${load[@]}" \
		--rows 10 --bottleneck-limit "$limit" --sim-stats "$SIM/_simapi/stats" --duration 90s --grace 5s \
		--json "$WORK/$name.json" >"$WORK/$name.txt" 2>"$WORK/$name.err" || true
	stop_gateways
	local over
	over=$("$CG" analyze --json "$WORK/$name"-*.log |
		jq '[.lanes[] | .over_limit + ([.reconstructed_peak - .max_limit, 0] | max)] | add // 0')
	jq -r --arg s "$scenario" --arg p "$policy" --arg w "$wait" --arg c "$client" --argjson over "$over" '
		def s: . / 1e9 * 10 | round / 10;
		[$s, $p, $w, $c,
		 (.Utilization * 1000 | round / 1000),
		 ([.Tiers[].Fairness] | min * 1000 | round / 1000),
		 (.MaxSlowdown * 100 | round / 100),
		 .Total429,
		 "\(.Makespan | s) s vs \(.Ideal | s) s",
		 ([.Users[].RowsFailed] | add),
		 ([.Users[].RowsThrottled] | add),
		 $over] | @tsv' "$WORK/$name.json" >>"$WORK/rows.tsv"
}

log "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
START=$(date +%s)
if [[ -n "${BEFORE:-}" ]]; then
	for client in plain retry-after aware; do
		row one fixed off "$client"
	done
fi
for scenario in one three heavy; do
	for wait in off on; do
		for client in plain retry-after aware; do
			row "$scenario" adaptive "$wait" "$client"
		done
	done
done
log "done in $(($(date +%s) - START)) s; load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"

{
	echo "| scenario | Retry-After policy | wait | client | bottleneck utilization | Jain (equal-demand users) | light users' slowdown vs round-robin | 429s | makespan vs ideal | failed rows | throttled rows | calls over a lane limit (analyze) |"
	echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
	awk -F'\t' '{
		if (NF == 5) { printf "| %s | %s | %s | %s | %s | | | | | | | |\n", $1, $2, $3, $4, $5; next }
		if ($10 > 0) { $6 = "–"; $7 = "–" } # with rows failed, finish times say nothing
		printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12
	}' "$WORK/rows.tsv"
} | tee "$WORK/table.md"
