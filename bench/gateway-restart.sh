#!/usr/bin/env bash
# bench/gateway-restart.sh: what a killed `capgate serve` costs in capacity.
#
# One gateway (lanes in a Redis of our own, lease_seconds 20, renewed every
# 5 s) in front of a slow upstream that never notices a client gone (a sync
# worker: it finishes the view whatever the connection does) holds three
# heavy calls of one core user (per_user.core 3). It is killed with SIGKILL;
# two of the calls then end in the upstream, one keeps running; the gateway
# is started again at once, same --task-id, same address. Prints, for RUNS
# runs, how long after the restart began (a) it listened, (b) the user's
# lane in Redis was empty: the places of the calls that ended are free (the
# journal, package journal: once the killed gateway's liveness has lapsed,
# about 1 s after the kill, and --restart-hold after the restart), and the
# still-running call is uncounted from then on; and the lane's count at the
# restart and 0.5 s after (b). Needs redis-server.
#
#   bench/gateway-restart.sh                     # 5 runs, --restart-hold 1s (the default)
#   HOLD=5s RUNS=3 bench/gateway-restart.sh      # another hold
#   BIN=/tmp/capgate-before bench/gateway-restart.sh   # another build, side by side
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
bench_init gateway-restart
need_tools redis-server:redis-server
RUNS=${RUNS:-5}
HOLD=${HOLD:-}
if [[ -n "${BIN:-}" ]]; then
	cp "$BIN" "$WORK/capgate"
else
	go build -o "$WORK/capgate" ./cmd/capgate
fi
start_redis
DB="sqlite:$WORK/config.db"
"$WORK/capgate" capacity set --create --database "$DB" mode=enforce enforce_for=all wait.max_seconds=0 \
	per_user.core=3 tiers.core=8 api_heavy.per_task=8 lease_seconds=20 renew_seconds=5 >/dev/null
echo '[{"token":"t-cora","username":"cora","is_staff":false,"auth_groups":["core_user"]}]' >"$WORK/tokens.json"
/usr/bin/python3 bench/gateway-restart/run.py "$WORK" "$WORK/capgate" "$DB" "$REDIS_URL" "$RUNS" "$(free_port)" "$(free_port)" "$HOLD"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores"
