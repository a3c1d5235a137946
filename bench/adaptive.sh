#!/usr/bin/env bash
# bench/adaptive.sh: adaptive lane limits against static ones, side by side
# in one run, on a backend of known capacity.
#
# Everything runs on 127.0.0.1: `capgate simapi --backend-capacity K
# --backend-base-ms B` (a semantic call takes B × max(1, in_flight / K)),
# a redis-server of our own on a spare port (never the machine's 6379), and
# for each row three `capgate serve` gateways sharing it (task ids
# gw1..gw3, enforce, enforce_for all, the server-side wait on). bench/adaptive
# keeps CALLERS callers (40) each with one bulk semantic $match in flight,
# spread over the three gateways; every other limit is set out of the way,
# so only the limit under test binds. At HALVE_AT the backend's capacity
# halves (POST /_sim/backend). Every process started here is stopped on exit.
#
# Rows:
#   static-high   es2_knn = 3K, static
#   static-low    es2_knn = K/3, static
#   local         each gateway's own api_heavy_task lane adaptive (apply),
#                 starting at K per gateway (3K in all): each gateway's
#                 control loop sees only its own calls, as a per-process
#                 limiter does; es2_knn out of the way
#   cluster-high  es2_knn adaptive (apply), starting at 3K: one control loop
#                 for the cluster, samples shared through Redis
#   cluster-low   the same, starting at K/3
#   local-uneven, cluster-uneven
#                 local and cluster-high under an uneven load: the callers
#                 spread SPREAD (30,8,2) over the three gateways, and at
#                 MOVE_AT (25 s) each gateway's callers move to the one
#                 before it (gw1's 30 to gw3, gw2's 8 to gw1, gw3's 2 to
#                 gw2). The total load stays 40 callers; only where
#                 it arrives changes: what a per-gateway loop cannot see.
#   attack-static, attack
#                 one early-access user within its own limit of 2
#                 (per_user.early_access=2) keeps two bulk calls of
#                 ATTACK_ROWS (40) rows in flight through gw1 beside the 40
#                 callers, on a backend that takes each row in turn (POST
#                 /_sim/backend {"per_row": true}: a call of r rows holds its
#                 place r × B × max(1, in_flight / K)); attack-static has
#                 es2_knn = K, attack es2_knn adaptive from 3K. The
#                 throughput is the other callers' (not the attacker's).
#                 The issue's K is 8: K=8 ROWS="attack-static attack".
#   cluster-switch
#                 cluster-high's config in advise, switched to apply on the
#                 three gateways at SWITCH_AT (10 s; each reads it within its
#                 --config-cache): a config version that
#                 turns apply on, over the state advise left.
#
# The issue's run has the capacity halve at t = 60 s; this one halves it at
# HALVE_AT (40 s) and runs DURATION (70 s) per row, to keep the machine
# free: the loop steps every second, so it converges well within 40 s.
# About 6 minutes for the five default rows, 80 s more per uneven row.
#
#   bench/adaptive.sh                      # prints the Markdown table
#   K=16 B=100 bench/adaptive.sh
#   ROWS="cluster-high local" bench/adaptive.sh
#   ROWS="local-uneven cluster-uneven" bench/adaptive.sh
#   KEEP_WORK=1 bench/adaptive.sh          # keeps the JSON lines and logs
#   SERVE_BIN=/path/to/capgate bench/adaptive.sh
#                                          # the gateways of another build (before/after)
#
# Needs Go; installs redis-server with apt-get if missing.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
K=${K:-16}
B=${B:-100}
CALLERS=${CALLERS:-40}
DURATION=${DURATION:-70s}
HALVE_AT=${HALVE_AT:-40s}
ROWS=${ROWS:-"static-high static-low local cluster-high cluster-low"}
SPREAD=${SPREAD:-30,8,2}
MOVE_AT=${MOVE_AT:-25s}
SWITCH_AT=${SWITCH_AT:-10}

# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_init adaptive
need_tools redis-server:redis-server

cd "$ROOT"
log "building"
go build -o "$WORK/capgate" ./cmd/capgate
go build -o "$WORK/adaptive" ./bench/adaptive
CG="$WORK/capgate"
SERVE=${SERVE_BIN:-$CG}
ATTACK_ROWS=${ATTACK_ROWS:-40}

SPORT=$(free_port)
"$CG" simapi --listen "127.0.0.1:$SPORT" --users-per-tier 10 --tokens "$WORK/users.json" \
	--backend-capacity "$K" --backend-base-ms "$B" 2>"$WORK/simapi.err" &
PIDS+=($!)
wait_port "$SPORT"
start_redis --protected-mode no --loglevel warning

# Every limit but the one under test out of the way.
BASE=(mode=enforce enforce_for=all reserve_single_row=0 api_heavy.cluster=1000 api_heavy.per_task=1000
	tiers.staff=1000 tiers.core=1000 tiers.early_access=1000 tiers.preview=1000
	per_user.staff=1000 per_user.core=1000 per_user.early_access=1000 per_user.preview=1000
	wait.max_seconds=20 wait.max_waiting=1000 wait.max_waiting_per_user=1000)
HIGH=$((3 * K))
LOW=$(((K + 2) / 3))

row_config() {
	case $1 in
	static-high) echo "es2_knn=$HIGH" ;;
	static-low) echo "es2_knn=$LOW" ;;
	local | local-uneven) echo "es2_knn=1000 api_heavy.per_task=$K adaptive.api_heavy_task.mode=apply adaptive.api_heavy_task.min=1 adaptive.api_heavy_task.max=64" ;;
	cluster-high | cluster-uneven) echo "es2_knn=$HIGH adaptive.es2_knn.mode=apply adaptive.es2_knn.min=1 adaptive.es2_knn.max=64" ;;
	cluster-low) echo "es2_knn=$LOW adaptive.es2_knn.mode=apply adaptive.es2_knn.min=1 adaptive.es2_knn.max=64" ;;
	cluster-switch) echo "es2_knn=$HIGH adaptive.es2_knn.mode=advise adaptive.es2_knn.min=1 adaptive.es2_knn.max=64" ;;
	attack-static) echo "es2_knn=$K per_user.early_access=2" ;;
	attack) echo "es2_knn=$HIGH per_user.early_access=2 adaptive.es2_knn.mode=apply adaptive.es2_knn.min=1 adaptive.es2_knn.max=64" ;;
	esac
}

LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
db=0
declare -A OUT
for row in $ROWS; do
	db=$((db + 1))
	log "$row"
	# Reset the backend between rows.
	per_row=false
	[[ $row == attack* ]] && per_row=true
	curl -fsS -X POST -d "{\"capacity\": $K, \"per_row\": $per_row}" "http://127.0.0.1:$SPORT/_sim/backend" >/dev/null
	URLS=""
	for i in 1 2 3; do
		sqlite="sqlite:$WORK/$row-gw$i.db"
		# shellcheck disable=SC2046
		"$CG" capacity set --create --database "$sqlite" "${BASE[@]}" $(row_config "$row") >/dev/null 2>"$WORK/set.err" ||
			{ cat "$WORK/set.err" >&2; exit 1; }
		port=$(free_port)
		"$SERVE" serve --listen "127.0.0.1:$port" --upstream "http://127.0.0.1:$SPORT" --identity tokens \
			--tokens "$WORK/users.json" --database "$sqlite" --task-id "gw$i" \
			--redis "redis://127.0.0.1:$RPORT/$db" --log-file "$WORK/$row-gw$i.lines" >"$WORK/$row-gw$i.log" 2>&1 &
		GW_PIDS+=($!)
		wait_port "$port"
		URLS+="${URLS:+,}http://127.0.0.1:$port"
	done
	lane=es2_knn
	[[ $row == local* ]] && lane=task
	uneven=()
	[[ $row == *-uneven ]] && uneven=(-spread "$SPREAD" -move-at "$MOVE_AT")
	[[ $row == attack* ]] && uneven=(-attacker early-access-10-token -attack-rows "$ATTACK_ROWS")
	if [[ $row == cluster-switch ]]; then
		(
			sleep "$SWITCH_AT"
			for i in 1 2 3; do
				"$CG" capacity set --database "sqlite:$WORK/$row-gw$i.db" adaptive.es2_knn.mode=apply >/dev/null 2>>"$WORK/set.err"
			done
		) &
		PIDS+=($!)
	fi
	OUT[$row]=$("$WORK/adaptive" -urls "$URLS" -sim "http://127.0.0.1:$SPORT" -tokens "$WORK/users.json" \
		-callers "$CALLERS" -duration "$DURATION" -halve-at "$HALVE_AT" -capacity "$K" -base-ms "$B" -lane "$lane" "${uneven[@]}")
	echo "${OUT[$row]}" >"$WORK/$row.json"
	log "$(cut -c1-300 <<<"${OUT[$row]}")"
	stop_pids "${GW_PIDS[@]}"
	GW_PIDS=()
done

# --- the report -----------------------------------------------------------
field() { sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p" <<<"$1" | tr -d '"'; }
echo "Run: \`bench/adaptive.sh\` (K=$K calls at once, B=$B ms, $CALLERS callers, 3 gateways on one Redis, capacity halved at $HALVE_AT of $DURATION) on $(date -u '+%Y-%m-%d %H:%M UTC'),"
echo "$(nproc) CPUs, $(go version | cut -d' ' -f3), load average $LOAD_START at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end."
echo
echo "| row | limit at start → end | converge (s) | swing (steady window) | throughput / (K/B) | backend p50 / p99 (ms, B=$B) | follow K/2 (s) | throughput / (K/2/B) after | p50 / p99 after (ms) | 429s | calls/s per caller by group (fairness) |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for row in $ROWS; do
	j=${OUT[$row]}
	printf '| %s | %s → %s | %s | ±%.0f %% | %.0f/s = %.2f | %.0f / %.0f | %s | %.0f/s = %.2f | %.0f / %.0f | %s | %s |\n' "$row" \
		"$(field "$j" limit_start)" "$(field "$j" limit_end)" "$(field "$j" converge_s)" "$(field "$j" swing_pct)" \
		"$(field "$j" throughput)" "$(field "$j" ratio)" "$(field "$j" p50_ms)" "$(field "$j" p99_ms)" \
		"$(field "$j" follow_s)" "$(field "$j" throughput2)" "$(field "$j" ratio2)" "$(field "$j" p50_ms2)" \
		"$(field "$j" p99_ms2)" "$(field "$j" refused)" \
		"$(sed -n 's/.*"per_caller":\[\([^]]*\)\].*/\1/p' <<<"$j" | sed 's/,/ · /g') ($(field "$j" fairness))"
done
echo
echo "Limit in force each second (es2_knn, or for local the sum of the three gateways' own limits):"
echo
for row in $ROWS; do
	each=$(sed -n 's/.*"limits_end_per_gw":\[\([^]]*\)\].*/\1/p' <<<"${OUT[$row]}" | sed 's/,/, /g')
	echo "- $row (mean $(field "${OUT[$row]}" limit_mean) in the converged window${each:+; at the end, each gateway: $each}$([[ $row == attack* ]] && echo "; the attacker's calls done: $(field "${OUT[$row]}" attack_done)")): $(sed -n 's/.*"limit_per_s":\[\([^]]*\)\].*/\1/p' <<<"${OUT[$row]}" | tr ',' ' ')"
done
if [[ $ROWS == *uneven* ]]; then
	echo
	echo "Uneven rows: callers $SPREAD on gw1..gw3, moved one gateway back (gw1's to gw3) at $MOVE_AT; a group is the callers that started on one gateway."
fi
