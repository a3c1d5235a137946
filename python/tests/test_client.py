"""capgate.Client against stand-ins for a broken or slow decision service
(standard library only; run with the rest: cd python && python3 -m pytest).
The real service is exercised by the Go suite in test/decide."""

import json
import logging
import os
import socket
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import capgate  # noqa: E402


def read_request(c):
    """Reads one whole request from c (headers, then Content-Length bytes):
    http.client may send the body in a write of its own, and answering
    before it arrived would make the client's send fail (EPIPE)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = c.recv(65536)
        if not chunk:
            return
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = c.recv(65536)
        if not chunk:
            return
        body += chunk
    return body


class Stub:
    """A unix-socket server that records each call's JSON body (bodies) and
    answers the first connection with reply, the others with then (default
    reply): bytes, or None to say nothing and hold the connection."""

    def __init__(self, reply, then=None):
        self.dir = tempfile.mkdtemp()
        self.path = os.path.join(self.dir, "d.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(16)
        self.replies = [reply, then if then is not None else reply]
        self.bodies = []
        self.conns = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        self.sock.settimeout(0.05)
        while not self.stop.is_set():
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            self.conns.append(c)
            body = read_request(c)
            try:
                self.bodies.append(json.loads(body) if body else None)
            except ValueError:
                self.bodies.append(body)
            reply = self.replies[min(len(self.bodies) - 1, 1)]
            if reply is not None:
                c.sendall(reply)
                c.close()

    def close(self):
        self.stop.set()
        self.thread.join()
        for c in self.conns:
            c.close()
        self.sock.close()
        os.unlink(self.path)
        os.rmdir(self.dir)


CALL = dict(user="cora", groups=["core_user"], endpoint="$match", semantic=True, rows=1)

OFF = b'{"id":"x","decision":"off","held":false,"headers":{}}\n'


class ClientTest(unittest.TestCase):
    def ask(self, url, timeout=0.1):
        c = capgate.Client(url, timeout=timeout)
        start = time.monotonic()
        with c.call(**CALL) as d:
            took = time.monotonic() - start
        return d, took

    def test_unreachable_fails_open_at_once(self):
        d, took = self.ask("unix:/nonexistent/capgate.sock")
        self.assertTrue(d.failed_open)
        self.assertFalse(d.refused)
        self.assertEqual(d.decision, "failed-open")
        self.assertLess(took, 0.25)

    def test_answers_that_are_no_decision_fail_open(self):
        # The service (or a proxy before it) answered, but with no
        # decision: a failing limiter never refuses the call (it used to
        # be refused with 503: issue 40). It runs uncounted, with a reason.
        for reply, reason in (
            (b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 2\r\n\r\nno", "status"),
            (b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 2\r\n\r\nno", "status"),
            (b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 2\r\n\r\nno", "status"),
            (b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nnot json\n", "not_a_decision"),
            (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n{\"a\":", "not_a_decision"),
            (b"HTTP/1.1 200 OK\r\nContent-Length: 21\r\n\r\n{\"decision\":\"maybe\"}\n", "not_a_decision"),
            (b"HTTP/1.1 200 OK\r\nContent-Length: 3001\r\n\r\n" + b"[" * 3000 + b"\n", "not_a_decision"),
            (b"HTTP/1.1 200 OK\r\nContent-Length: 45\r\n\r\n" + b'{"decision":"refused","status":429,"body":1}\n', "not_a_decision"),
            (b"garbage\r\n\r\n", "not_a_decision"),
        ):
            s = Stub(reply)
            try:
                d, _ = self.ask("unix:" + s.path)
                self.assertTrue(d.failed_open, reply)
                self.assertFalse(d.refused, reply)
                self.assertEqual((d.decision, d.reason), ("failed-open", reason), reply)
            finally:
                s.close()

    def test_a_service_that_hangs_up_before_answering_fails_open(self):
        for reply in (b"", b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n\r\n"):
            s = Stub(reply)
            try:
                d, _ = self.ask("unix:" + s.path)
                self.assertTrue(d.failed_open, reply)
                self.assertFalse(d.refused, reply)
            finally:
                s.close()

    def test_hung_service_fails_open_after_the_timeout(self):
        s = Stub(None)
        try:
            d, took = self.ask("unix:" + s.path, timeout=0.1)
            self.assertTrue(d.failed_open)
            self.assertGreaterEqual(took, 0.09)
            self.assertLess(took, 1.0)
        finally:
            s.close()

    def test_a_refusal_is_read(self):
        line = (b'{"id":"x","decision":"refused","held":false,"status":429,'
                b'"headers":{"Retry-After":"5"},"body":{"scope":"user"}}\n')
        s = Stub(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(line), line))
        try:
            d, _ = self.ask("unix:" + s.path)
            self.assertTrue(d.refused)
            self.assertEqual((d.status, d.headers["Retry-After"], d.body["scope"]), (429, "5", "user"))
        finally:
            s.close()

    def test_misses_are_logged_once_a_minute_per_process(self):
        from capgate.stats import counts

        counts.after_fork()  # as a fresh process: nothing logged yet
        with self.assertLogs("capgate", logging.WARNING) as logs:
            for _ in range(5):
                # Two clients: the bound is the process's, not a client's.
                for c in (capgate.Client("unix:/nonexistent/capgate.sock"), capgate.Client("unix:/nonexistent/b.sock")):
                    with c.call(**CALL):
                        pass
        self.assertEqual(len(logs.records), 1)

    def test_unknown_fields_and_urls_are_refused(self):
        c = capgate.Client("unix:/x.sock")
        with self.assertRaises(TypeError):
            c.call(user="u", sematic=True)  # type: ignore[call-arg]
        with self.assertRaises(ValueError):
            capgate.Client("https://example.test")

    def test_route_and_fields_are_sent(self):
        # The call of a policy's route (issue 40: Client refused "route").
        s = Stub(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(OFF), OFF))
        try:
            c = capgate.Client("unix:" + s.path, timeout=1)
            with c.call(user="ann", groups=["staff"], route="report", fields={"pages": 40, "format": "pdf"},
                        repeat_key="k-1", fingerprint="f") as d:
                self.assertEqual(d.decision, "off")
            self.assertEqual(s.bodies, [{"user": "ann", "groups": ["staff"], "route": "report",
                                         "fields": {"pages": 40, "format": "pdf"},
                                         "repeat_key": "k-1", "fingerprint": "f"}])
        finally:
            s.close()

    def test_a_call_the_service_cannot_take_is_sent_again_as_the_conservative_call(self):
        # 400: the call as read can't be taken (a route the policy lacks, a
        # key it can't use): the caller's side counts, as the conservative
        # call of the caller as named; a value that is no JSON, or a call
        # too large, is never sent as it is.
        bad = b'HTTP/1.1 400 Bad Request\r\nContent-Length: 16\r\n\r\n{"detail":"no"}\n'
        ok = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(OFF), OFF)
        for call, first in (
            (dict(user="ann", groups=["staff"], route="reprot", fields={"pages": 1}, request_id="r1"), True),
            (dict(user="ann", groups=["staff"], route="report", fields={"when": object()}), False),
            (dict(user="ann", groups=["staff"], route="report", fields={"x": "y" * 20000}), False),
        ):
            s = Stub(bad, then=ok) if first else Stub(ok)
            try:
                c = capgate.Client("unix:" + s.path, timeout=1)
                before = capgate.stats()["conservative"].get("rejected", 0)
                with c.call(**call) as d:
                    self.assertEqual((d.decision, d.conservative, d.failed_open), ("off", True, False))
                want = {"user": "ann", "groups": ["staff"], "conservative": True}
                want.update({"route": call["route"]} if first else {"route": "report"})
                if "request_id" in call:
                    want["request_id"] = call["request_id"]
                self.assertEqual(s.bodies[-1], want)
                self.assertEqual(len(s.bodies), 2 if first else 1)
                self.assertEqual(capgate.stats()["conservative"]["rejected"], before + 1)
            finally:
                s.close()

    def test_a_service_that_refuses_the_conservative_call_too_fails_open(self):
        bad = b'HTTP/1.1 400 Bad Request\r\nContent-Length: 16\r\n\r\n{"detail":"no"}\n'
        s = Stub(bad, then=bad)
        try:
            d, _ = self.ask("unix:" + s.path)
            self.assertEqual((d.failed_open, d.reason), (True, "rejected"))
            self.assertEqual(len(s.bodies), 2)
        finally:
            s.close()

    def test_the_conservative_call_names_what_the_service_takes(self):
        self.assertEqual(capgate.conservative_call(None), {"user": "(unidentified)", "conservative": True})
        self.assertEqual(capgate.conservative_call("x" * 151)["user"], "(unidentified)")
        self.assertEqual(capgate.conservative_call(3)["user"], "(unidentified)")
        c = capgate.conservative_call("ann", groups=["a", 3, "b" * 151, "c"], is_staff="yes", tier="pro",
                                      route="report", request_id="r" * 300)
        self.assertEqual(c, {"user": "ann", "groups": ["a", "c"], "tier": "pro", "route": "report",
                             "request_id": "r" * 200, "conservative": True})
        many = capgate.conservative_call("ann", groups=["g" * 150] * 500)
        self.assertEqual(len(many["groups"]), 100)
        self.assertLessEqual(len(json.dumps(many)), 16 << 10)

    def test_failures_are_counted_by_reason(self):
        before = capgate.stats()["failed_open"].get("unreachable", 0)
        self.ask("unix:/nonexistent/capgate.sock")
        self.assertEqual(capgate.stats()["failed_open"]["unreachable"], before + 1)


if __name__ == "__main__":
    unittest.main()
