#!/usr/bin/env bash
# Runs the fault suite (test/faults, build tag "faults"): real redis-server
# (master, replica, three Sentinels), a PostgreSQL of its own, capgate serve
# gateways and a counting upstream, all on loopback spare ports.
#
#   scripts/faults.sh           every scenario (< 10 min); regenerates docs/RELIABILITY.md
#   scripts/faults.sh --short   scenarios 1, 3, 6, 7 with small durations, 12, 13, 14 (limits and a failover on a Redis Cluster), 15 and 16 (a Redis restart under a full waitlist, a stall then recovery; < 8 min), for CI
#
# Extra arguments go to `go test` (e.g. -run 'TestS0[45]').
# Exits non-zero when any assertion fails. Needs root (or the postgres
# user's rights) to run initdb as postgres; installs redis-server if missing.
set -euo pipefail
cd "$(dirname "$0")/.."

short=0
args=()
for a in "$@"; do
	case "$a" in
	--short) short=1 ;;
	*) args+=("$a") ;;
	esac
done

if ! command -v redis-server >/dev/null; then
	echo "faults: installing redis-server"
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
fi

if [ "$short" = 1 ]; then
	exec go test -tags faults -count=1 -v -timeout 8m -run 'TestS0[1367]|TestS1[2356]|TestS14ClusterFailover$|TestSpliceDoc' "${args[@]}" ./test/faults \
		-args -faults.short
fi
go test -tags faults -count=1 -v -timeout 15m "${args[@]}" ./test/faults \
	-args -faults.doc="$PWD/docs/RELIABILITY.md" -faults.cmd="scripts/faults.sh"
