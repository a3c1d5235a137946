"""The decision service's client: one HTTP/1.1 connection per call.

The connection is the lease. ``Client.call`` opens it, sends the call and
reads the decision (the first line of a streamed answer); while the ``with``
block runs the connection stays open, and closing it gives the call's place
back. A process that dies closes its sockets, so its places are freed at once
with no renewal logic here.

Two rules for what goes wrong (docs/SECURITY.md):

- **A failing limiter never refuses a call.** When the service can't be
  reached, sends no decision within the bound, answers a status other than
  200 or 400 (a 5xx, a proxy's error page, a wrong token) or something that
  is no decision line, the call runs uncounted: ``failed_open``, with a
  ``reason``, counted in ``capgate.stats()`` and logged at most once a minute
  per process.
- **What the caller's side sends always counts.** A call the service can't
  take as read (``400``: a route or field the policy lacks, a key it can't
  use, a call too large), or one that can't even be sent (a value that is
  no JSON), is sent again as the conservative call (``conservative_call``):
  the service counts it as the route's most expensive reading, of the
  caller as named, or ``(unidentified)``. Only if the service refuses that
  too — its own error — does the call fail open.
"""

from __future__ import annotations

import http.client
import json
import logging
import socket
import time
from types import TracebackType
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple, Type, Union
from urllib.parse import quote, urlsplit

from capgate import _rewatch
from capgate._wire import Bound, PatientSocket, UnixConnection
from capgate.stats import LOG_INTERVAL, counts, log_once_a_minute

__all__ = [
    "Client",
    "Decision",
    "DecisionError",
    "Rejected",
    "DEFAULT_TIMEOUT",
    "UNIDENTIFIED",
    "FieldValue",
    "conservative_call",
]

#: Seconds to connect and get an answer, beyond the wait the service says
#: a call may take (its ``Capgate-Wait-Seconds`` header).
DEFAULT_TIMEOUT = 0.25

#: How often a client logs one kind of failure, at most (per process).
MISS_LOG_INTERVAL = LOG_INTERVAL

#: The user of a conservative call whose caller could not be identified.
UNIDENTIFIED = "(unidentified)"

#: The decisions a service may answer (docs/PROTOCOL.md).
DECISIONS = frozenset(("admitted", "shadow-refused", "refused", "unavailable", "off", "joined", "reused"))

#: The bounds of what the service takes (docs/PROTOCOL.md): the call's
#: JSON, a username, the groups kept, the ids kept.
MAX_CALL_BYTES = 16 << 10
MAX_USER = 150
MAX_GROUPS = 100
MAX_REQUEST_ID = 200
MAX_REQUEST_SOURCE = 50

#: A call field's value: a policy field is a boolean, a whole number or a
#: string.
FieldValue = Union[bool, int, str]

# The old private name, which the tests use.
_UnixConnection = UnixConnection


class DecisionError(Exception):
    """The service answered, but not with a decision the client can read:
    the call fails open."""


class Rejected(DecisionError):
    """The service can't take the call as it was read (400): the call is
    sent again as the conservative call."""


class _StatusError(DecisionError):
    """An answer whose status is neither 200 nor 400."""


class Decision:
    """The service's decision on one call.

    ``decision`` is admitted, shadow-refused, refused, unavailable, off,
    joined or reused (docs/PROTOCOL.md), or ``failed-open`` when the
    service could not decide (``failed_open`` true, ``reason`` says why:
    capgate.stats.FAILED_OPEN_REASONS). ``refused`` means the app answers
    ``status`` with ``headers`` and ``body`` and never runs the call (a
    refusal's 429, or the 422 of a repeat_key used for another request);
    ``joined`` means the call repeats one still running: the app does not
    run it, and may ``wait`` for that call to end. Otherwise the app runs
    the call and adds ``headers`` to its response. ``conservative`` says
    the call was counted as the conservative call.
    """

    __slots__ = ("decision", "held", "status", "headers", "body", "id", "failed_open", "reason", "error",
                 "conservative", "dedup_of", "_call", "_holder")

    def __init__(self, line: Optional[Mapping[str, Any]] = None, reason: Optional[str] = None,
                 error: Optional[BaseException] = None) -> None:
        line = line or {}
        self.decision: str = str(line.get("decision", "failed-open"))
        self.held: bool = line.get("held") is True
        self.status: Optional[int] = line.get("status") or None
        self.headers: Dict[str, str] = dict(line.get("headers") or {})
        self.body: Any = line.get("body")
        self.id: Optional[str] = line.get("id")
        self.dedup_of: Optional[str] = line.get("dedup_of")
        self.failed_open: bool = reason is not None
        self.reason: Optional[str] = reason
        self.error: Optional[BaseException] = error
        self.conservative = False
        self._call: Optional[_Call] = None
        self._holder: Optional[_Call] = None  # the call holding its place, for release

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
        headers = line.get("headers") or {}
        if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
            raise DecisionError("capgate decide: the decision's headers are not an object of strings")
        if not isinstance(line.get("held", False), bool):
            raise DecisionError("capgate decide: the decision's held is not a boolean")
        if line["decision"] in ("refused", "reused"):
            status = line.get("status")
            if not isinstance(status, int) or isinstance(status, bool) or not 400 <= status < 500:
                raise DecisionError("capgate decide: the refusal's status is not a 4xx")
            if not isinstance(line.get("body"), dict):
                raise DecisionError("capgate decide: the refusal has no body")
        return cls(line)

    @classmethod
    def failed(cls, reason: str, error: BaseException) -> "Decision":
        """The call runs uncounted: the service could not decide it."""
        return cls(None, reason=reason, error=error)

    @property
    def refused(self) -> bool:
        """The app answers status with headers and body and never runs the
        call: the service refused it (429), or its repeat_key was used for
        another request (422)."""
        return self.decision in ("refused", "reused")

    @property
    def joined(self) -> bool:
        """The call repeats one still running (its repeat_key): the app
        does not run it (wait, then look for that call's result, or answer
        409)."""
        return self.decision == "joined"

    def wait(self, timeout: float) -> Optional[str]:
        """For a joined call, waits at most timeout seconds for the call it
        repeats to end, and returns why the service ended the answer:
        "finished" (look for its result now; a call that left none may be
        asked again), "max_hold", "store_failed" or "shutdown"; None when
        the time ran out or the answer ended with no reason."""
        if self._call is None:
            return None
        return self._call._wait_end(timeout)

    def release(self, usage: Optional[int] = None) -> None:
        """Ends the call now, before its ``with`` block does, giving its
        place back. ``usage`` is what the call used (the tokens an inference
        call served, say: a whole number from 0 up), which the service
        writes on the call's line as ``usage``; a negative one, or one that
        is no int, is not sent. Reporting it asks the service once more
        (``POST /v1/calls/{id}/release``, within the client's timeout); if
        that fails, the call is released all the same, without its usage.
        Never raises; a call that holds nothing is left as it is."""
        holder, self._holder = self._holder, None
        if holder is None:
            return
        if isinstance(usage, int) and not isinstance(usage, bool) and 0 <= usage < 1 << 63 and self.id:
            holder._client._release(self.id, usage)
        holder.close()

    def __repr__(self) -> str:
        return "Decision(%r, held=%r, status=%r)" % (self.decision, self.held, self.status)


def _clip(v: Any, n: int) -> Optional[str]:
    return v[:n] if isinstance(v, str) and v else None


def conservative_call(user: Any = None, *, groups: Any = None, is_staff: Any = None, tier: Any = None,
                      route: Any = None, endpoint: Any = None, task: Any = None, request_id: Any = None,
                      request_source: Any = None) -> Dict[str, Any]:
    """The conservative call of a caller: what a call is counted as when its
    own reading can't be had (docs/PROTOCOL.md, ``conservative``). The
    service counts it as the most expensive reading of route (of the
    policy's most expensive route without one): the policy in force, never
    a copy here. The caller is user when it is a name the service takes (a
    string of 1 to 150 characters), else ``(unidentified)``; its groups,
    is_staff and tier are kept when they are of the protocol's types (the
    service resolves a tier it lacks from the groups). Nothing here can make
    the service refuse it."""
    call: Dict[str, Any] = {"user": user if isinstance(user, str) and 0 < len(user) <= MAX_USER else UNIDENTIFIED,
                            "conservative": True}
    if isinstance(groups, (list, tuple)):
        kept = [g for g in groups if isinstance(g, str) and len(g) <= MAX_USER][:MAX_GROUPS]
        if kept:
            call["groups"] = kept
    if isinstance(is_staff, bool):
        call["is_staff"] = is_staff
    for name, v, n in (("tier", tier, 64), ("route", route, 64), ("endpoint", endpoint, 64), ("task", task, 64),
                       ("request_id", request_id, MAX_REQUEST_ID), ("request_source", request_source, MAX_REQUEST_SOURCE)):
        s = _clip(v, n)
        if s is not None:
            call[name] = s
    if "route" in call:
        call.pop("endpoint", None)
    if len(_encode(call)) > MAX_CALL_BYTES:
        call.pop("groups", None)  # the default tier's: never more than the caller's
    return call


def _conservative_of(call: Mapping[str, Any]) -> Dict[str, Any]:
    """The conservative call of a call that could not be taken as read."""
    return conservative_call(call.get("user"), groups=call.get("groups"), is_staff=call.get("is_staff"),
                             tier=call.get("tier"), route=call.get("route"), endpoint=call.get("endpoint"),
                             task=call.get("task"), request_id=call.get("request_id"),
                             request_source=call.get("request_source"))


def _encode(call: Mapping[str, Any]) -> bytes:
    return json.dumps(call, allow_nan=False, separators=(",", ":")).encode()


def _reason(e: BaseException, connected: bool) -> str:
    """Why a call whose ask raised e fails open (FAILED_OPEN_REASONS)."""
    if isinstance(e, Rejected):
        return "rejected"
    if isinstance(e, _StatusError):
        return "status"
    if isinstance(e, (DecisionError, http.client.HTTPException)) and not isinstance(
            e, (http.client.RemoteDisconnected, http.client.IncompleteRead)):
        return "not_a_decision"
    if isinstance(e, socket.timeout):
        return "timeout"
    if isinstance(e, (http.client.RemoteDisconnected, http.client.IncompleteRead, EOFError)):
        return "closed"
    if isinstance(e, OSError):
        return "closed" if connected else "unreachable"
    return "error"


class _Call:
    """The context manager of one call: holds the connection while it runs."""

    def __init__(self, client: "Client", call: Dict[str, Any]) -> None:
        self._client = client
        self._call = call
        self._body = b""  # what was sent, for a re-registration
        self._conn: Optional[http.client.HTTPConnection] = None
        self._sock: Optional[socket.socket] = None
        self._resp: Optional[http.client.HTTPResponse] = None
        self._bound: Optional[Bound] = None
        self._connected = False
        self.decision: Optional[Decision] = None

    def __enter__(self) -> Decision:
        d = self._decide()
        self.decision = d
        counts.add("decision", d.decision)
        if d.held:
            d._holder = self
            _rewatch.rewatcher().watch(self)
        return d

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()

    def _decide(self) -> Decision:
        """Asks the service; a call it can't take as read is asked again as
        the conservative call; anything the limiter gets wrong fails open.
        Never raises."""
        c = self._client
        if not self._call.get("conservative"):
            try:
                try:
                    body = _encode(self._call)
                except (TypeError, ValueError) as e:
                    raise Rejected("the call is no JSON: %s" % e) from e
                if len(body) > MAX_CALL_BYTES:
                    raise Rejected("the call is larger than %d bytes" % MAX_CALL_BYTES)
                return self._ask(body)
            except Rejected as e:
                self.close()
                counts.add("conservative", "rejected")
                log_once_a_minute("rejected", logging.WARNING,
                                  "capgate: decision service %s can't take a call as the app read it (%s); "
                                  "such calls are counted as the conservative call", c.url, e)
            except Exception as e:
                return self._fail(e)
        try:
            d = self._ask(_encode(_conservative_of(self._call)))
        except Exception as e:
            return self._fail(e)
        d.conservative = True
        return d

    def _fail(self, e: BaseException) -> Decision:
        reason = _reason(e, self._connected)
        self.close()
        counts.add("failed_open", reason)
        log_once_a_minute("failed_open", logging.WARNING,
                          "capgate: decision service %s not usable (%s); calls run unlimited (fail open): %s",
                          self._client.url, reason, e)
        return Decision.failed(reason, e)

    def _ask(self, body: bytes) -> Decision:
        c = self._client
        self.close()
        self._connected = False
        conn = c._connect()
        self._conn = conn
        # Connecting and sending have the timeout each; the bound on the
        # answer starts once the call is sent, so time this process spent
        # not running (a GIL held by a parse, a paused worker) before then
        # is not charged to the service.
        conn.connect()
        self._connected = True
        # getresponse hands the socket to the response (Connection: close)
        # and forgets it: keep it, for the timeout and the shutdown.
        sock = conn.sock
        assert sock is not None
        self._sock = sock
        conn.request("POST", "/v1/calls", body=body, headers=c._headers)
        bound = Bound(time.monotonic() + c.timeout)
        self._bound = bound
        conn.response_class = lambda sock, method=None: http.client.HTTPResponse(  # type: ignore[assignment]
            PatientSocket(sock, bound), method=method)  # type: ignore[arg-type]
        resp = conn.getresponse()
        self._resp = resp
        if resp.status != 200:
            detail = resp.read(4096).decode("utf-8", "replace").strip()
            err = Rejected if resp.status == 400 else _StatusError
            raise err("capgate decide answered %d: %s" % (resp.status, detail[:500]))
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
        self._body = body
        if d.joined:
            d._call = self  # its answer stays open until the call it repeats ends
        elif not d.held:
            self.close()  # nothing to hold: the answer has ended
        return d

    def _wait_end(self, timeout: float) -> Optional[str]:
        """Reads a joined call's answer to its end line, for at most
        timeout seconds; the end's reason, or None."""
        resp, bound = self._resp, self._bound
        if resp is None or bound is None:
            return None
        bound.deadline = time.monotonic() + max(timeout, 0.0)
        try:
            while True:
                raw = resp.readline(64 << 10)
                if not raw:
                    return None
                raw = raw.strip()
                if not raw:
                    continue  # a probe
                line = json.loads(raw)
                if isinstance(line, dict) and isinstance(line.get("released"), str):
                    return str(line["released"])
        except (OSError, ValueError, http.client.HTTPException):
            return None

    def _running_again(self) -> Tuple[Optional["_Call"], Optional[Decision]]:
        """One try at counting this held call again, as running (its
        connection dropped): the new call and its decision, or (None, None)
        when the service could not be asked."""
        again: Optional[_Call] = None
        try:
            body = json.loads(self._body)
            body["running"] = True
            # The same correlation id as the first decision's (the
            # service made one up if the call had none): one call, one cid.
            rid = self.decision.headers.get("X-Request-Id") if self.decision is not None else None
            if rid and not body.get("request_id"):
                body["request_id"] = rid
            again = _Call(self._client, body)
            return again, again._ask(_encode(body))
        except Exception:
            if again is not None:
                again.close()
            return None, None

    def _take_connection(self, other: "_Call") -> None:
        """Holds other's connection instead of its own (a re-registration)."""
        self._conn, self._sock, self._resp = other._conn, other._sock, other._resp
        other._conn = other._sock = other._resp = None

    def close(self) -> None:
        """Ends the call: closing the connection gives its place back."""
        _rewatch.rewatcher().forget(self)
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
        self._resp = None
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
            self._connect: Callable[[], http.client.HTTPConnection] = lambda: UnixConnection(path, self.timeout)
        else:
            u = urlsplit(url)
            if u.scheme != "http" or not u.hostname:
                raise ValueError("capgate Client url %r: want unix:/path or http://host:port" % (url,))
            host, port = u.hostname, u.port or 80
            self._connect = lambda: http.client.HTTPConnection(host, port, timeout=self.timeout)
        self._headers = {"Content-Type": "application/json", "Connection": "close"}
        if token:
            self._headers["Authorization"] = "Bearer " + token

    def _release(self, call_id: str, usage: int) -> None:
        """Releases the held call call_id reporting its usage; a failure is
        logged (at most once a minute), never raised."""
        conn = None
        try:
            conn = self._connect()
            body = json.dumps({"usage": usage}).encode()
            conn.request("POST", "/v1/calls/%s/release" % quote(call_id, safe=""), body=body, headers=self._headers)
            resp = conn.getresponse()
            resp.read(4096)
            if resp.status != 204:
                raise _StatusError("capgate decide answered %d to the release" % resp.status)
        except Exception as e:
            log_once_a_minute("release_failed", logging.WARNING,
                              "capgate: decision service %s: the release with usage failed (the call is released "
                              "all the same, without it): %s", self.url, e)
        finally:
            if conn is not None:
                conn.close()

    def call(
        self,
        *,
        user: str,
        tier: Optional[str] = None,
        groups: Optional[Sequence[str]] = None,
        is_staff: Optional[bool] = None,
        route: Optional[str] = None,
        fields: Optional[Mapping[str, FieldValue]] = None,
        endpoint: Optional[str] = None,
        semantic: Optional[bool] = None,
        reranker: Optional[bool] = None,
        rows: Optional[int] = None,
        aware: Optional[bool] = None,
        request_id: Optional[str] = None,
        task: Optional[str] = None,
        request_source: Optional[str] = None,
        repeat_key: Optional[str] = None,
        fingerprint: Optional[str] = None,
        conservative: Optional[bool] = None,
    ) -> _Call:
        """Returns a context manager whose value is the call's Decision; the
        call holds its place until the ``with`` block ends.

        The fields are the protocol's (docs/PROTOCOL.md): the caller (user,
        and tier or groups and is_staff), the call by its policy route and
        fields (``route="report", fields={"pages": 3}``; or the built-in
        policy's endpoint, semantic, reranker and rows), aware, request_id,
        task, request_source, repeat_key and fingerprint (a repeat of a call
        running is ``joined``), and conservative (count it as the route's
        most expensive reading: ``conservative_call``). A field not given
        is left out.
        """
        given: Dict[str, Any] = {
            "user": user, "tier": tier, "groups": groups, "is_staff": is_staff, "route": route, "fields": fields,
            "endpoint": endpoint, "semantic": semantic, "reranker": reranker, "rows": rows, "aware": aware,
            "request_id": request_id, "task": task, "request_source": request_source,
            "repeat_key": repeat_key, "fingerprint": fingerprint, "conservative": conservative or None,
        }
        return _Call(self, {k: v for k, v in given.items() if v is not None})
