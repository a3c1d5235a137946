# bench/gateway.sh: parts 3 and 5 of bench/run.sh, sourced by it (it uses
# run.sh's WORK, PIDS, ROUNDS, WRK_SECONDS, REDIS_URL, NGINX and helpers).
#
# (a) nginx returning a fixed JSON body, (b) nginx proxy_pass to it with
# keepalive, (c) capgate serve on an ungated path, (d) capgate serve on a
# gated semantic $match with in-process lanes, (e) the same with Redis
# lanes; wrk, 64 connections. Then CPU and allocation profiles of (d) and
# (e) from the in-process gateway benchmarks in http/.
# The targets: see TARGETS below.

log "part 3: gateway vs nginx vs direct"
go build -o "$WORK/capgate" ./cmd/capgate
cmdlog "go build -o \$WORK/capgate ./cmd/capgate"
if ! "$WORK/capgate" serve -h >/dev/null 2>&1; then
	echo "this checkout's capgate has no serve command yet." >"$WORK/gateway-skipped.txt"
	log "no capgate serve: skipping part 3"
	return 0
fi

UPORT=$(free_port)
PPORT=$(free_port)
mkdir -p "$WORK/nginx-up" "$WORK/nginx-proxy"
# The upstream: one worker, like one API process, answering every request
# with the same small JSON body.
nginx_conf "$WORK/nginx-up" 1 "server {
        listen 127.0.0.1:$UPORT;
        location / {
            default_type application/json;
            return 200 '{\"count\":1,\"results\":[{\"id\":\"1\",\"display_name\":\"Malaria\"}]}';
        }
    }"
# The proxy: as many workers as capgate has threads (GOMAXPROCS = nproc).
nginx_conf "$WORK/nginx-proxy" "$(nproc)" "upstream api {
        server 127.0.0.1:$UPORT;
        keepalive 64;
    }
    server {
        listen 127.0.0.1:$PPORT;
        location / {
            proxy_pass http://api;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
        }
    }"
"$NGINX" -p "$WORK/nginx-up" -c "$WORK/nginx-up/nginx.conf" -e "$WORK/nginx-up/error.log" &
PIDS+=($!)
"$NGINX" -p "$WORK/nginx-proxy" -c "$WORK/nginx-proxy/nginx.conf" -e "$WORK/nginx-proxy/error.log" &
PIDS+=($!)
wait_port "$UPORT"
wait_port "$PPORT"
cmdlog "nginx -p \$WORK/nginx-up -c \$WORK/nginx-up/nginx.conf      # 1 worker: return 200 '<fixed JSON>'"
cmdlog "nginx -p \$WORK/nginx-proxy -c \$WORK/nginx-proxy/nginx.conf # $(nproc) workers: proxy_pass, keepalive 64, HTTP/1.1"

write_wrk_files

# serve starts capgate serve on port $1 with extra flags; sets SERVE_PID.
serve() {
	local port=$1
	shift
	"$WORK/capgate" serve --listen "127.0.0.1:$port" --upstream "http://127.0.0.1:$UPORT" \
		--database "sqlite:$WORK/capgate-$port.db" --task-id bench --mode shadow \
		--identity tokens --tokens "$WORK/tokens.json" --log-file "$WORK/capgate-$port.log" \
		"$@" >"$WORK/serve-$port.out" 2>&1 &
	SERVE_PID=$!
	PIDS+=("$SERVE_PID")
	wait_port "$port"
}
# The memory gateway gets a skip window of 100 ms too: the gate counts an
# acquire whose client went away (the calls in flight when a wrk run ends)
# as a store failure, and skips even the in-process store after it.
MPORT=$(free_port)
serve "$MPORT" --redis-retry 100ms
MEM_PID=$SERVE_PID
RPORT2=$(free_port)
serve "$RPORT2" --redis "$REDIS_URL"
E_PID=$SERVE_PID
# (e) runs as capgate serve does by default. e32, e1 get a gateway of their
# own, outside (e)'s skip window, with a skip window of 100 ms: at the end
# of each wrk run the calls in flight are cut off, and the gate counts an
# acquire whose client went away as a store failure, which would skip Redis
# for the next 15 s (the next round).
RPORT3=$(free_port)
serve "$RPORT3" --redis "$REDIS_URL" --redis-retry 100ms
cmdlog "\$WORK/capgate serve --listen 127.0.0.1:\$PORT --upstream http://127.0.0.1:\$UPORT --database sqlite:\$WORK/capgate.db --task-id bench --mode shadow --identity tokens --tokens \$WORK/tokens.json --log-file \$WORK/capgate.log [--redis redis://127.0.0.1:\$RPORT/0]"
cmdlog "# c, d, c32, c1, d1: --redis-retry 100ms (no --redis); e: --redis redis://127.0.0.1:\$RPORT/0; e32, e1: --redis redis://127.0.0.1:\$RPORT/0 --redis-retry 100ms"

# g, gp: Go's httputil.ReverseProxy alone with capgate's upstream transport,
# without and with a pool of copy buffers: what Go costs before capgate.
go build -o "$WORK/goproxy" ./bench/goproxy
GPORT=$(free_port)
GPPORT=$(free_port)
"$WORK/goproxy" -listen "127.0.0.1:$GPORT" -upstream "http://127.0.0.1:$UPORT" &
PIDS+=($!)
"$WORK/goproxy" -listen "127.0.0.1:$GPPORT" -upstream "http://127.0.0.1:$UPORT" -pool &
PIDS+=($!)
wait_port "$GPORT"
wait_port "$GPPORT"
cmdlog "\$WORK/goproxy -listen 127.0.0.1:\$PORT -upstream http://127.0.0.1:\$UPORT [-pool]"

MATCH='/concepts/$match/?semantic=true'
declare -A URL=(
	[a]="http://127.0.0.1:$UPORT"
	[b]="http://127.0.0.1:$PPORT"
	[g]="http://127.0.0.1:$GPORT"
	[gp]="http://127.0.0.1:$GPPORT"
	[c]="http://127.0.0.1:$MPORT"
	[d]="http://127.0.0.1:$MPORT"
	[e]="http://127.0.0.1:$RPORT2"
)
URL[c32]=${URL[c]}
URL[e32]="http://127.0.0.1:$RPORT3"
URL[c1]=${URL[c]}
URL[d1]=${URL[d]}
URL[e1]=${URL[e32]}
declare -A WPATH=([a]=/concepts/ [b]=/concepts/ [c]=/concepts/ [d]="$MATCH" [e]="$MATCH" [c32]=/concepts/ [e32]="$MATCH"
	[c1]=/concepts/ [d1]="$MATCH" [e1]="$MATCH" [g]=/concepts/ [gp]=/concepts/)
# (e) at 64 connections needs more store operations at once than the Redis
# store's default bounds allow (32 in flight + 8 queued): its busy answers
# open the skip window and the calls go ahead unavailable. c32 and e32
# measure (c) and (e) at 32 connections, where the bounds suffice. At 64
# connections every server here is saturated (2 cores shared with wrk), so
# its latency is mostly queueing; c1, d1 and e1 measure (c), (d) and (e)
# with one connection, where latency is the cost of one call.
declare -A CONNS=([a]=64 [b]=64 [g]=64 [gp]=64 [c]=64 [d]=64 [e]=64 [c32]=32 [e32]=32 [c1]=1 [d1]=1 [e1]=1)
TARGETS=(a b g gp c d e c32 e32 c1 d1 e1)

# Check that (d) and (e) are gated and not refused before measuring.
for t in d e e32; do
	hdr=$(curl -s -o /dev/null -D - -X POST -H 'Content-Type: application/json' -H 'Authorization: Token bench-token-1' \
		--data '{"rows":[{"id":"1","name":"malaria"}]}' "${URL[$t]}${WPATH[$t]}" | tr -d '\r')
	if ! grep -qi '^X-OCL-Capacity-Decision: admitted' <<<"$hdr"; then
		echo "bench/run.sh: ($t) is not gated as expected:" >&2
		echo "$hdr" >&2
		exit 1
	fi
done

threads() { if ((CONNS[$1] < 2)); then echo 1; else echo 2; fi; }
for t in "${TARGETS[@]}"; do # warm up: connections, caches
	wrk -t "$(threads "$t")" -c "${CONNS[$t]}" -d 1s -s "$WORK/post.lua" "${URL[$t]}" -- "${WPATH[$t]}" >/dev/null
done
for r in $(seq "$ROUNDS"); do
	for t in "${TARGETS[@]}"; do
		if ! out=$(wrk -t "$(threads "$t")" -c "${CONNS[$t]}" -d "${WRK_SECONDS}s" -s "$WORK/post.lua" "${URL[$t]}" -- "${WPATH[$t]}"); then
			echo "bench/run.sh: wrk failed on ($t) ${URL[$t]}; the servers' last words:" >&2
			tail -n 5 "$WORK"/serve-*.out "$WORK"/nginx-*/error.log >&2 || true
			exit 1
		fi
		out=$(grep '^{"rps"' <<<"$out")
		result wrk "$r" "${CONNS[$t]}" "$t" "$out"
	done
done
cmdlog "wrk -t {2,2,1} -c {64,32,1} -d ${WRK_SECONDS}s -s \$WORK/post.lua http://127.0.0.1:\$PORT -- {/concepts/ | '$MATCH'}   # ${TARGETS[*]}, $ROUNDS rounds"

# The decisions the gateways logged (warm-ups included; (d)'s gateway also
# served c and c32, which log nothing).
for t in d e e32; do
	port=${URL[$t]##*:}
	counts=$({ grep -o '"decision":"[a-z-]*"' "$WORK/capgate-$port.log" || true; } | sort | uniq -c |
		awk '{gsub(/"decision":/, "", $2); gsub(/"/, "", $2); printf "%s%s: %s", sep, $2, $1; sep=", "}')
	errs=$({ grep -o '"error":"[^"]*"' "$WORK/capgate-$port.log" || true; } | sort | uniq -c | sort -rn | head -3 |
		awk '{c=$1; $1=""; gsub(/"/, "", $0); printf "%s%s ×%s", sep, substr($0, 2), c; sep="; "}')
	result decisions 0 0 "$t" "{\"decisions\":\"$counts\",\"errors\":\"$errs\"}"
done

kill "$MEM_PID" "$E_PID" "$SERVE_PID" 2>/dev/null || true

# --- part 5: profiles of (d) and (e), in process ----------------------------------
log "part 5: profiles"
for t in d e; do
	bench=BenchmarkGatewayGatedMemory
	[[ $t == e ]] && bench=BenchmarkGatewayGatedRedis
	CAPGATE_TEST_REDIS_URL="$REDIS_URL" go test -run '^$' -bench "^$bench\$" -benchtime 3s \
		-cpuprofile "$WORK/cpu-$t.out" -memprofile "$WORK/mem-$t.out" -o "$WORK/http.test" ./http >"$WORK/gobench-gateway-$t.txt"
	{
		grep '^Benchmark' "$WORK/gobench-gateway-$t.txt"
		echo
		echo "CPU, top 25 by cumulative time, capgate frames only: library frames are folded into their nearest"
		echo "capgate caller (Middleware.ServeHTTP's flat time is mostly net/http and httputil.ReverseProxy;"
		echo "redis Store.Acquire.func1's and Release.func1's are go-redis and the socket):"
		go tool pprof -top -cum -nodecount 25 -focus 'capgate/capgate' -show 'capgate/capgate' "$WORK/http.test" "$WORK/cpu-$t.out" 2>/dev/null | sed -n '/flat%/,$p'
		echo
		echo "Allocations (objects), top 15 by flat, capgate frames only (folded the same way):"
		go tool pprof -sample_index=alloc_objects -top -nodecount 15 -show 'capgate/capgate' "$WORK/http.test" "$WORK/mem-$t.out" 2>/dev/null | sed -n '/flat%/,$p'
	} >"$WORK/profile-$t.txt"
done
cmdlog "CAPGATE_TEST_REDIS_URL=redis://127.0.0.1:\$RPORT/0 go test -run '^\$' -bench '^BenchmarkGatewayGated(Memory|Redis)\$' -benchtime 3s -cpuprofile cpu.out -memprofile mem.out ./http"
cmdlog "go tool pprof -top -cum -focus capgate/capgate -show capgate/capgate http.test cpu.out; go tool pprof -sample_index=alloc_objects -top -show capgate/capgate http.test mem.out"
