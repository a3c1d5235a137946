"""The decision service's client: one HTTP/1.1 connection per call.

The connection is the lease. ``Client.call`` opens it, sends the call and
reads the decision (the first line of a streamed answer); while the ``with``
block runs the connection stays open, and closing it gives the call's place
back. A process that dies closes its sockets, so its places are freed at once
with no renewal logic here.

One rule for what goes wrong: the call runs uncounted (``failed_open``)
only when the service cannot be reached (no socket, connection refused or
reset, permission denied) or sends no decision within the bound. An answer
it can't read (not ``200``, not HTTP, no JSON, an unknown decision) is not a
miss: the call is refused (``decision == "error"``, a 503). Misses and errors
are logged at most once a minute per client.

The bound is measured on the service, not on this process: it starts once
the call is sent, and when it has passed the client still reads what the
service already sent before calling it a miss, so a worker that was paused
or starved of the GIL (another thread parsing a large body) does not turn
an answered call into an uncounted one.
"""

from __future__ import annotations

import http.client
import io
import json
import logging
import socket
import threading
import time
from types import TracebackType
from typing import Any, Callable, Dict, List, Mapping, Optional, Type, cast
from urllib.parse import urlsplit

__all__ = ["Client", "Decision", "DecisionError", "DEFAULT_TIMEOUT"]

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


#: The last read once the bound has passed: long enough to take what the
#: kernel holds already, too short to wait for anything new.
LAST_READ = 0.001

#: The decisions a service may answer (docs/PROTOCOL.md).
DECISIONS = frozenset(("admitted", "shadow-refused", "refused", "unavailable", "off"))

#: What the app answers when the service's answer can't be read.
ERROR_STATUS = 503
ERROR_RETRY_AFTER = "1"


class DecisionError(Exception):
    """The service answered, but not with a decision the client can read:
    the call is refused, not run uncounted."""


class _PatientReader(io.RawIOBase):
    """The answer's socket, read against the call's deadline (``_Bound``).
    A read never fails before it has looked: past the deadline it still
    takes what the kernel holds, and a poll that timed out is followed by
    one non-blocking read, since the thread may have waited for the GIL
    long after the poll gave up (another thread parsing a large body) while
    the answer arrived."""

    def __init__(self, sock: socket.socket, bound: "_Bound") -> None:
        super().__init__()
        self._sock = sock
        self._bound = bound
        # The socket's own file, read through recv_into here, keeps it open
        # for the response when http.client closes the connection's
        # reference (Connection: close), as its makefile would.
        self._file = sock.makefile("rb", buffering=0)

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        if not self.closed:
            self._file.close()
        super().close()

    def readinto(self, b: Any) -> int:
        self._sock.settimeout(max(self._bound.deadline - time.monotonic(), LAST_READ))
        try:
            return self._sock.recv_into(b)
        except socket.timeout:
            self._sock.setblocking(False)
            try:
                return self._sock.recv_into(b)
            except BlockingIOError:
                raise socket.timeout("capgate decide: no answer within the timeout") from None
            finally:
                self._sock.settimeout(LAST_READ)


class _Bound:
    """The deadline of one call's answer (monotonic seconds)."""

    __slots__ = ("deadline",)

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline


class _PatientSocket:
    """What http.client.HTTPResponse reads an answer from: the socket
    through _PatientReader."""

    def __init__(self, sock: socket.socket, bound: _Bound) -> None:
        self._sock = sock
        self._bound = bound

    def makefile(self, mode: str = "rb", *args: Any, **kwargs: Any) -> io.BufferedReader:
        return io.BufferedReader(_PatientReader(self._sock, self._bound))


class Decision:
    """The service's decision on one call.

    ``decision`` is admitted, shadow-refused, refused, unavailable, off, or
    ``failed-open`` when the service could not be asked. ``refused`` means
    the app answers ``status`` (429) with ``headers`` and ``body`` and never
    runs the call; otherwise it runs the call and adds ``headers`` to its
    response.
    """

    __slots__ = ("decision", "held", "status", "headers", "body", "id", "failed_open", "error")

    def __init__(self, line: Optional[Mapping[str, Any]] = None, error: Optional[BaseException] = None) -> None:
        line = line or {}
        self.decision: str = line.get("decision", "failed-open")
        self.held: bool = bool(line.get("held", False))
        self.status: Optional[int] = line.get("status") or None
        self.headers: Dict[str, str] = dict(line.get("headers") or {})
        self.body: Any = line.get("body")
        self.id: Optional[str] = line.get("id")
        self.failed_open: bool = line == {} or error is not None
        self.error: Optional[BaseException] = error

    @classmethod
    def from_line(cls, raw: bytes) -> "Decision":
        """The decision of the answer's first line; DecisionError if it is
        not one."""
        try:
            line = json.loads(raw)
        except (ValueError, RecursionError) as e:
            raise DecisionError("capgate decide: the decision line is not JSON: %s" % e) from e
        if not isinstance(line, dict) or line.get("decision") not in DECISIONS:
            raise DecisionError("capgate decide: not a decision: %.200r" % (raw,))
        if not isinstance(line.get("headers") or {}, dict):
            raise DecisionError("capgate decide: the decision's headers are not an object")
        if line["decision"] == "refused" and not isinstance(line.get("status") or 429, int):
            raise DecisionError("capgate decide: the refusal's status is not a number")
        return cls(line)

    @classmethod
    def failed(cls, error: BaseException) -> "Decision":
        """The call refused because the service's answer could not be read."""
        d = cls({
            "decision": "error",
            "status": ERROR_STATUS,
            "headers": {"Retry-After": ERROR_RETRY_AFTER, "X-OCL-Capacity-Decision": "error"},
            "body": {"detail": "Matching is busy. Please retry.", "error_code": "capacity_error"},
        })
        d.error = error
        return d

    @property
    def refused(self) -> bool:
        """The app answers status with headers and body and never runs the
        call: the service refused it, or its answer could not be read."""
        return self.decision in ("refused", "error") and not self.failed_open

    def __repr__(self) -> str:
        return "Decision(%r, held=%r, status=%r)" % (self.decision, self.held, self.status)


class _UnixConnection(http.client.HTTPConnection):
    """HTTP over a unix socket."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
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

    def __init__(self, client: "Client", body: bytes) -> None:
        self._client = client
        self._body = body
        self._conn: Optional[http.client.HTTPConnection] = None
        self._sock: Optional[socket.socket] = None
        self._resp: Optional[http.client.HTTPResponse] = None
        self.decision: Optional[Decision] = None

    def __enter__(self) -> Decision:
        try:
            self.decision = self._ask()
        except (http.client.RemoteDisconnected, http.client.IncompleteRead, EOFError) as e:
            # The connection ended before a decision: the service is gone
            # (crashed, restarting), a miss.
            return self._miss(e)
        except (DecisionError, http.client.HTTPException) as e:
            # The service answered something that is no decision (not 200,
            # not HTTP, no JSON): refuse the call rather than run it
            # uncounted.
            return self._refuse(e)
        except OSError as e:
            # Not reached (no socket, refused, reset, denied) or no answer
            # within the bound (socket.timeout is an OSError): the only
            # case where the call runs uncounted.
            return self._miss(e)
        except Exception as e:  # anything else is a bug here: count it
            return self._refuse(e)
        if self.decision.held:
            self._watch()
        return self.decision

    def _refuse(self, e: BaseException) -> Decision:
        self.close()
        self.decision = Decision.failed(e)
        self._client._missed(e, refused=True)
        return self.decision

    def _miss(self, e: BaseException) -> Decision:
        self.close()
        self.decision = Decision(error=e)
        self._client._missed(e)
        return self.decision

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()

    def _ask(self) -> Decision:
        c = self._client
        conn = c._connect()
        self._conn = conn
        # Connecting and sending have the timeout each; the bound on the
        # answer starts once the call is sent, so time this process spent
        # not running (a GIL held by a parse, a paused worker) before then
        # is not charged to the service.
        conn.connect()
        # getresponse hands the socket to the response (Connection: close)
        # and forgets it: keep it, for the timeout and the shutdown.
        sock = conn.sock
        assert sock is not None
        self._sock = sock
        conn.request("POST", "/v1/calls", body=self._body, headers=c._headers)
        bound = _Bound(time.monotonic() + c.timeout)
        conn.response_class = lambda sock, method=None: http.client.HTTPResponse(  # type: ignore[assignment]
            _PatientSocket(sock, bound), method=method)  # type: ignore[arg-type]
        resp = conn.getresponse()
        self._resp = resp
        if resp.status != 200:
            detail = resp.read(4096).decode("utf-8", "replace").strip()
            raise DecisionError("capgate decide answered %d: %s" % (resp.status, detail[:500]))
        wait = resp.getheader("Capgate-Wait-Seconds")
        if wait:
            # The call may wait in the service's queue: allow that long.
            try:
                bound.deadline += min(max(float(wait), 0.0), 3600.0)
            except ValueError as e:
                raise DecisionError("capgate decide: Capgate-Wait-Seconds %r" % (wait,)) from e
        line = resp.readline(64 << 10)
        if not line:
            raise EOFError("capgate decide: the answer ended before its decision")
        if not line.endswith(b"\n"):
            raise DecisionError("capgate decide: the decision line is cut or too long")
        d = Decision.from_line(line)
        if not d.held:
            self.close()  # nothing to hold: the answer has ended
        return d

    def _watch(self) -> None:
        """Re-registers the call if its connection drops while it runs."""
        _rewatcher.watch(self)

    def close(self) -> None:
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

    def __init__(self, url: str, token: Optional[str] = None, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.url = url
        self.timeout = float(timeout)
        if url.startswith("unix:"):
            path = url[len("unix:"):]
            if path.startswith("//"):
                path = path[2:]
            self._connect: Callable[[], http.client.HTTPConnection] = lambda: _UnixConnection(path, self.timeout)
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
        self._last_miss: Optional[float] = None

    def call(self, **call: Any) -> _Call:
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

    def _missed(self, err: BaseException, refused: bool = False) -> None:
        """Logs that a call failed open (or was refused for an answer that
        could not be read), at most once a minute."""
        now = time.monotonic()
        with self._lock:
            if self._last_miss is not None and now - self._last_miss < MISS_LOG_INTERVAL:
                return
            self._last_miss = now
        if refused:
            logger.error("capgate: decision service %s answered what is no decision; calls are refused: %s",
                         self.url, err)
        else:
            logger.warning("capgate: decision service %s not usable; calls run unlimited (fail open): %s",
                           self.url, err)


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


class _Watched:
    """A held call's connection as the watcher sees it."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""  # the end of what the service sent after the decision
        self.lost = False  # the connection ended: re-register
        self.next = 0.0  # when to try that next (time.monotonic)


class _Rewatcher:
    """Watches held calls' connections and re-registers dropped ones."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: Dict[_Call, _Watched] = {}
        self._thread: Optional[threading.Thread] = None
        self._pid: Optional[int] = None

    def watch(self, call: _Call) -> None:
        """Starts watching a held call's connection."""
        if call._sock is None:
            return
        with self._lock:
            self._calls[call] = _Watched(call._sock)
            self._start_locked()

    def forget(self, call: _Call) -> None:
        """Stops watching call: its block ended, the client closes it."""
        with self._lock:
            self._calls.pop(call, None)

    def _start_locked(self) -> None:
        # A forked worker (gunicorn's preload) has no thread of its parent's.
        if self._thread is not None and self._thread.is_alive() and self._pid == _os.getpid():
            return
        self._pid = _os.getpid()
        self._thread = threading.Thread(target=self._run, name="capgate-rewatch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import selectors

        while True:
            with self._lock:
                if not self._calls:
                    self._thread = None
                    return
                watched = {st.sock: c for c, st in self._calls.items() if not st.lost}
                lost = [c for c, st in self._calls.items() if st.lost]
            if watched:
                ready: List[socket.socket] = []
                # epoll or poll: no limit on descriptor numbers, unlike select.
                with selectors.DefaultSelector() as sel:
                    for sock in watched:
                        try:
                            sel.register(sock, selectors.EVENT_READ)
                        except (OSError, ValueError):
                            ready.append(sock)  # closed under us: look at it
                    if sel.get_map():
                        ready += [cast(socket.socket, key.fileobj) for key, _ in sel.select(REREGISTER_EVERY)]
                for sock in ready:
                    self._read(watched[sock], sock)
            else:
                time.sleep(REREGISTER_EVERY)
            now = time.monotonic()
            for call in lost:
                with self._lock:
                    st = self._calls.get(call)
                    due = st is not None and st.lost and st.next <= now
                if due:
                    self._reregister(call)

    def _read(self, call: _Call, sock: socket.socket) -> None:
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
            if st is None or st.sock is not sock:
                return
            if data:
                st.buf = (st.buf + data)[-256:]
                if b'"released":"release"' in st.buf or b'"released":"max_hold"' in st.buf:
                    # The service ended the hold on purpose: nothing to re-register.
                    self._calls.pop(call, None)
                return
            st.lost, st.next, st.buf = True, 0.0, b""
        try:
            sock.close()
        except OSError:
            pass

    def _reregister(self, call: _Call) -> None:
        """One try at counting call again; on success the call holds the
        new connection."""
        again: Optional[_Call] = None
        d: Optional[Decision] = None
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
                    st.next = time.monotonic() + REREGISTER_EVERY
                keep = False
            else:
                assert again is not None
                # The block still runs: it holds the new connection, which
                # its close() ends.
                call._conn, call._sock, call._resp = again._conn, again._sock, again._resp
                again._conn = again._sock = again._resp = None
                if call._sock is None:
                    self._calls.pop(call, None)
                else:
                    self._calls[call] = _Watched(call._sock)
                keep = True
        if again is not None and not keep:
            again.close()


_rewatcher = _Rewatcher()


def _rewatcher_after_fork() -> None:
    # A forked child has none of its parent's calls nor its thread, and its
    # copy of the lock may have been held at the fork.
    global _rewatcher
    _rewatcher = _Rewatcher()


import os as _os  # noqa: E402 (the watcher's part of the module)

if hasattr(_os, "register_at_fork"):
    _os.register_at_fork(after_in_child=_rewatcher_after_fork)
