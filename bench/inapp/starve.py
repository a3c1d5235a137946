"""The starvation attack's load (bench/inapp-starve.sh): HOGS callers send
lexical $match calls with a large body of rows (not heavy: nothing gates
them, but DRF's JSON parser holds the worker's GIL while it parses), and
ATTACKERS callers send a paused user's heavy $match, for SECONDS. Prints one
JSON line: the attackers' statuses, how many hog calls were sent, and the
heavy runs of the paused user the view recorded (RECORD) — each one a call
that ran uncounted — and the most of them at once."""
import http.client
import json
import os
import sys
import threading
import time

port, token, record = int(sys.argv[1]), sys.argv[2], sys.argv[3]
seconds = float(os.environ.get("SECONDS_EACH", "15"))
hogs = int(os.environ.get("HOGS", "3"))
attackers = int(os.environ.get("ATTACKERS", "2"))
mb = float(os.environ.get("HOG_MB", "10"))

row = '{"name":"fever","id":12345},'
big = ('{"rows":[' + row * int(mb * (1 << 20) / len(row)) + '{"name":"x"}]}').encode()
heavy = b'{"rows":[{"name":"fever"}]}'
stop = time.monotonic() + seconds
lock = threading.Lock()
statuses, hog_calls = {}, [0]


def post(path, body, hold=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    headers = {"Authorization": "Token " + token, "Content-Type": "application/json"}
    if hold:
        headers["X-Test-Hold-Ms"] = hold
    try:
        c.request("POST", path, body=body, headers=headers)
        r = c.getresponse()
        r.read()
        return r.status
    except OSError:
        return 0
    finally:
        c.close()


def hog():
    while time.monotonic() < stop:
        post("/concepts/$match/", big)
        with lock:
            hog_calls[0] += 1


def attack():
    while time.monotonic() < stop:
        s = post("/concepts/$match/?semantic=true", heavy, hold="300")
        with lock:
            statuses[s] = statuses.get(s, 0) + 1


threads = [threading.Thread(target=hog) for _ in range(hogs)]
threads += [threading.Thread(target=attack) for _ in range(attackers)]
for t in threads:
    t.start()
for t in threads:
    t.join()

runs = {}
with open(record) as f:
    for line in f:
        e = json.loads(line)
        if e["user"] == "pam":
            runs.setdefault(e["run"], {})[e["ev"]] = e["t"]
edges = sorted([(r["start"], 1) for r in runs.values()] + [(r.get("end", r["start"]), -1) for r in runs.values()],
               key=lambda x: (x[0], x[1]))
n = most = 0
for _, d in edges:
    n += d
    most = max(most, n)
print(json.dumps({"statuses": statuses, "hog_calls": hog_calls[0], "pam_runs": len(runs), "pam_at_once": most}))
