# bench/lib.sh: the helpers the bench scripts share (run.sh, goodput.sh,
# fleet.sh, beforeafter.sh source it): a work dir and the processes started in it, stopped
# on exit; spare ports; a redis-server of our own; missing tools.
#
# The sourcing script runs under `set -euo pipefail` and calls bench_init
# first. It may define on_exit, which cleanup runs after stopping the
# processes and before removing the work dir.

# bench_init NAME sets WORK (a fresh temp dir, removed on exit unless
# KEEP_WORK is set), PIDS (processes to stop on exit) and GW_PIDS (the
# gateways of the moment, also stopped on exit), and traps exit.
bench_init() {
	WORK=$(mktemp -d "${TMPDIR:-/tmp}/capgate-$1.XXXXXX")
	PIDS=()
	GW_PIDS=()
	trap cleanup EXIT
	trap 'exit 130' INT TERM
}

# stop_pids PID... kills the processes, then waits for each.
stop_pids() {
	local pid
	for pid in "$@"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "$@"; do
		wait "$pid" 2>/dev/null || true
	done
}

cleanup() {
	stop_pids "${GW_PIDS[@]}" "${PIDS[@]}"
	if declare -F on_exit >/dev/null; then
		on_exit
	fi
	if [[ -n "${KEEP_WORK:-}" ]]; then
		echo "work dir kept: $WORK" >&2
	else
		rm -rf "$WORK"
	fi
}

log() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# need_tools CMD:PACKAGE... installs with apt-get the packages of the
# commands that are missing.
need_tools() {
	local spec need=()
	for spec in "$@"; do
		command -v "${spec%%:*}" >/dev/null || need+=("${spec#*:}")
	done
	if ((${#need[@]})); then
		log "installing ${need[*]}"
		DEBIAN_FRONTEND=noninteractive apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
	fi
}

# free_port prints a TCP port nothing listens on, in 20000-31999: below
# the kernel's ephemeral range, so no client socket is handed it.
free_port() {
	local p
	while :; do
		p=$((20000 + RANDOM % 12000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return
		fi
	done
}

# wait_port waits up to 10 s for something to listen on port $1.
wait_port() {
	local i
	for i in $(seq 100); do
		if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then
			return 0
		fi
		sleep 0.1
	done
	echo "$0: nothing listens on port $1" >&2
	return 1
}

# start_redis [ARG...] starts a redis-server of our own (never the
# machine's 6379) on a spare port, without persistence, its files and log
# in WORK, with ARGs added; it sets RPORT and REDIS_URL and waits for it.
start_redis() {
	RPORT=$(free_port)
	redis-server --port "$RPORT" --bind 127.0.0.1 --save '' --appendonly no \
		--dir "$WORK" --logfile "$WORK/redis.log" --daemonize no "$@" &
	PIDS+=($!)
	wait_port "$RPORT"
	REDIS_URL="redis://127.0.0.1:$RPORT/0"
}

# write_wrk_files writes $WORK/tokens.json (64 users, one token each, so the
# user lanes are not one hot lane) and $WORK/post.lua (wrk: every request a
# POST with a JSON body and one of the 64 tokens; prints one JSON line at
# the end).
write_wrk_files() {
	{
		echo "["
		for i in $(seq 64); do
			sep=","
			[[ $i == 64 ]] && sep=""
			echo "{\"token\":\"bench-token-$i\",\"username\":\"user$i\",\"is_staff\":false,\"auth_groups\":[\"core_user\"]}$sep"
		done
		echo "]"
	} >"$WORK/tokens.json"

	cat >"$WORK/post.lua" <<'EOF'
local reqs, i = {}, 0
init = function(args)
  local path = args[1] or "/concepts/"
  local body = '{"rows":[{"id":"1","name":"malaria","concept_class":"Diagnosis"}],' ..
    '"target_repo_url":"/orgs/CIEL/sources/CIEL/","limit":5}'
  for n = 1, 64 do
    reqs[n] = wrk.format("POST", path, {
      ["Content-Type"] = "application/json",
      ["Authorization"] = "Token bench-token-" .. n,
    }, body)
  end
end
request = function()
  i = i % #reqs + 1
  return reqs[i]
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('{"rps":%.1f,"p50_us":%d,"p99_us":%d,"requests":%d,"errors":%d,"non2xx":%d}\n',
    summary.requests / (summary.duration / 1e6), latency:percentile(50), latency:percentile(99),
    summary.requests, e.connect + e.read + e.write + e.timeout, e.status))
end
EOF
}

# nginx_conf DIR WORKERS BODY writes DIR/nginx.conf (making DIR): an nginx
# in the foreground with WORKERS workers, its files in DIR, BODY in http.
nginx_conf() {
	local user=""
	if [[ $EUID == 0 ]]; then
		user="user root;"
	fi
	mkdir -p "$1"
	cat >"$1/nginx.conf" <<EOF
$user
daemon off;
worker_processes $2;
pid $1/nginx.pid;
error_log $1/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $1/body;
    proxy_temp_path $1/proxy;
    fastcgi_temp_path $1/fastcgi;
    uwsgi_temp_path $1/uwsgi;
    scgi_temp_path $1/scgi;
    keepalive_requests 1000000;
    $3
}
EOF
}
