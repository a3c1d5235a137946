"""bench/decide-workers.sh's driver: six heavy calls of a limit-1 user at
once, light calls of another user meanwhile."""

import http.client
import json
import sys
import threading
import time

port, creds = int(sys.argv[1]), json.load(open(sys.argv[2]))
HEAVY = "/concepts/$match/?semantic=true"
LIGHT = "/concepts/$match/"  # lexical: not heavy
BODY = json.dumps({"rows": [{"name": "fever"}, {"name": "cough"}]})


def post(path, user, hold_ms=0):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    t0 = time.monotonic()
    c.request("POST", path, body=BODY, headers={
        "Authorization": "Token " + creds["tokens"][user], "Content-Type": "application/json",
        "X-Test-Hold-Ms": str(hold_ms)})
    r = c.getresponse()
    r.read()
    took = time.monotonic() - t0
    c.close()
    return r.status, dict((k.lower(), v) for k, v in r.getheaders()), took


# Warm every worker (each loads Django on its first request).
ws = [threading.Thread(target=post, args=(LIGHT, "cora")) for _ in range(8)]
for w in ws:
    w.start()
for w in ws:
    w.join()

heavy, light, done = [], [], threading.Event()


def heavy_call(i):
    heavy.append((i,) + post(HEAVY, "pam", 1500))


def light_loop():
    while not done.is_set():
        status, _, took = post(LIGHT, "cora")
        light.append((status, took))
        time.sleep(0.05)


lights = [threading.Thread(target=light_loop) for _ in range(2)]
for t in lights:
    t.start()
time.sleep(0.2)
hs = [threading.Thread(target=heavy_call, args=(i,)) for i in range(6)]
for t in hs:
    t.start()
for t in hs:
    t.join()
done.set()
for t in lights:
    t.join()

lat = sorted(t for _, t in light)
p = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))]
print("light calls: %d, statuses %s; p50 %.0f ms, p95 %.0f ms, max %.0f ms" % (
    len(lat), sorted(set(s for s, _ in light)), p(0.5) * 1000, p(0.95) * 1000, lat[-1] * 1000))
print("| heavy | status | Retry-After | Waited-Ms | total |")
print("|---|---|---|---|---|")
for i, status, h, took in sorted(heavy, key=lambda x: x[3]):
    print("| %d | %d | %s | %s | %.2f s |" % (i, status, h.get("retry-after", "-"),
                                            h.get("x-ocl-capacity-waited-ms", "-"), took))
