#!/usr/bin/env bash
# bench/beforeafter.sh: the gated call's cost, two capgate builds side by
# side in one run, so the machine's load weighs on both alike.
#
#   BEFORE=/tmp/capgate-before bench/beforeafter.sh   # AFTER: built from this checkout
#
# Each round runs, for "before" and then "after" (and the other way round
# in the next round): (c) an ungated path, (d) a gated semantic $match on
# in-process lanes, (e) the same on Redis lanes, each at 1 connection
# (latency) and (c), (d) at 64 (throughput at saturation); then one
# redis-benchmark EVALSHA of acquire.lua at 1 connection, the round trip
# target (e) is measured against. The CPU per gated call is the serving
# process's own CPU time per request (from /proc), gated minus ungated at 64
# connections, so other load on the machine does not count in it. Prints
# the medians over ROUNDS rounds.
# Needs what bench/run.sh needs (nginx, wrk, redis-server, redis-benchmark).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
ROUNDS=${ROUNDS:-5}
WRK_SECONDS=${WRK_SECONDS:-3}
: "${BEFORE:?set BEFORE to the capgate binary to compare against}"

# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
bench_init ba

cd "$ROOT"
go build -o "$WORK/after" ./cmd/capgate
cp "$BEFORE" "$WORK/before"
NGINX=$(command -v nginx || echo /usr/sbin/nginx)

start_redis

UPORT=$(free_port)
mkdir -p "$WORK/nginx"
user=""
[[ $EUID == 0 ]] && user="user root;"
cat >"$WORK/nginx/nginx.conf" <<EOF
$user
daemon off;
worker_processes 1;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $WORK/nginx/body;
    keepalive_requests 1000000;
    server {
        listen 127.0.0.1:$UPORT;
        location / {
            default_type application/json;
            return 200 '{"count":1,"results":[{"id":"1","display_name":"Malaria"}]}';
        }
    }
}
EOF
"$NGINX" -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" -e "$WORK/nginx/error.log" &
PIDS+=($!)
wait_port "$UPORT"

write_wrk_files

# serve starts build $2 on a spare port with extra flags, as PORT[$1] and
# SPID[$1] (not in a subshell: PIDS must see it).
declare -A PORT SPID
serve() {
	local name=$1 bin=$2 port
	shift 2
	port=$(free_port)
	"$WORK/$bin" serve --listen "127.0.0.1:$port" --upstream "http://127.0.0.1:$UPORT" \
		--database "sqlite:$WORK/capgate-$port.db" --task-id bench --mode shadow \
		--identity tokens --tokens "$WORK/tokens.json" --log-file "$WORK/capgate-$port.log" \
		"$@" >"$WORK/serve-$port.out" 2>&1 &
	PIDS+=($!)
	SPID[$name]=$!
	PORT[$name]=$port
	wait_port "$port"
}
MATCH='/concepts/$match/?semantic=true'
for b in before after; do
	# A skip window of 100 ms: the calls cut off at the end of a wrk run
	# must not switch the next run's gating off.
	serve "$b-mem" "$b" --redis-retry 100ms
	serve "$b-redis" "$b" --redis "$REDIS_URL" --redis-retry 100ms
done
SHA=$(redis-cli -p "$RPORT" SCRIPT LOAD "$(cat redis/acquire.lua)")
KEYS5="ocl:capacity:api_heavy ocl:capacity:api_heavy_task:bench ocl:capacity:es2_knn ocl:capacity:tier:core ocl:capacity:user:rb"

# cpu_ticks prints the user + system CPU ticks process $1 has used.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
TICK_US=$((1000000 / $(getconf CLK_TCK)))

# measure appends "<round> <build> <target> <rps> <p50_us> <cpu_us_per_request>"
# to results: the CPU is the serving process's own (from /proc), so the
# other processes on the machine don't count in it.
measure() { # round build target conns store path
	local out threads=1 pid=${SPID[$2-$5]} t0 t1
	(($4 > 1)) && threads=2
	t0=$(cpu_ticks "$pid")
	out=$(wrk -t "$threads" -c "$4" -d "${WRK_SECONDS}s" -s "$WORK/post.lua" "http://127.0.0.1:${PORT[$2-$5]}" -- "$6" | tail -1 |
		sed -E 's/.*"rps":([0-9.]+),"p50_us":([0-9]+).*/\1 \2/')
	t1=$(cpu_ticks "$pid")
	echo "$1 $2 $3 $out $(awk -v d=$((t1 - t0)) -v us="$TICK_US" -v rps="${out%% *}" -v s="$WRK_SECONDS" \
		'BEGIN { printf "%.1f", d * us / (rps * s) }')" >>"$WORK/results"
}
for b in before after; do # warm up
	for s in mem redis; do
		wrk -t 1 -c 1 -d 1s -s "$WORK/post.lua" "http://127.0.0.1:${PORT[$b-$s]}" -- "$MATCH" >/dev/null
	done
done
log "load at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq "$ROUNDS"); do
	order="before after"
	((r % 2 == 0)) && order="after before"
	for b in $order; do
		measure "$r" "$b" c1 1 mem /concepts/
		measure "$r" "$b" d1 1 mem "$MATCH"
		measure "$r" "$b" e1 1 redis "$MATCH"
		measure "$r" "$b" c64 64 mem /concepts/
		measure "$r" "$b" d64 64 mem "$MATCH"
	done
	# shellcheck disable=SC2086 # word splitting of the keys is meant
	p50=$(redis-benchmark -h 127.0.0.1 -p "$RPORT" -c 1 -n 8000 -r 64 --csv EVALSHA "$SHA" 5 $KEYS5 __rand_int__ 60000 1 0 \
		1048576 1048576 1048576 1048576 1048576 | tail -1 | tr -d '"' | awk -F, '{printf "%.0f", $5 * 1000}')
	echo "$r both evalsha 0 $p50 0" >>"$WORK/results"
	log "round $r of $ROUNDS done"
done
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)

# The medians: per round, the added p50 (d1 - c1, e1 - c1), the CPU per
# gated call from throughput at saturation (2 cores: 2/rps(d64) - 2/rps(c64)),
# and e1's added p50 over that round's EVALSHA p50.
awk -v cores="$(nproc)" -v load_start="$LOAD_START" -v load_end="$LOAD_END" '
function median(arr, n,   i, j, t) {
	for (i = 2; i <= n; i++) for (j = i; j > 1 && arr[j-1] > arr[j]; j--) { t = arr[j]; arr[j] = arr[j-1]; arr[j-1] = t }
	return n % 2 ? arr[(n+1)/2] : (arr[n/2] + arr[n/2+1]) / 2
}
{ rps[$1, $2, $3] = $4; p50[$1, $2, $3] = $5; cpureq[$1, $2, $3] = $6; if ($1 > rounds) rounds = $1 }
END {
	printf "load average (1, 5, 15 min): %s at the start, %s at the end; %d rounds, medians\n\n", load_start, load_end, rounds
	printf "| build | c1 p50 µs | d1 p50 µs | e1 p50 µs | d1 − c1 µs | e1 − c1 µs | EVALSHA p50 µs | (e1 − c1) ÷ EVALSHA | c64 req/s | d64 req/s | CPU per gated call µs, from throughput | CPU per request c64 / d64 µs, own | CPU per gated call µs, own |\n"
	printf "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
	split("before after", builds, " ")
	for (k = 1; k <= 2; k++) {
		b = builds[k]
		for (r = 1; r <= rounds; r++) {
			c1[r] = p50[r, b, "c1"]; d1[r] = p50[r, b, "d1"]; e1[r] = p50[r, b, "e1"]
			dd[r] = d1[r] - c1[r]; ee[r] = e1[r] - c1[r]; ev[r] = p50[r, "both", "evalsha"]
			ratio[r] = ev[r] > 0 ? ee[r] / ev[r] : 0
			c64[r] = rps[r, b, "c64"]; d64[r] = rps[r, b, "d64"]
			cpu[r] = cores * 1e6 * (1 / d64[r] - 1 / c64[r])
			oc[r] = cpureq[r, b, "c64"]; od[r] = cpureq[r, b, "d64"]; own[r] = od[r] - oc[r]
		}
		printf "| %s | %d | %d | %d | %d | %d | %d | %.2f× | %d | %d | %.1f | %.1f / %.1f | %.1f |\n", b,
			median(c1, rounds), median(d1, rounds), median(e1, rounds), median(dd, rounds), median(ee, rounds),
			median(ev, rounds), median(ratio, rounds), median(c64, rounds), median(d64, rounds), median(cpu, rounds),
			median(oc, rounds), median(od, rounds), median(own, rounds)
	}
}' "$WORK/results"
echo
echo "raw (round build target req/s p50_µs cpu_µs_per_request):"
sort -k1,1n -k2,2 "$WORK/results"
