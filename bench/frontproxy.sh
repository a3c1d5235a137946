#!/usr/bin/env bash
# bench/frontproxy.sh: what routing only the heavy calls through capgate
# saves the light ones (docs/BENCHMARKS.md, "Routing only heavy calls
# through the gateway").
#
# Side by side, in one run, interleaved over ROUNDS rounds (medians):
#   straight  nginx → the API, for every call
#   through   nginx → capgate serve → the API, for every call
#   routed    nginx with `capgate policy routes --format nginx`: heavy
#             routes → capgate → the API, the rest → the API
# The API is nginx returning a fixed JSON body (1 worker); each front nginx
# has 1 worker; capgate runs on in-process lanes, tokens identity, shadow.
# Measured with wrk: a light GET at 32 connections (throughput, p50) and at
# 1 connection (p50); a heavy call (a semantic $match, gated: admitted) at 1
# connection through `routed` against the same call through `straight`
# (ungated): the gated call's added latency.
# Goals: light calls through `routed` within 5 % of `straight`; the gated
# call's added p50 at one connection ≤ 0.2 ms.
#
# Usage: bench/frontproxy.sh [ROUNDS] [SECONDS]   (default 5 rounds of 8 s, ~6 minutes)
# Needs Go; installs nginx and wrk with apt-get if missing. Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
ROUNDS=${1:-5}
SECS=${2:-8}

bench_init frontproxy
need_tools nginx:nginx wrk:wrk
log "building capgate"
go build -o "$WORK/capgate" ./cmd/capgate

start_nginx() {
	nginx -p "$1" -c "$1/nginx.conf" -e "$1/error.log" &
	PIDS+=($!)
}

API=$(free_port)
GW=$(free_port)
STRAIGHT=$(free_port)
THROUGH=$(free_port)
ROUTED=$(free_port)

nginx_conf "$WORK/api" 1 "server {
        listen 127.0.0.1:$API;
        location / {
            default_type application/json;
            return 200 '{\"count\":1,\"results\":[{\"id\":\"1\",\"display_name\":\"Malaria\"}]}';
        }
    }"
# proxy_to NAME PORT TARGET: a front nginx sending every call to TARGET,
# set up as the generated routing's server is (headers, buffering,
# keepalive), so the two differ only in the routing.
proxy_to() {
	nginx_conf "$WORK/$1" 1 "upstream to { server $3; keepalive 32; }
    server {
        listen 127.0.0.1:$2;
        client_max_body_size 0;
        location / {
            proxy_pass http://to;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
            proxy_set_header Host \$host;
            proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
            proxy_set_header X-Forwarded-Proto \$scheme;
            proxy_read_timeout 900s;
            proxy_buffering off;
        }
    }"
}
proxy_to straight "$STRAIGHT" "127.0.0.1:$API"
proxy_to through "$THROUGH" "127.0.0.1:$GW"
"$WORK/capgate" policy routes --format nginx --listen "127.0.0.1:$ROUTED" --capgate "127.0.0.1:$GW" \
	--api "127.0.0.1:$API" >"$WORK/capgate-routes.conf"
nginx_conf "$WORK/routed" 1 "include $WORK/capgate-routes.conf;"

echo '[{"token":"bench-token","username":"bench","is_staff":false,"auth_groups":["core_user"]}]' >"$WORK/tokens.json"
for d in api straight through routed; do
	start_nginx "$WORK/$d"
done
"$WORK/capgate" serve --listen "127.0.0.1:$GW" --upstream "http://127.0.0.1:$API" --identity tokens \
	--tokens "$WORK/tokens.json" --database "sqlite:$WORK/capgate.db" --log-file /dev/null --drain-delay 0 \
	>"$WORK/capgate.out" 2>&1 &
PIDS+=($!)
for p in "$API" "$GW" "$STRAIGHT" "$THROUGH" "$ROUTED"; do
	wait_port "$p"
done

# wrk's script: a GET, or with the argument "heavy" a gated POST; at the
# end one line: requests/s, p50 µs, errors, non-2xx.
cat >"$WORK/report.lua" <<'EOF'
init = function(args)
  if args[1] == "heavy" then
    wrk.method = "POST"
    wrk.body = '{"rows":[{"id":"1","name":"malaria"}]}'
    wrk.headers["Content-Type"] = "application/json"
    wrk.headers["Authorization"] = "Token bench-token"
  end
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('%.1f %d %d %d\n', summary.requests / (summary.duration / 1e6),
    latency:percentile(50), e.connect + e.read + e.write + e.timeout, e.status))
end
EOF
# A heavy call through `routed` must be gated, through `straight` not.
gated=$(curl -s -o /dev/null -D - -X POST "http://127.0.0.1:$ROUTED/concepts/\$match/?semantic=true" \
	-H 'Authorization: Token bench-token' -d '{"rows":[{"name":"x"}]}' | grep -ci '^x-ocl-capacity-decision: admitted' || true)
straight=$(curl -s -o /dev/null -D - -X POST "http://127.0.0.1:$STRAIGHT/concepts/\$match/?semantic=true" \
	-H 'Authorization: Token bench-token' -d '{"rows":[{"name":"x"}]}' | grep -ci '^x-ocl-capacity-decision' || true)
if [[ $gated != 1 || $straight != 0 ]]; then
	echo "$0: the heavy call is not gated through routed ($gated) or is through straight ($straight)" >&2
	exit 1
fi

LIGHT="/concepts/?q=malaria"
HEAVY="/concepts/\$match/?semantic=true"
# run NAME PORT CONNS PATH [heavy] appends "rps p50_us errors non2xx" to $WORK/NAME.
run() {
	wrk -t1 -c"$3" -d"${SECS}s" -s "$WORK/report.lua" "http://127.0.0.1:$2$4" ${5:+-- "$5"} | tail -1 >>"$WORK/$1"
}
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
log "load average before: $LOAD_BEFORE"
for r in $(seq "$ROUNDS"); do
	log "round $r of $ROUNDS"
	for s in straight:$STRAIGHT through:$THROUGH routed:$ROUTED; do
		run "light32-${s%%:*}" "${s#*:}" 32 "$LIGHT"
		run "light1-${s%%:*}" "${s#*:}" 1 "$LIGHT"
	done
	run heavy1-straight "$STRAIGHT" 1 "$HEAVY" heavy
	run heavy1-routed "$ROUTED" 1 "$HEAVY" heavy
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# med FILE COLUMN: the median of a column (1 rps, 2 p50 µs).
med() { cut -d' ' -f"$2" "$WORK/$1" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
range() { cut -d' ' -f"$2" "$WORK/$1" | sort -n | awk 'NR==1{lo=$1} {hi=$1} END {printf "%s–%s", lo, hi}'; }
errs() { awk '{e+=$3; n+=$4} END {print e+n}' "$WORK/$1"; }

base_rps=$(med light32-straight 1)
base_p1=$(med light1-straight 2)
echo
echo "Light call ($LIGHT, GET), $ROUNDS rounds of ${SECS} s, medians (range):"
echo
echo "| path | rps at 32 conns | vs straight | p50 at 32 (µs) | p50 at 1 conn (µs) | vs straight | errors + non-2xx |"
echo "|---|---|---|---|---|---|---|"
for s in straight through routed; do
	rps=$(med "light32-$s" 1)
	p1=$(med "light1-$s" 2)
	printf '| %s | %s (%s) | %.3f× | %s | %s (%s) | %+.1f %% | %s |\n' "$s" "$rps" "$(range "light32-$s" 1)" \
		"$(echo "$rps / $base_rps" | bc -l)" "$(med "light32-$s" 2)" "$p1" "$(range "light1-$s" 2)" \
		"$(echo "($p1 - $base_p1) * 100 / $base_p1" | bc -l)" "$(($(errs "light32-$s") + $(errs "light1-$s")))"
done
hs=$(med heavy1-straight 2)
hr=$(med heavy1-routed 2)
echo
echo "Heavy call ($HEAVY, POST, one row) at 1 connection, p50 µs: straight (ungated) $hs ($(range heavy1-straight 2)),"
echo "routed (through capgate, gated: admitted) $hr ($(range heavy1-routed 2)): added $((hr - hs)) µs."
echo "errors + non-2xx: straight $(errs heavy1-straight), routed $(errs heavy1-routed)."
echo
echo "Load average before: $LOAD_BEFORE, after: $LOAD_AFTER; $(nproc) CPUs; $(nginx -v 2>&1); $(wrk -v 2>&1 | head -1); $(go version)."
