"""bench/decide-restart.sh's driver: SIGKILL a decision service holding
three calls, end two, restart it, and time until the lane is right."""

import os
import signal
import subprocess
import sys
import threading
import time

import capgate

work, binary, db, redis_url, runs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
sock = os.path.join(work, "decide.sock")
LANE = "ocl:capacity:user:cora"


def start():
    return subprocess.Popen(
        [binary, "decide", "--listen", "unix:" + sock, "--database", db, "--redis", redis_url,
         "--task-id", "host-a", "--log-file", os.path.join(work, "lines.log")],
        stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "decide.stderr"), "ab"))


def listening():
    import socket
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(sock)
        return True
    except OSError:
        return False
    finally:
        s.close()


def live():
    """The user's live leases in Redis (members whose expiry is ahead)."""
    out = subprocess.run(["redis-cli", "-u", redis_url, "EVAL",
                          "local t = redis.call('TIME'); return redis.call('ZCOUNT', KEYS[1], t[1]*1000 + math.floor(t[2]/1000), '+inf')",
                          "1", LANE], capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


def wait_for(cond, limit=10.0):
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.005)
    return False


client = capgate.Client("unix:" + sock, timeout=1.0)
print("| run | listening after restart | running call counted again after | lane right (ended calls freed) after | lane count at restart |")
print("|---|---|---|---|---|")
svc = start()
for run in range(1, runs + 1):
    assert wait_for(listening), "decide never listened"
    end_two, end_last = threading.Event(), threading.Event()
    held = threading.Barrier(4)

    def hold(n, until):
        with client.call(user="cora", tier="core", endpoint="$match", semantic=True, rows=1,
                         request_id="run%d-%d" % (run, n)) as d:
            assert d.held, d
            held.wait()
            until.wait()

    threads = [threading.Thread(target=hold, args=(n, ev)) for n, ev in ((1, end_two), (2, end_two), (3, end_last))]
    for t in threads:
        t.start()
    held.wait()
    assert live() == 3, live()
    svc.send_signal(signal.SIGKILL)
    svc.wait()
    end_two.set()  # two calls end while the service is down
    threads[0].join()
    threads[1].join()
    at_restart = live()
    t0 = time.monotonic()
    svc = start()
    assert wait_for(listening)
    t_listen = time.monotonic() - t0
    # The predecessor's three leases stay for decide.DefaultRecoverDelay
    # (1 s): the re-registered call makes them four, then their release one.
    again = wait_for(lambda: live() >= 4, limit=30)
    t_again = time.monotonic() - t0
    ok = wait_for(lambda: live() == 1, limit=30)
    t_right = time.monotonic() - t0
    # It stays right: the running call is counted, the ended ones are not.
    time.sleep(0.5)
    steady = live()
    print("| %d | %.0f ms | %s | %s | %d (then %d) |" % (
        run, t_listen * 1000, ("%.0f ms" % (t_again * 1000)) if again else "never (30 s)",
        ("%.0f ms" % (t_right * 1000)) if ok else "never (30 s)", at_restart, steady))
    end_last.set()
    threads[2].join()
    assert wait_for(lambda: live() == 0), "the last call's place was not freed"
svc.send_signal(signal.SIGTERM)
svc.wait()
