"""The decision service's client: one HTTP/1.1 connection per call.

The connection is the lease. ``Client.call`` opens it, sends the call and
reads the decision (the first line of a streamed answer); while the ``with``
block runs the connection stays open, and closing it gives the call's place
back. A process that dies closes its sockets, so its places are freed at once
with no renewal logic here.

Anything that goes wrong (service down, slow, broken, a refused request)
fails open: the decision says the call may run (``failed_open`` is set), and
the miss is logged at most once a minute per client.
"""

import http.client
import json
import logging
import socket
import threading
import time
from urllib.parse import urlsplit

__all__ = ["Client", "Decision", "DEFAULT_TIMEOUT"]

logger = logging.getLogger("capgate")

#: Seconds to connect and get an answer, beyond the wait the service says
#: a call may take (its ``Capgate-Wait-Seconds`` header).
DEFAULT_TIMEOUT = 0.25

#: How often a client logs that it failed open, at most.
MISS_LOG_INTERVAL = 60.0

_FIELDS = (
    "user", "tier", "groups", "is_staff", "endpoint", "semantic", "reranker",
    "rows", "aware", "request_id", "task", "request_source",
)


def _remaining(deadline):
    """Seconds left until deadline; past it, a timeout that fails at once."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise socket.timeout("capgate decide: no answer within the timeout")
    return left


class Decision:
    """The service's decision on one call.

    ``decision`` is admitted, shadow-refused, refused, unavailable, off, or
    ``failed-open`` when the service could not be asked. ``refused`` means
    the app answers ``status`` (429) with ``headers`` and ``body`` and never
    runs the call; otherwise it runs the call and adds ``headers`` to its
    response.
    """

    __slots__ = ("decision", "held", "status", "headers", "body", "id", "failed_open", "error")

    def __init__(self, line=None, error=None):
        line = line or {}
        self.decision = line.get("decision", "failed-open")
        self.held = bool(line.get("held", False))
        self.status = line.get("status") or None
        self.headers = dict(line.get("headers") or {})
        self.body = line.get("body")
        self.id = line.get("id")
        self.failed_open = line == {} or error is not None
        self.error = error

    @property
    def refused(self):
        return self.decision == "refused" and not self.failed_open

    def __repr__(self):
        return "Decision(%r, held=%r, status=%r)" % (self.decision, self.held, self.status)


class _UnixConnection(http.client.HTTPConnection):
    """HTTP over a unix socket."""

    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self._path)
        except BaseException:
            s.close()
            raise
        self.sock = s


class _Call:
    """The context manager of one call: holds the connection while it runs."""

    def __init__(self, client, body):
        self._client = client
        self._body = body
        self._conn = None
        self._sock = None
        self._resp = None
        self.decision = None

    def __enter__(self):
        try:
            self.decision = self._ask()
            if self.decision.held:
                self._watch()
        except Exception as e:  # fail open, whatever went wrong
            self.close()
            self.decision = Decision(error=e)
            self._client._missed(e)
        return self.decision

    def __exit__(self, *exc):
        self.close()
        return False

    def _ask(self):
        c = self._client
        # One deadline for connecting, sending and the answer, not one
        # timeout per step: a service that is slow at each step still costs
        # the call at most the client's timeout (plus the announced wait).
        deadline = time.monotonic() + c.timeout
        conn = c._connect()
        self._conn = conn
        conn.connect()
        # getresponse hands the socket to the response (Connection: close)
        # and forgets it: keep it, for the timeout and the shutdown.
        self._sock = conn.sock
        self._sock.settimeout(_remaining(deadline))
        conn.request("POST", "/v1/calls", body=self._body, headers=c._headers)
        self._sock.settimeout(_remaining(deadline))
        resp = conn.getresponse()
        self._resp = resp
        if resp.status != 200:
            detail = resp.read(4096).decode("utf-8", "replace").strip()
            raise RuntimeError("capgate decide answered %d: %s" % (resp.status, detail))
        wait = resp.getheader("Capgate-Wait-Seconds")
        if wait:
            # The call may wait in the service's queue: allow that long.
            deadline += float(wait)
        self._sock.settimeout(_remaining(deadline))
        line = resp.readline(64 << 10)
        if not line.endswith(b"\n"):
            raise RuntimeError("capgate decide: the decision line ended early")
        d = Decision(json.loads(line))
        if not d.held:
            self.close()  # nothing to hold: the answer has ended
        return d

    def _watch(self):
        """Re-registers the call if its connection drops while it runs."""
        _rewatcher.watch(self)

    def close(self):
        """Ends the call: closing the connection gives its place back."""
        _rewatcher.forget(self)
        conn, self._conn = self._conn, None
        if conn is None:
            return
        sock, self._sock = self._sock, None
        try:
            if sock is not None:
                # The response object keeps its own reference to the socket:
                # shut it down so the service sees the close at once.
                sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            if self._resp is not None:
                self._resp.close()
        except Exception:
            pass
        conn.close()


class Client:
    """A client of the decision service at ``url``.

    ``url`` is ``unix:/path/to.sock`` or ``http://host:port``. ``token`` is
    the service's shared secret (``--decide-token``). ``timeout`` bounds, in
    seconds, connecting and getting the decision, plus the wait the service
    says a call may take. Safe to share between threads.
    """

    def __init__(self, url, token=None, timeout=DEFAULT_TIMEOUT):
        self.url = url
        self.timeout = float(timeout)
        if url.startswith("unix:"):
            path = url[len("unix:"):]
            if path.startswith("//"):
                path = path[2:]
            self._connect = lambda: _UnixConnection(path, self.timeout)
        else:
            u = urlsplit(url)
            if u.scheme != "http" or not u.hostname:
                raise ValueError("capgate Client url %r: want unix:/path or http://host:port" % (url,))
            host, port = u.hostname, u.port or 80
            self._connect = lambda: http.client.HTTPConnection(host, port, timeout=self.timeout)
        self._headers = {"Content-Type": "application/json", "Connection": "close"}
        if token:
            self._headers["Authorization"] = "Bearer " + token
        self._lock = threading.Lock()
        self._last_miss = None

    def call(self, **call):
        """Returns a context manager whose value is the call's Decision.

        The fields are those of the protocol: user, tier (or groups and
        is_staff), endpoint, semantic, reranker, rows, aware, request_id,
        task, request_source. The call holds its place until the ``with``
        block ends.
        """
        unknown = set(call) - set(_FIELDS)
        if unknown:
            raise TypeError("capgate call: unknown fields %s" % ", ".join(sorted(unknown)))
        body = json.dumps({k: v for k, v in call.items() if v is not None}).encode()
        return _Call(self, body)

    def _missed(self, err):
        """Logs that a call failed open, at most once a minute."""
        now = time.monotonic()
        with self._lock:
            if self._last_miss is not None and now - self._last_miss < MISS_LOG_INTERVAL:
                return
            self._last_miss = now
        logger.warning("capgate: decision service %s not usable; calls run unlimited (fail open): %s", self.url, err)


# --- Re-registering held calls whose connection dropped -------------------
#
# The connection is the lease: if the service restarts (or is killed) while
# a held call's ``with`` block still runs, its connection ends without the
# client closing it, and the call would run uncounted. One background thread
# per process watches the held calls' sockets; when one ends that way it
# re-sends the call with ``"running": true`` every REREGISTER_EVERY seconds
# while the block runs, until a service counts it again (docs/PROTOCOL.md,
# "A call that already runs"), and then holds the new connection instead.

#: Seconds between tries to re-register a call whose connection dropped.
REREGISTER_EVERY = 0.25


class _Rewatcher:
    """Watches held calls' connections and re-registers dropped ones."""

    def __init__(self):
        self._lock = threading.Lock()
        self._calls = {}  # _Call → its state: {"sock", "buf", "lost", "next"}
        self._thread = None
        self._pid = None

    def watch(self, call):
        """Starts watching a held call's connection."""
        if call._sock is None:
            return
        with self._lock:
            self._calls[call] = {"sock": call._sock, "buf": b"", "lost": False, "next": 0.0}
            self._start_locked()

    def forget(self, call):
        """Stops watching call: its block ended, the client closes it."""
        with self._lock:
            self._calls.pop(call, None)

    def _start_locked(self):
        # A forked worker (gunicorn's preload) has no thread of its parent's.
        if self._thread is not None and self._thread.is_alive() and self._pid == _os.getpid():
            return
        self._pid = _os.getpid()
        self._thread = threading.Thread(target=self._run, name="capgate-rewatch", daemon=True)
        self._thread.start()

    def _run(self):
        import selectors

        while True:
            with self._lock:
                if not self._calls:
                    self._thread = None
                    return
                watched = {st["sock"]: c for c, st in self._calls.items() if not st["lost"]}
                lost = [c for c, st in self._calls.items() if st["lost"]]
            if watched:
                ready = []
                # epoll or poll: no limit on descriptor numbers, unlike select.
                with selectors.DefaultSelector() as sel:
                    for sock in watched:
                        try:
                            sel.register(sock, selectors.EVENT_READ)
                        except (OSError, ValueError):
                            ready.append(sock)  # closed under us: look at it
                    if sel.get_map():
                        ready += [key.fileobj for key, _ in sel.select(REREGISTER_EVERY)]
                for sock in ready:
                    self._read(watched[sock], sock)
            else:
                time.sleep(REREGISTER_EVERY)
            now = time.monotonic()
            for call in lost:
                with self._lock:
                    st = self._calls.get(call)
                    due = st is not None and st["lost"] and st["next"] <= now
                if due:
                    self._reregister(call)

    def _read(self, call, sock):
        """Reads what the service sent after the decision; a connection
        that ends (or resets) without the service ending the call, or one
        the service ended for shutting down, is lost."""
        try:
            data = sock.recv(4096)
        except (BlockingIOError, socket.timeout, InterruptedError):
            return
        except OSError:
            data = b""
        with self._lock:
            st = self._calls.get(call)
            if st is None or st["sock"] is not sock:
                return
            if data:
                st["buf"] = (st["buf"] + data)[-256:]
                if b'"released":"release"' in st["buf"] or b'"released":"max_hold"' in st["buf"]:
                    # The service ended the hold on purpose: nothing to re-register.
                    self._calls.pop(call, None)
                return
            st["lost"], st["next"], st["buf"] = True, 0.0, b""
        try:
            sock.close()
        except OSError:
            pass

    def _reregister(self, call):
        """One try at counting call again; on success the call holds the
        new connection."""
        try:
            body = json.loads(call._body)
            body["running"] = True
            # The same correlation id as the first decision's (the
            # service made one up if the call had none): one call, one cid.
            rid = (call.decision.headers.get("X-Request-Id") if call.decision is not None else None)
            if rid and not body.get("request_id"):
                body["request_id"] = rid
            again = _Call(call._client, json.dumps(body).encode())
            d = again._ask()
        except Exception:
            d, again = None, None
        ok = d is not None and d.held
        with self._lock:
            st = self._calls.get(call)
            if st is not None and d is not None and not ok:
                # The service answered but holds nothing (mode off): done.
                self._calls.pop(call, None)
                st = None
            if st is None or not ok:
                if st is not None:
                    st["next"] = time.monotonic() + REREGISTER_EVERY
                keep = False
            else:
                # The block still runs: it holds the new connection, which
                # its close() ends.
                call._conn, call._sock, call._resp = again._conn, again._sock, again._resp
                again._conn = again._sock = again._resp = None
                self._calls[call] = {"sock": call._sock, "buf": b"", "lost": False, "next": 0.0}
                keep = True
        if again is not None and not keep:
            again.close()


_rewatcher = _Rewatcher()


def _rewatcher_after_fork():
    # A forked child has none of its parent's calls nor its thread, and its
    # copy of the lock may have been held at the fork.
    global _rewatcher
    _rewatcher = _Rewatcher()


import os as _os  # noqa: E402 (the watcher's part of the module)

if hasattr(_os, "register_at_fork"):
    _os.register_at_fork(after_in_child=_rewatcher_after_fork)
