#!/usr/bin/env bash
# bench/decide-workers.sh: waiting heavy calls must not starve the app's
# workers.
#
# The decision suite's Django/DRF app (test/decide/app) under gunicorn with 4
# sync workers (timeout 30 s), capgate.django.CapacityMiddleware asking
# `capgate decide` (in-process lanes; mode enforce, enforce_for all,
# wait.max_seconds 10, per_user.preview 1). Six heavy calls of pam (preview,
# limit 1; each holds 1.5 s) are sent at once, while two clients send light
# calls of cora (a lexical $match: not heavy) one after another until the heavy
# ones are done. Run twice, side by side: with no --max-waiting flag (the
# default bound, 2: half the sync workers) and with --max-waiting 0 (no
# bound: what the default was). Prints each run's light latencies
# (p50, p95, max) and every heavy call's status, Retry-After, the
# X-OCL-Capacity-Waited-Ms it carried and its total time. Needs Debian's
# python3-django, python3-djangorestframework and gunicorn
# (scripts/bypass-deps.sh).
#
#   bench/decide-workers.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
bench_init decide-workers
PY=/usr/bin/python3
ROOT=$PWD
go build -o "$WORK/capgate" ./cmd/capgate
APP="$ROOT/test/decide/app"
export PYTHONPATH="$ROOT/test/internal/python:$ROOT/python:$APP" DECIDE_DIR="$WORK" DECIDE_RECORD=/dev/null \
	DJANGO_SETTINGS_MODULE=decidesite.settings PYTHONDONTWRITEBYTECODE=1
(cd "$APP" && "$PY" -m oclapi.setup_db) | tail -1 >"$WORK/creds.json"
DB="sqlite:$WORK/config.db"
"$WORK/capgate" capacity set --create --database "$DB" mode=enforce enforce_for=all wait.max_seconds=10 \
	per_user.preview=1 tiers.preview=8 api_heavy.per_task=8 api_heavy.cluster=8 es2_knn=8 >/dev/null 2>&1

for max in default 0; do
	sock="$WORK/decide-$max.sock"
	flag=()
	[[ $max == default ]] || flag=(--max-waiting "$max")
	"$WORK/capgate" decide --listen "unix:$sock" --database "$DB" --task-id "host-$max" "${flag[@]}" \
		--log-file "$WORK/decide-$max.log" 2>"$WORK/decide-$max.stderr" &
	dpid=$!
	PIDS+=("$dpid")
	for _ in $(seq 100); do [[ -S "$sock" ]] && break; sleep 0.1; done
	port=$(free_port)
	(cd "$APP" && exec env "CAPGATE_URL=unix:$sock" CAPGATE_TIMEOUT=1 gunicorn --bind "127.0.0.1:$port" --workers 4 \
		--worker-class sync --timeout 30 --graceful-timeout 2 decidesite.wsgi:application 2>"$WORK/gunicorn-$max.log") &
	gpid=$!
	PIDS+=("$gpid")
	wait_port "$port"
	if [[ $max == default ]]; then echo "### no --max-waiting flag (the default)"; else echo "### --max-waiting $max"; fi
	"$PY" bench/decide-workers/run.py "$port" "$WORK/creds.json"
	stop_pids "$gpid" "$dpid"
done
echo "load: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores"
