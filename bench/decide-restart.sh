#!/usr/bin/env bash
# bench/decide-restart.sh: what a killed `capgate decide` costs in capacity.
#
# One decision service (unix socket, lanes in a Redis of our own, lease_seconds
# 20) holds three calls of one core user made through the Python client
# (capgate.Client). It is killed with SIGKILL; two of the calls then end in
# the app, one keeps running; the service is started again at once. Prints,
# for RUNS runs, how long after the restart began (a) the service listened,
# (b) the user's lane in Redis held exactly the one running call (the two
# that ended freed: the journal, package journal, once the killed service's
# liveness has lapsed and the new one has run 1 s; the running one counted
# again: the client's re-register, python/capgate/client.py), and the lane's
# count at the restart. Needs redis-server.
#
#   bench/decide-restart.sh          # 5 runs
#   RUNS=10 bench/decide-restart.sh
#   BIN=/tmp/capgate-before bench/decide-restart.sh   # another build, side by side
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
bench_init decide-restart
need_tools redis-server:redis-server
RUNS=${RUNS:-5}
if [[ -n "${BIN:-}" ]]; then
	cp "$BIN" "$WORK/capgate"
else
	go build -o "$WORK/capgate" ./cmd/capgate
fi
start_redis
DB="sqlite:$WORK/config.db"
"$WORK/capgate" capacity set --create --database "$DB" mode=enforce enforce_for=all wait.max_seconds=0 \
	per_user.core=3 tiers.core=8 api_heavy.per_task=8 lease_seconds=20 renew_seconds=5 >/dev/null
PYTHONPATH="$PWD/python" PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 bench/decide-restart/run.py \
	"$WORK" "$WORK/capgate" "$DB" "$REDIS_URL" "$RUNS"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores"
