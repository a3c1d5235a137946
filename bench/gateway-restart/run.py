"""bench/gateway-restart.sh's driver: SIGKILL a gateway holding three
calls, end two of them in the upstream, restart it, and time until the
lane is free."""

import http.client
import http.server
import os
import socket
import subprocess
import sys
import threading
import time

work, binary, db, redis_url = sys.argv[1:5]
runs, gport, uport = int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7])
hold = sys.argv[8] if len(sys.argv) > 8 else ""
LANE = "ocl:capacity:user:cora"


class Redis:
    """Just enough RESP to poll: one connection, no redis-cli start per poll."""

    def __init__(self, url):
        hostport, _, dbn = url[len("redis://"):].partition("/")
        host, _, port = hostport.rpartition(":")
        self.s = socket.create_connection((host, int(port)))
        self.f = self.s.makefile("rb")
        if dbn:
            self.cmd("SELECT", dbn)

    def cmd(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.s.sendall(b"".join(out))
        return self.read()

    def read(self):
        line = self.f.readline()
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.f.read(n + 2)[:-2].decode()
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise RuntimeError("unexpected reply %r" % line)


rdb = Redis(redis_url)


def live():
    """The user's live leases in Redis (members whose expiry is ahead)."""
    return rdb.cmd("EVAL", "local t = redis.call('TIME'); "
                   "return redis.call('ZCOUNT', KEYS[1], t[1]*1000 + math.floor(t[2]/1000), '+inf')", "1", LANE)


def journalled():
    """The calls journalled: the records of the journals (hashes; a group's
    roster of incarnations is a sorted set)."""
    n = 0
    for k in rdb.cmd("KEYS", "capgate:journal:*gateway:gw-a:*") or []:
        if rdb.cmd("TYPE", k) == "hash":
            n += rdb.cmd("HLEN", k)
    return n


# The upstream: each POST runs until the driver ends it, and never notices
# its client gone (a sync worker finishes the view whatever happens to the
# connection).
running = {}  # request id → threading.Event: set to end the call
changed = threading.Condition()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        rid = self.headers.get("X-Request-ID", "")
        ev = threading.Event()
        with changed:
            running[rid] = ev
            changed.notify_all()
        ev.wait()
        with changed:
            del running[rid]
            changed.notify_all()
        body = b'[{"row":0,"results":[]}]'
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            pass  # the gateway is gone: the answer goes nowhere


class Upstream(http.server.ThreadingHTTPServer):
    daemon_threads = True


upstream = Upstream(("127.0.0.1", uport), Handler)
threading.Thread(target=upstream.serve_forever, daemon=True).start()


def start():
    args = [binary, "serve", "--listen", "127.0.0.1:%d" % gport, "--upstream", "http://127.0.0.1:%d" % uport,
            "--database", db, "--redis", redis_url, "--task-id", "gw-a", "--identity", "tokens",
            "--tokens", os.path.join(work, "tokens.json"), "--log-file", os.path.join(work, "lines.log"),
            "--drain-delay", "0"]
    if hold:
        args += ["--restart-hold", hold]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "serve.stderr"), "ab"))


def listening():
    s = socket.socket()
    try:
        s.connect(("127.0.0.1", gport))
        return True
    except OSError:
        return False
    finally:
        s.close()


def wait_for(cond, limit=10.0):
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.005)
    return False


def call(rid, results):
    c = http.client.HTTPConnection("127.0.0.1", gport, timeout=120)
    try:
        c.request("POST", "/concepts/$match/?semantic=true", body='{"rows":[{"name":"fever"}]}',
                  headers={"Authorization": "Token t-cora", "Content-Type": "application/json", "X-Request-ID": rid})
        r = c.getresponse()
        r.read()
        results[rid] = r.status
    except OSError:
        results[rid] = "cut"
    finally:
        c.close()


def ms(ok, t):
    return ("%.0f ms" % (t * 1000)) if ok else "never (30 s)"


print("| run | journalled after the calls began | listening after restart | ended calls' places free (lane empty) after "
      "| lane count at restart (0.5 s after) | the running call, in the upstream then |")
print("|---|---|---|---|---|---|")
svc = start()
for run in range(1, runs + 1):
    assert wait_for(listening), "the gateway never listened"
    rids = ["run%d-%d" % (run, n) for n in (1, 2, 3)]
    results = {}
    threads = [threading.Thread(target=call, args=(rid, results)) for rid in rids]
    began = time.monotonic()
    for t in threads:
        t.start()
    with changed:
        assert changed.wait_for(lambda: all(r in running for r in rids), timeout=10), running
    jok = wait_for(lambda: journalled() == 3, limit=2)
    t_journal = time.monotonic() - began
    assert live() == 3, live()
    svc.kill()
    svc.wait()
    with changed:  # two calls end in the upstream; their answers go nowhere
        running[rids[0]].set()
        running[rids[1]].set()
        assert changed.wait_for(lambda: rids[0] not in running and rids[1] not in running, timeout=10)
    at_restart = live()
    t0 = time.monotonic()
    svc = start()
    assert wait_for(listening)
    t_listen = time.monotonic() - t0
    free = wait_for(lambda: live() == 0, limit=30)
    t_free = time.monotonic() - t0
    still = rids[2] in running
    time.sleep(0.5)
    steady = live()
    print("| %d | %s | %.0f ms | %s | %d (%d) | %s |" % (
        run, ("%.0f ms" % (t_journal * 1000)) if jok else "not journalled", t_listen * 1000, ms(free, t_free),
        at_restart, steady, "still running, uncounted" if still else "ended"))
    sys.stdout.flush()
    with changed:
        running[rids[2]].set()
    for t in threads:
        t.join()
svc.terminate()
svc.wait()
