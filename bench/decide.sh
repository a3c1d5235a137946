#!/usr/bin/env bash
# bench/decide.sh: what deciding inside the app adds to a heavy call.
#
# The decision suite's Django/DRF app (test/decide/app) under gunicorn
# (2 workers × 8 threads), three times: without the limiter, with
# capgate.django.CapacityMiddleware asking `capgate decide` over a unix socket
# with in-process lanes, and the same with the lanes in a Redis of our own on
# loopback. wrk sends a staff user's heavy $match (the view holds it 0 ms) at
# 1 and then 16 connections for SECONDS_EACH seconds per run, after a 1 s
# warm-up; the limits are high enough that every call is admitted. Prints a
# Markdown table of p50/p99 and what the limiter adds to each (with −
# without), and the machine's load. Needs Debian's python3-django,
# python3-djangorestframework, gunicorn (scripts/bypass-deps.sh), wrk and
# redis-server.
#
#   bench/decide.sh                 # 8 s per run
#   SECONDS_EACH=20 bench/decide.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
bench_init decide
need_tools wrk:wrk redis-server:redis-server
SECONDS_EACH=${SECONDS_EACH:-8}
PY=/usr/bin/python3
ROOT=$PWD

go build -o "$WORK/capgate" ./cmd/capgate
start_redis

APP="$ROOT/test/decide/app"
export PYTHONPATH="$ROOT/test/internal/python:$ROOT/python:$APP" DECIDE_DIR="$WORK" DECIDE_RECORD=/dev/null \
	DJANGO_SETTINGS_MODULE=decidesite.settings PYTHONDONTWRITEBYTECODE=1
(cd "$APP" && "$PY" -m oclapi.setup_db) | tail -1 >"$WORK/creds.json"
TOKEN=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["tokens"]["stan"])' "$WORK/creds.json")
DB="sqlite:$WORK/config.db"
"$WORK/capgate" capacity set --create --database "$DB" mode=enforce enforce_for=all wait.max_seconds=0 \
	per_user.staff=64 tiers.staff=64 api_heavy.cluster=64 api_heavy.per_task=64 es2_knn=64 >/dev/null

# start_decide NAME ARG... starts a decision service on $WORK/NAME.sock.
start_decide() {
	local name=$1
	shift
	"$WORK/capgate" decide --listen "unix:$WORK/$name.sock" --database "$DB" --task-id "$name" \
		--log-file "$WORK/$name.log" "$@" 2>"$WORK/$name.stderr" &
	PIDS+=($!)
	local i
	for i in $(seq 100); do
		[[ -S "$WORK/$name.sock" ]] && return 0
		sleep 0.1
	done
	echo "bench/decide.sh: decide $name never listened" >&2
	cat "$WORK/$name.stderr" >&2
	return 1
}
start_decide memory
start_decide redis --redis "$REDIS_URL"

# start_app NAME ENV... starts gunicorn on a spare port; sets PORT_<NAME>.
start_app() {
	local name=$1 port
	shift
	port=$(free_port)
	(cd "$APP" && exec env "$@" gunicorn --bind "127.0.0.1:$port" --workers 2 --worker-class gthread --threads 8 --graceful-timeout 2 \
		--timeout 60 decidesite.wsgi:application 2>"$WORK/gunicorn-$name.log") &
	PIDS+=($!)
	wait_port "$port"
	printf -v "PORT_$name" '%s' "$port"
}
start_app none DECIDE_NO_LIMITER=1 CAPGATE_URL=unix:/nonexistent
start_app memory "CAPGATE_URL=unix:$WORK/memory.sock"
start_app redis "CAPGATE_URL=unix:$WORK/redis.sock"

cat >"$WORK/post.lua" <<EOF
wrk.method = "POST"
wrk.body = '{"rows":[{"name":"fever"}]}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Token $TOKEN"
done = function(summary, latency, requests)
  io.write(string.format('{"p50":%d,"p99":%d,"requests":%d,"non2xx":%d,"errors":%d}\n',
    latency:percentile(50), latency:percentile(99), summary.requests, summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
EOF
MATCH='/concepts/$match/?semantic=true'

# measure NAME CONNS prints wrk's JSON line for app NAME at CONNS connections.
measure() {
	local port_var="PORT_$1" threads=1
	(($2 > 1)) && threads=2
	wrk -t "$threads" -c "$2" -d 1s -s "$WORK/post.lua" "http://127.0.0.1:${!port_var}$MATCH" >/dev/null
	wrk -t "$threads" -c "$2" -d "${SECONDS_EACH}s" -s "$WORK/post.lua" "http://127.0.0.1:${!port_var}$MATCH" | tail -1
}

field() { "$PY" -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }
ms() { awk -v us="$1" 'BEGIN { printf "%.2f", us / 1000 }'; }

# Each worker loads Django on its first request: warm them all first.
for app in none memory redis; do
	port_var="PORT_$app"
	wrk -t 2 -c 16 -d 3s -s "$WORK/post.lua" "http://127.0.0.1:${!port_var}$MATCH" >/dev/null
done

log "load before: $(uptime)"
echo "| callers | lanes | p50 without | p50 with | added p50 | p99 without | p99 with | added p99 | calls (non-2xx) |"
echo "|---|---|---|---|---|---|---|---|---|"
for conns in 1 16; do
	base=$(measure none "$conns")
	for lanes in memory redis; do
		with=$(measure "$lanes" "$conns")
		b50=$(field "$base" p50) b99=$(field "$base" p99) w50=$(field "$with" p50) w99=$(field "$with" p99)
		echo "| $conns | $lanes | $(ms "$b50") ms | $(ms "$w50") ms | **$(ms $((w50 - b50))) ms** | $(ms "$b99") ms | $(ms "$w99") ms | $(ms $((w99 - b99))) ms | $(field "$with" requests) ($(field "$with" non2xx)) |"
	done
done
log "load after: $(uptime)"
admitted=$(cat "$WORK"/memory.log "$WORK"/redis.log | grep -c '"decision":"admitted"' || true)
log "decision services logged $admitted admitted calls"
