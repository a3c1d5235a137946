#!/usr/bin/env bash
# bench/inapp-starve.sh: the starvation attack on the in-app path (issue 28,
# finding 2). The decision suite's Django/DRF app (test/decide/app) under
# gunicorn (1 worker, gthread, 8 threads) with capgate.django's middleware
# asking `capgate decide` (in-process lanes, enforce, enforce_for all, the
# preview user pam paused). HOGS callers send 10 MB lexical $match bodies,
# which hold the worker's GIL in DRF's JSON parser, while ATTACKERS callers
# send pam's heavy $match (held 300 ms) for SECONDS_EACH seconds. Three runs
# on the same app: with the package as it was before the fix (PRE, a git
# revision, default the commit before it), with this tree's, and with no
# limiter (the control: every call runs). Prints a Markdown table: pam's
# heavy runs (each one uncounted) and the most at once, and her statuses.
# Needs Debian's python3-django, python3-djangorestframework, gunicorn.
#
#   bench/inapp-starve.sh
#   SECONDS_EACH=30 HOGS=4 bench/inapp-starve.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
bench_init inapp-starve
SECONDS_EACH=${SECONDS_EACH:-15}
export SECONDS_EACH HOGS=${HOGS:-3} ATTACKERS=${ATTACKERS:-2}
PRE=${PRE:-fd0e892~1}
PY=/usr/bin/python3
ROOT=$PWD

go build -o "$WORK/capgate" ./cmd/capgate
mkdir -p "$WORK/pre"
# The package before, with the app of its time (today's app decorates a
# DRF class, which that package could not).
git archive "$PRE" python/capgate test/decide/app test/internal/python | tar -x -C "$WORK/pre"

APP="$ROOT/test/decide/app"
export DECIDE_DIR="$WORK" DJANGO_SETTINGS_MODULE=decidesite.settings PYTHONDONTWRITEBYTECODE=1
BASE_PATH="$ROOT/test/internal/python:$APP"
(cd "$APP" && PYTHONPATH="$BASE_PATH:$ROOT/python" "$PY" -m oclapi.setup_db) | tail -1 >"$WORK/creds.json"
TOKEN=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["tokens"]["pam"])' "$WORK/creds.json")
DB="sqlite:$WORK/config.db"
"$WORK/capgate" capacity set --create --database "$DB" mode=enforce enforce_for=all wait.max_seconds=0 \
	per_user.preview=0 >/dev/null
"$WORK/capgate" decide --listen "unix:$WORK/d.sock" --database "$DB" --task-id starve \
	--log-file "$WORK/d.log" 2>"$WORK/d.stderr" &
PIDS+=($!)
for _ in $(seq 100); do [[ -S "$WORK/d.sock" ]] && break; sleep 0.1; done

# run NAME ROOT ENV... prints starve.py's JSON line for the app and the
# package of the tree at ROOT.
run() {
	local name=$1 root=$2 port pid
	shift 2
	port=$(free_port)
	: >"$WORK/$name.jsonl"
	(cd "$root/test/decide/app" && exec env PYTHONPATH="$root/test/internal/python:$root/test/decide/app:$root/python" \
		DECIDE_RECORD="$WORK/$name.jsonl" "$@" \
		gunicorn --bind "127.0.0.1:$port" --workers 1 --worker-class gthread --threads 8 --timeout 120 \
		decidesite.wsgi:application 2>"$WORK/gunicorn-$name.log") &
	pid=$!
	PIDS+=($pid)
	wait_port "$port"
	"$PY" bench/inapp/starve.py "$port" "$TOKEN" "$WORK/$name.jsonl"
	stop_pids "$pid"
}

field() { "$PY" -c 'import json,sys; v=json.loads(sys.argv[1])[sys.argv[2]]; print(json.dumps(v) if isinstance(v, dict) else v)' "$1" "$2"; }

log "load before: $(uptime)"
echo "| package | pam's heavy runs (uncounted) | most at once | pam's statuses | hog calls |"
echo "|---|---|---|---|---|"
for what in pre fixed control; do
	case $what in
	pre) out=$(run pre "$WORK/pre" CAPGATE_URL="unix:$WORK/d.sock") label="before ($PRE)" ;;
	fixed) out=$(run fixed "$ROOT" CAPGATE_URL="unix:$WORK/d.sock") label="this tree" ;;
	control) out=$(run control "$ROOT" DECIDE_NO_LIMITER=1 CAPGATE_URL=unix:/nonexistent) label="no limiter (control)" ;;
	esac
	echo "| $label | $(field "$out" pam_runs) | $(field "$out" pam_at_once) | $(field "$out" statuses) | $(field "$out" hog_calls) |"
done
log "load after: $(uptime)"
