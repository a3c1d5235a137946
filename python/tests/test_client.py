"""capgate.Client against stand-ins for a broken or slow decision service
(standard library only; run with the rest: cd python && python3 -m pytest).
The real service is exercised by the Go suite in test/decide."""

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


class Stub:
    """A unix-socket server that answers every connection with reply (bytes,
    or None to say nothing and hold the connection)."""

    def __init__(self, reply):
        self.dir = tempfile.mkdtemp()
        self.path = os.path.join(self.dir, "d.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(16)
        self.reply = reply
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
            read_request(c)
            if self.reply is not None:
                c.sendall(self.reply)
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

    def test_answers_that_are_no_decision_refuse_the_call(self):
        # The service answered, but nothing a client can read: counted as
        # refused (503), never run uncounted (issue 28).
        for reply in (
            b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 2\r\n\r\nno",
            b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 2\r\n\r\nno",
            b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nnot json\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n{\"a\":",
            b"HTTP/1.1 200 OK\r\nContent-Length: 21\r\n\r\n{\"decision\":\"maybe\"}\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 3001\r\n\r\n" + b"[" * 3000 + b"\n",
            b"garbage\r\n\r\n",
        ):
            s = Stub(reply)
            try:
                d, _ = self.ask("unix:" + s.path)
                self.assertFalse(d.failed_open, reply)
                self.assertTrue(d.refused, reply)
                self.assertEqual((d.decision, d.status), ("error", 503), reply)
                self.assertEqual(d.headers["Retry-After"], "1")
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

    def test_misses_are_logged_once_a_minute(self):
        c = capgate.Client("unix:/nonexistent/capgate.sock")
        with self.assertLogs("capgate", logging.WARNING) as logs:
            for _ in range(5):
                with c.call(**CALL):
                    pass
        self.assertEqual(len(logs.records), 1)

    def test_unknown_fields_and_urls_are_refused(self):
        c = capgate.Client("unix:/x.sock")
        with self.assertRaises(TypeError):
            c.call(user="u", sematic=True)
        with self.assertRaises(ValueError):
            capgate.Client("https://example.test")


if __name__ == "__main__":
    unittest.main()
