#!/usr/bin/env bash
# bench/fleet.sh: what a fleet of gateways costs the Redis they share.
#
# For a standalone Redis and for a Redis Cluster (3 masters + 3 replicas),
# and for fleets of 1, 5 and 20 gateways (`capgate serve`, each its own
# --task-id, shadow mode, tokens identity, in front of one `capgate simapi`),
# bench/fleet drives a steady mix of heavy calls (RATE per second over the
# whole fleet: bulk and single-row semantic $match, reranker $match,
# $rerank) and reports:
#   - Redis commands and Redis CPU time per gated call (INFO commandstats
#     and used_cpu_* on every master, before and after a WINDOW of load);
#   - the p50/p99 of one acquire (a 5-lane call through redis.Store) timed
#     under the same load;
#   - the lane keys left once the load has stopped (0 once leases end).
# Then, at 20 gateways x 100 000 users (one live lease in each user and task
# lane), the wall time of `capgate capacity status` and Redis memory per
# lease. Last, what waiting tickets cost the standalone Redis (`fleet
# waiters`, for each count in TICKETS): Redis time of one join onto a full
# list (INFO commandstats), and of the waiters' pumps, as % of a core.
#
# Everything runs on 127.0.0.1: a redis-server of its own on a spare port
# (never the machine's 6379), a cluster on CLUSTER_BASE..+5 (default
# 7100..7105, scripts/cluster.sh), gateways and simapi on spare ports. Every
# process it starts is stopped on exit. About 5 minutes on 2 cores.
#
#   bench/fleet.sh                     # prints a Markdown report on stdout
#   RATE=100 WINDOW=8s bench/fleet.sh
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
RATE=${RATE:-150}
WINDOW=${WINDOW:-10s}
PROBE=${PROBE:-5s}
USERS=${USERS:-100000}
CLUSTER_BASE=${CLUSTER_BASE:-7100}
FLEETS=${FLEETS:-"1 5 20"}
TICKETS=${TICKETS:-"200 10000"}

# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_init fleet
on_exit() { "$ROOT/scripts/cluster.sh" stop "$CLUSTER_BASE" >/dev/null 2>&1 || true; }

need_tools redis-server:redis-server

log "building"
cd "$ROOT"
go build -o "$WORK/capgate" ./cmd/capgate
go build -o "$WORK/fleet" ./bench/fleet

# The upstream, and its users as a tokens file.
SIM=$(free_port)
"$WORK/capgate" simapi --listen "127.0.0.1:$SIM" --tokens "$WORK/users.json" --users-per-tier 25 >"$WORK/simapi.log" 2>&1 &
PIDS+=($!)
wait_port "$SIM"

# A standalone Redis of our own, and a cluster.
start_redis --protected-mode no --loglevel warning
log "starting the cluster on $CLUSTER_BASE"
"$ROOT/scripts/cluster.sh" start "$CLUSTER_BASE" >&2
SEEDS=$(seq -s, -f "127.0.0.1:%g" "$CLUSTER_BASE" $((CLUSTER_BASE + 5)))

# start_fleet N KIND starts N gateways on KIND (standalone|cluster) and sets URLS.
start_fleet() {
	local n=$1 kind=$2 i port lanes
	if [[ $kind == cluster ]]; then lanes=(--redis-cluster "$SEEDS"); else lanes=(--redis "redis://127.0.0.1:$RPORT/0"); fi
	URLS=""
	for i in $(seq "$n"); do
		port=$(free_port)
		"$WORK/capgate" serve --listen "127.0.0.1:$port" --upstream "http://127.0.0.1:$SIM" \
			--identity tokens --tokens "$WORK/users.json" --task-id "gw$i" \
			--database "sqlite:$WORK/gw$i.db" --log-file /dev/null "${lanes[@]}" \
			>"$WORK/gw$i.log" 2>&1 &
		GW_PIDS+=($!)
		wait_port "$port"
		URLS+="${URLS:+,}http://127.0.0.1:$port"
	done
}
stop_fleet() {
	stop_pids "${GW_PIDS[@]}"
	GW_PIDS=()
}
target() { if [[ $1 == cluster ]]; then echo "-cluster $SEEDS"; else echo "-redis redis://127.0.0.1:$RPORT/0"; fi; }
# ms_since START_NS prints the milliseconds since START_NS.
ms_since() { echo $((($(date +%s%N) - $1) / 1000000)); }

LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
RESULTS=()
STATUS=()
for kind in standalone cluster; do
	for n in $FLEETS; do
		log "$kind: $n gateways, $RATE calls/s"
		"$WORK/fleet" seed -flush $(target "$kind")
		start_fleet "$n" "$kind"
		r=$("$WORK/fleet" run -urls "$URLS" -users "$WORK/users.json" -rate "$RATE" -window "$WINDOW" -probe "$PROBE" $(target "$kind"))
		log "$r"
		RESULTS+=("$kind $r")
		if [[ $n == 20 ]]; then
			log "$kind: status at 20 gateways x $USERS users"
			s=$("$WORK/fleet" seed -users "$USERS" -tasks 20 $(target "$kind"))
			log "$s"
			args=(--redis "redis://127.0.0.1:$RPORT/0")
			[[ $kind == cluster ]] && args=(--redis-cluster "$SEEDS")
			times=()
			for _ in 1 2 3; do
				t0=$(date +%s%N)
				out=$("$WORK/capgate" capacity status --database "sqlite:$WORK/gw1.db" "${args[@]}")
				times+=("$(ms_since "$t0")")
				grep -q '"redis": "ok"' <<<"$out" || { echo "status failed: ${out:0:300}" >&2; times[-1]="failed"; }
			done
			users=$(grep -c '"in_flight": 1' <<<"$out" || true)
			STATUS+=("$kind $s ${times[*]} $users")
		fi
		stop_fleet
	done
done

WAITERS=()
for n in $TICKETS; do
	log "waiters: $n tickets on the standalone Redis"
	w=$("$WORK/fleet" waiters -redis "redis://127.0.0.1:$RPORT/0" -tickets "$n" -users $(((n + 9) / 10)))
	log "$w"
	WAITERS+=("$w")
done

# --- the report -----------------------------------------------------------
field() { sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p" <<<"$1" | tr -d '"'; }
echo "Run: \`bench/fleet.sh\` (RATE=$RATE calls/s over the fleet, WINDOW=$WINDOW, PROBE=$PROBE) on $(date -u '+%Y-%m-%d %H:%M UTC'),"
echo "$(nproc) CPUs ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)), $(redis-server --version | cut -d' ' -f3), $(go version | cut -d' ' -f3), load average $LOAD_START at the start, $(cut -d' ' -f1-3 /proc/loadavg)."
echo
echo "| Redis | gateways | calls | gated in window | unavailable | errors | commands sent / call | commands run / call | Redis CPU µs / call (idle ms/s) | gated calls / s per Redis core | acquire p50 / p99 ms | lane keys left (after) |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
for row in "${RESULTS[@]}"; do
	kind=${row%% *}
	j=${row#* }
	printf '| %s | %s | %s | %s | %s | %s | %.2f | %.1f | %.1f (%.1f) | %.0f | %.3f / %.3f | %s (%.1f s) |\n' "$kind" \
		"$(field "$j" gateways)" "$(field "$j" calls)" "$(field "$j" gated_in_window)" "$(field "$j" unavailable)" \
		"$(field "$j" errors)" "$(field "$j" sent_commands_per_call)" "$(field "$j" redis_commands_per_call)" \
		"$(field "$j" redis_cpu_us_per_call)" "$(field "$j" redis_idle_cpu_ms_per_s)" \
		"$(field "$j" gated_calls_per_redis_core_second)" "$(field "$j" acquire_p50_ms)" "$(field "$j" acquire_p99_ms)" \
		"$(field "$j" lane_keys_after)" "$(field "$j" lane_keys_gone_after_s)"
done
echo
echo "| Redis | lanes seeded (users + tasks) | Redis memory per lease | capacity status wall time (3 runs, ms) | users listed |"
echo "|---|---|---|---|---|"
for row in "${STATUS[@]}"; do
	read -r kind j t1 t2 t3 users <<<"$row"
	printf '| %s | %s + %s | %s bytes | %s, %s, %s | %s |\n' "$kind" "$(field "$j" Users)" "$(field "$j" Tasks)" \
		"$(field "$j" bytes_per_lease)" "$t1" "$t2" "$t3" "$users"
done
echo
echo "| tickets waiting | join onto the full list, Redis µs | join that drops a ticket, µs | pumps / s (every s) | Redis µs / pump | pumps' script time, % of a core | Redis CPU over the window, % of a core (idle) |"
echo "|---|---|---|---|---|---|---|"
for j in "${WAITERS[@]}"; do
	printf '| %s | %.0f | %.0f | %.0f (%s) | %.0f | %.1f | %.1f (%.1f) |\n' "$(field "$j" tickets)" "$(field "$j" join_redis_us)" \
		"$(field "$j" join_drop_redis_us)" "$(field "$j" pumps_per_s)" "$(field "$j" pump_every_s)" "$(field "$j" pump_redis_us)" \
		"$(field "$j" script_core_pct)" "$(field "$j" redis_cpu_core_pct)" "$(field "$j" redis_idle_core_pct)"
done
