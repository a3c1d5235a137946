#!/usr/bin/env bash
# A local Redis Cluster for the tests: 3 masters and 3 replicas on loopback
# ports BASE..BASE+5 (default 7000..7005; cluster bus ports +10000), no
# persistence, data under ${TMPDIR:-/tmp}/capgate-cluster-BASE.
#
#   scripts/cluster.sh [start] [BASE]   start it unless it is up (idempotent)
#   scripts/cluster.sh stop [BASE]      stop the nodes this script started
#   scripts/cluster.sh status [BASE]    say whether it is up
#
# start prints the seed list, as the tests take it:
#   CAPGATE_TEST_REDIS_CLUSTER=127.0.0.1:7000,...,127.0.0.1:7005
# CLUSTER_NODE_TIMEOUT (ms, default 5000) is how long a master may be
# silent before its replica takes over. Installs redis-server if missing.
set -euo pipefail

cmd=${1:-start}
base=${2:-7000}
case "$cmd" in start | stop | status) ;; *)
	echo "usage: scripts/cluster.sh [start|stop|status] [BASE_PORT]" >&2
	exit 2
	;;
esac
dir="${TMPDIR:-/tmp}/capgate-cluster-$base"
ports=$(seq "$base" $((base + 5)))
seeds=$(for p in $ports; do printf '127.0.0.1:%s,' "$p"; done)
seeds=${seeds%,}

# up: every node answers and sees a healthy cluster of six, three of them
# replicas.
up() {
	local p info
	for p in $ports; do
		info=$(redis-cli -h 127.0.0.1 -p "$p" cluster info 2>/dev/null) || return 1
		grep -q '^cluster_state:ok' <<<"$info" || return 1
		grep -q '^cluster_known_nodes:6' <<<"$info" || return 1
		[ "$(redis-cli -h 127.0.0.1 -p "$p" cluster nodes | awk '$3 ~ /slave/' | wc -l)" = 3 ] || return 1
	done
}

stop() {
	local p pid
	for p in $ports; do
		[ -f "$dir/$p/redis.pid" ] || continue
		pid=$(cat "$dir/$p/redis.pid")
		# Only a redis-server that this script started, by its own pid.
		if [ -n "$pid" ] && grep -q redis-server "/proc/$pid/cmdline" 2>/dev/null; then
			kill "$pid" 2>/dev/null || true
			for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		fi
	done
	rm -rf "$dir"
}

case "$cmd" in
status)
	if up; then echo "cluster: up on $seeds"; else echo "cluster: down ($seeds)"; exit 1; fi
	exit 0
	;;
stop)
	stop
	echo "cluster: stopped ($seeds)"
	exit 0
	;;
esac

if ! command -v redis-server >/dev/null; then
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
fi
if up; then
	echo "cluster: up on $seeds"
	echo "CAPGATE_TEST_REDIS_CLUSTER=$seeds"
	exit 0
fi

# Whatever is left of an earlier start (a node killed, a half-made
# cluster) is stopped and wiped: the cluster holds nothing worth keeping.
stop
for p in $ports; do
	if redis-cli -h 127.0.0.1 -p "$p" ping >/dev/null 2>&1; then
		echo "cluster: port $p is taken by a server this script did not start" >&2
		exit 1
	fi
	mkdir -p "$dir/$p"
	redis-server --daemonize yes --bind 127.0.0.1 --port "$p" --protected-mode no \
		--cluster-enabled yes --cluster-config-file "$dir/$p/nodes.conf" \
		--cluster-node-timeout "${CLUSTER_NODE_TIMEOUT:-5000}" \
		--save "" --appendonly no --dir "$dir/$p" \
		--pidfile "$dir/$p/redis.pid" --logfile "$dir/$p/redis.log" --loglevel warning
done
for p in $ports; do
	for _ in $(seq 50); do redis-cli -h 127.0.0.1 -p "$p" ping >/dev/null 2>&1 && break; sleep 0.1; done
done
# shellcheck disable=SC2046 # one address per word
redis-cli --cluster create $(for p in $ports; do printf '127.0.0.1:%s ' "$p"; done) \
	--cluster-replicas 1 --cluster-yes >"$dir/create.log" 2>&1 || {
	cat "$dir/create.log" >&2
	exit 1
}
for _ in $(seq 120); do up && break; sleep 0.25; done # gossip takes a few seconds
if ! up; then
	echo "cluster: not healthy after create; see $dir/*/redis.log" >&2
	exit 1
fi
echo "cluster: up on $seeds"
echo "CAPGATE_TEST_REDIS_CLUSTER=$seeds"
