#!/usr/bin/env bash
# bench/run.sh: measure capgate side by side with Redis itself and with
# nginx, and write the generated part of docs/BENCHMARKS.md.
#
# Everything runs on 127.0.0.1: a redis-server of our own on a spare port
# (never the machine's 6379), nginx with our own config in a temp dir on
# spare ports, capgate serve on spare ports. Every process started here is
# killed on exit. Bounded: the whole run takes a few minutes on 2 cores.
#
#   bench/run.sh                 # everything, ROUNDS=5
#   ROUNDS=3 SKIP_GATEWAY=1 bench/run.sh
#
# Needs Go; installs nginx, wrk and redis-server with apt-get if missing.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
ROUNDS=${ROUNDS:-5}
OUT=${OUT:-$ROOT/docs/BENCHMARKS.md}
SKIP_GATEWAY=${SKIP_GATEWAY:-}
WRK_SECONDS=${WRK_SECONDS:-3}
STORE_SECONDS=${STORE_SECONDS:-1}

# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_init bench

# --- tools --------------------------------------------------------------
need=()
command -v redis-server >/dev/null || need+=(redis-server)
command -v redis-benchmark >/dev/null || need+=(redis-tools)
command -v nginx >/dev/null || [[ -x /usr/sbin/nginx ]] || need+=(nginx)
command -v wrk >/dev/null || need+=(wrk)
if ((${#need[@]})); then
	log "installing ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
	# Debian's package may start the system nginx; we use our own.
	if [[ " ${need[*]} " == *" nginx "* ]]; then
		service nginx stop >/dev/null 2>&1 || true
	fi
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
command -v go >/dev/null || { echo "bench/run.sh: Go is needed" >&2; exit 1; }

# cmdlog records a command for the document's command list, with the run's
# temp dir and ports made generic.
cmdlog() {
	local line="$*"
	line=${line//$WORK/\$WORK}
	printf '%s\n' "$line" >>"$WORK/commands.txt"
}

# result appends one measurement to results.jsonl.
result() { # kind round c target data
	printf '{"kind":"%s","round":%s,"c":%s,"target":"%s","data":%s}\n' "$1" "$2" "$3" "$4" "$5" >>"$WORK/results.jsonl"
}

: >"$WORK/results.jsonl"
: >"$WORK/commands.txt"
cd "$ROOT"

# --- machine --------------------------------------------------------------
{
	echo "date:      $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "commit:    $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"
	echo "nproc:     $(nproc)"
	echo "cpu:       $(lscpu | sed -n 's/^Model name: *//p' | head -1)"
	echo "memory:    $(free -g | awk '/^Mem:/ {print $2 " GiB"}')"
	echo "load:      $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min, at the start)"
	echo "go:        $(go version | cut -d' ' -f3-)"
	echo "redis:     $(redis-server --version | cut -d' ' -f3)"
	echo "nginx:     $("$NGINX" -v 2>&1 | cut -d/ -f2)"
	echo "wrk:       $(wrk -v 2>&1 | head -1 | cut -d' ' -f2)"
} >"$WORK/machine.txt"

# --- build ----------------------------------------------------------------
log "building"
go build -o "$WORK/storebench" ./bench/storebench
go build -o "$WORK/report" ./bench/report
cmdlog "go build -o \$WORK/storebench ./bench/storebench"

# --- our own Redis ----------------------------------------------------------
start_redis
cmdlog "redis-server --port \$RPORT --bind 127.0.0.1 --save '' --appendonly no --dir \$WORK"

# --- micro-benchmarks and the in-process store (part 2) ----------------------
log "go micro-benchmarks"
go test -run '^$' -bench 'GateAdmitRelease|KeysPlan|AdmissionSetHeaders|AdmissionLogLine|RecordAppendJSON' \
	-benchtime 200ms -count "$ROUNDS" . >"$WORK/gobench-micro.txt"
cmdlog "go test -run '^\$' -bench 'GateAdmitRelease|KeysPlan|AdmissionSetHeaders|AdmissionLogLine|RecordAppendJSON' -benchtime 200ms -count $ROUNDS ."
go test -run '^$' -bench 'BenchmarkAcquireRelease$|SemanticParallel' -cpu 1,2 \
	-benchtime 200ms -count "$ROUNDS" ./memory >"$WORK/gobench-memory.txt"
cmdlog "go test -run '^\$' -bench 'BenchmarkAcquireRelease\$|SemanticParallel' -cpu 1,2 -benchtime 200ms -count $ROUNDS ./memory"

# --- part 1: the Redis store against redis-benchmark --------------------------
log "part 1: Redis store vs redis-benchmark"
SHA=$(redis-cli -p "$RPORT" SCRIPT LOAD "$(cat redis/acquire.lua)")
KEYS5="ocl:capacity:api_heavy ocl:capacity:api_heavy_task:bench ocl:capacity:es2_knn ocl:capacity:tier:core ocl:capacity:user:rb"
LIMITS5="1048576 1048576 1048576 1048576 1048576"

# rb runs redis-benchmark and prints {"rps","p50_us","p99_us"}.
rb() { # c n command...
	local c=$1 n=$2
	shift 2
	redis-benchmark -h 127.0.0.1 -p "$RPORT" -c "$c" -n "$n" -r 64 --csv "$@" | tail -1 | tr -d '"' |
		awk -F, '{printf "{\"rps\":%s,\"p50_us\":%.1f,\"p99_us\":%.1f}", $2, $5 * 1000, $7 * 1000}'
}

for c in 1 8 64; do
	n=$((c == 1 ? 8000 : 25000))
	for r in $(seq "$ROUNDS"); do
		result store "$r" "$c" "" "$("$WORK/storebench" pairs -redis "$REDIS_URL" -c "$c" -d "${STORE_SECONDS}s" -max-in-flight "$c")"
		result goredis "$r" "$c" "" "$("$WORK/storebench" pairs -raw redis/acquire.lua -redis "$REDIS_URL" -c "$c" -d "${STORE_SECONDS}s")"
		# shellcheck disable=SC2086 # word splitting of the keys is meant
		result rb_evalsha "$r" "$c" "" "$(rb "$c" "$n" EVALSHA "$SHA" 5 $KEYS5 __rand_int__ 60000 1 0 $LIMITS5)"
		result rb_ping "$r" "$c" "" "$(rb "$c" $((n * 2)) PING)"
	done
	if [[ $c == 64 ]]; then
		out=$("$WORK/storebench" pairs -redis "$REDIS_URL" -c 64 -d "${STORE_SECONDS}s")
		result store_default 1 64 "" "${out%\}},\"max_in_flight\":\"32\",\"max_queued\":\"8\"}"
	fi
done
cmdlog "\$WORK/storebench pairs -redis redis://127.0.0.1:\$RPORT/0 -c {1,8,64} -d ${STORE_SECONDS}s -max-in-flight {1,8,64}"
cmdlog "\$WORK/storebench pairs -raw redis/acquire.lua -redis redis://127.0.0.1:\$RPORT/0 -c {1,8,64} -d ${STORE_SECONDS}s   # go-redis alone"
cmdlog "redis-benchmark -h 127.0.0.1 -p \$RPORT -c {1,8,64} -n {8000,25000} -r 64 --csv EVALSHA $SHA 5 $KEYS5 __rand_int__ 60000 1 0 $LIMITS5"
cmdlog "redis-benchmark -h 127.0.0.1 -p \$RPORT -c {1,8,64} -n {16000,50000} -r 64 --csv PING"
cmdlog "\$WORK/storebench pairs -redis redis://127.0.0.1:\$RPORT/0 -c 64 -d ${STORE_SECONDS}s   # the store's default bounds"

# --- part 4: scale ---------------------------------------------------------------
log "part 4: scale"
for users in 10 1000 100000; do
	result scale 1 0 "" "$("$WORK/storebench" scale -redis "$REDIS_URL" -users "$users" -rounds 5 -pairs 1000)"
done
cmdlog "\$WORK/storebench scale -redis redis://127.0.0.1:\$RPORT/0 -users {10,1000,100000} -rounds 5 -pairs 1000"

# --- part 3 and 5: the gateway -----------------------------------------------------
if [[ -n "$SKIP_GATEWAY" ]]; then
	echo "SKIP_GATEWAY was set." >"$WORK/gateway-skipped.txt"
else
	# shellcheck source=bench/gateway.sh
	source "$ROOT/bench/gateway.sh"
fi

# --- the document --------------------------------------------------------------------
log "writing $OUT"
"$WORK/report" -dir "$WORK" -out "$OUT"
log "done"
