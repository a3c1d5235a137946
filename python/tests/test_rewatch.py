"""capgate.Client re-registers a held call whose connection dropped while
its block runs (docs/PROTOCOL.md, "A call that already runs"), against a
stand-in service (standard library only)."""

import json
import os
import queue
import socket
import sys
import tempfile
import threading
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import capgate  # noqa: E402


def read_body(c):
    """Reads one request from c and returns its JSON body."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = c.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        body += c.recv(65536)
    return json.loads(body)


def held_answer(rid):
    line = json.dumps({"id": "x", "decision": "admitted", "held": True,
                       "headers": {"X-Request-Id": rid}}).encode() + b"\n"
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n"
            b"Connection: close\r\n\r\n" + (b"%x\r\n" % len(line)) + line + b"\r\n")


class Service:
    """Answers each call held; hands each accepted connection and its body
    to the test."""

    def __init__(self):
        self.dir = tempfile.mkdtemp()
        self.path = os.path.join(self.dir, "d.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(16)
        self.calls = queue.Queue()
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            body = read_body(c)
            c.sendall(held_answer("rid-made-up"))
            self.calls.put((c, body))

    def close(self):
        self.sock.close()
        os.unlink(self.path)
        os.rmdir(self.dir)


class RewatchTest(unittest.TestCase):
    def test_dropped_connection_is_reregistered(self):
        svc = Service()
        self.addCleanup(svc.close)
        client = capgate.Client("unix:" + svc.path, timeout=2)
        with client.call(user="cora", tier="core", endpoint="$match", rows=1) as d:
            self.assertTrue(d.held)
            first, body = svc.calls.get(timeout=5)
            self.assertNotIn("running", body)
            first.close()  # the service dies: the connection ends under the running call
            again, body = svc.calls.get(timeout=5)
            self.assertIs(body.get("running"), True)
            # The first decision's id: one call, one correlation id.
            self.assertEqual(body.get("request_id"), "rid-made-up")
        # The block ended: the client closes the new connection.
        again.settimeout(5)
        rest = b""
        while True:
            chunk = again.recv(4096)
            if not chunk:
                break
            rest += chunk
        again.close()
        self.assertEqual(rest, b"")
        # And sends no more calls.
        with self.assertRaises(queue.Empty):
            svc.calls.get(timeout=0.6)

    def test_released_call_is_not_reregistered(self):
        svc = Service()
        self.addCleanup(svc.close)
        client = capgate.Client("unix:" + svc.path, timeout=2)
        with client.call(user="cora", tier="core", endpoint="$match", rows=1) as d:
            self.assertTrue(d.held)
            first, _ = svc.calls.get(timeout=5)
            end = b'{"released":"max_hold"}\n'
            first.sendall((b"%x\r\n" % len(end)) + end + b"\r\n0\r\n\r\n")
            first.close()
            with self.assertRaises(queue.Empty):
                svc.calls.get(timeout=0.8)


if __name__ == "__main__":
    unittest.main()
