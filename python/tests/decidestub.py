"""A small decision service for the package's unit tests, run in a process
of its own (so that a test process starved of the GIL does not starve it):
the protocol of docs/PROTOCOL.md on a unix socket, with per-user limits and
the connection as the lease, and a count of what it holds.

    python3 decidestub.py SOCKET

Besides ``POST /v1/calls`` it answers ``PUT /limits`` (a JSON object, user
→ limit; a user not named is unlimited; ``{"*": n}`` sets the default;
``{"_wait": s}`` makes a call over its limit wait up to s seconds for a
place, announced with ``Capgate-Wait-Seconds``; ``{"_routes": [names]}``
answers 400 to a call naming another route, as a policy without it would,
while a ``conservative`` call is always decided; ``{"_status": n}`` answers
every call with status n and no decision; ``{"_prefix": "Capgate-"}``
names the capacity headers; ``{"_running": [keys]}`` answers a call whose
repeat_key is one of keys ``joined``, ended ``finished`` after 0.2 s) and
``GET /stats`` (``{"held": {user: n}, "max": {user: n}, "calls": [call,
…], "releases": [{"id": id, "body": body}, …]}``: what it holds now, the
most it held at once, every call it was asked, every ``POST
/v1/calls/{id}/release`` it got, its JSON body or null; a release answers
204 and ends nothing: the client closes the call's connection). It is no capgate: the real service is tested from Go (test/decide).
"""

import json
import os
import socket
import sys
import threading
import time
import uuid

lock = threading.Condition()
limits = {}
held = {}
most = {}
calls = []
releases = []


def read_request(c):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = c.recv(65536)
        if not chunk:
            return None, None, None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    method, path, _ = lines[0].decode().split(" ", 2)
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = c.recv(65536)
        if not chunk:
            return None, None, None
        body += chunk
    return method, path, body


def answer(c, obj, status="200 OK"):
    body = json.dumps(obj).encode() + b"\n"
    c.sendall(b"HTTP/1.1 " + status.encode() + b"\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))


def decide(c, call):
    user = call.get("user", "")
    with lock:
        calls.append(call)
        limit = limits.get(user, limits.get("*"))
        wait = float(limits.get("_wait", 0))
        admitted = limit is None or held.get(user, 0) < limit
        routes = limits.get("_routes")
        status = limits.get("_status")
        prefix = limits.get("_prefix", "X-Ocl-Capacity-")
        running = limits.get("_running") or []
    if status:
        answer(c, {"detail": "the stub answers %d" % status}, "%d Stub" % status)
        return
    if routes is not None and not call.get("conservative") and call.get("route") not in routes:
        answer(c, {"detail": '"route" %r: want %s' % (call.get("route"), routes)}, "400 Bad Request")
        return
    if call.get("repeat_key") in running and not call.get("conservative"):
        line = {"id": uuid.uuid4().hex, "decision": "joined", "held": False, "dedup_of": "first-call",
                "headers": {"X-Request-Id": call.get("request_id") or "made-up"}, "max_hold_seconds": 900}
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nConnection: close\r\n\r\n")
        c.sendall(json.dumps(line).encode() + b"\n\n")
        time.sleep(0.2)
        c.sendall(b'{"released":"finished"}\n')
        return
    announced = False
    if not admitted and wait > 0 and limit:
        # Wait for a place: the headers first, so the client allows the wait.
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nConnection: close\r\n"
                  b"Capgate-Wait-Seconds: %d\r\n\r\n" % int(wait))
        announced = True
        with lock:
            admitted = lock.wait_for(lambda: held.get(user, 0) < limit, timeout=wait)
    with lock:
        if admitted:
            n = held.get(user, 0) + 1
            held[user] = n
            most[user] = max(most.get(user, 0), n)
    cid = uuid.uuid4().hex
    if not admitted:
        line = {"id": cid, "decision": "refused", "held": False, "status": 429,
                "headers": {"Retry-After": "5", prefix + "Decision": "refused"},
                "body": {"detail": "Matching is busy. Please retry in 5 seconds.",
                         "error_code": "capacity_exceeded", "scope": "user", "paused": limit == 0}}
        if announced:
            c.sendall(json.dumps(line).encode() + b"\n")
        else:
            answer(c, line)
        return
    line = {"id": cid, "decision": "admitted", "held": True,
            "headers": {prefix + "Decision": "admitted", "X-Request-Id": call.get("request_id") or cid}}
    # Streamed, close-delimited: the answer stays open while the call runs.
    if not announced:
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nConnection: close\r\n\r\n")
    c.sendall(json.dumps(line).encode() + b"\n")
    try:
        while c.recv(4096):
            pass  # bytes after the call: keep watching the connection
    except OSError:
        pass
    finally:
        with lock:
            held[user] -= 1
            lock.notify_all()


def serve(c):
    try:
        method, path, body = read_request(c)
        if method is None:
            return
        if method == "POST" and path == "/v1/calls":
            decide(c, json.loads(body))
        elif method == "POST" and path.startswith("/v1/calls/") and path.endswith("/release"):
            with lock:
                releases.append({"id": path[len("/v1/calls/"):-len("/release")],
                                 "body": json.loads(body) if body.strip() else None})
            c.sendall(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
        elif method == "PUT" and path == "/limits":
            new = json.loads(body)
            with lock:
                limits.clear()
                limits.update(new)
            answer(c, {"ok": True})
        elif method == "GET" and path == "/stats":
            with lock:
                answer(c, {"held": dict(held), "max": dict(most), "calls": list(calls), "releases": list(releases)})
        elif method == "DELETE" and path == "/stats":
            with lock:
                most.clear()
                del calls[:]
                del releases[:]
            answer(c, {"ok": True})
        else:
            answer(c, {"detail": "not found"}, "404 Not Found")
    finally:
        c.close()


def main(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if os.path.exists(path):
        os.unlink(path)
    s.bind(path)
    s.listen(128)
    print("ready", flush=True)
    while True:
        c, _ = s.accept()
        threading.Thread(target=serve, args=(c,), daemon=True).start()


if __name__ == "__main__":
    main(sys.argv[1])
