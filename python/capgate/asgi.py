"""An ASGI middleware: gates the heavy calls of any ASGI app (Starlette,
FastAPI, …) under uvicorn with a capgate decision service.

    from capgate.asgi import CapacityMiddleware

    app = Starlette(routes=...)
    app = CapacityMiddleware(app, url="unix:/run/capgate/decide.sock", classify=classify)
    # FastAPI / Starlette: app.add_middleware(CapacityMiddleware, url=..., classify=...)

``classify(request)`` gets a ``Request`` — the method, path, query,
headers and the whole body, read before the app sees it and then handed to
it unchanged — and returns the call (the protocol's fields, as for
``capgate.Client.call``: the caller, the policy's route and fields) or
None for a call that is not heavy. It may be a coroutine function. Only
the requests whose path starts with one of ``paths`` (default: every
path) are read and classified; a body is read up to ``max_body`` bytes
(default 16 MiB).

The decision is asked in a thread of the middleware's own (at most
``max_threads`` at once: a call that waits in the service's fair queue
holds one, never the event loop). A refused call gets the service's answer
(its status, headers and body, in the policy's names); a repeat of a call
running gets ``on_joined(request, decision)`` (default 409); an admitted
call's response gets the capacity headers, and its place is held until the
app has sent its last byte (a streamed answer too), raised, or the client
went away.

The rules of failure are the Django middleware's (docs/SECURITY.md): a
failing limiter never refuses — the app runs the call uncounted — and the
caller's side always counts: a classifier that raises, or a body past
``max_body``, is counted as the conservative call, of the caller
``identify(request)`` names (a dict with user and groups or tier; default
none: ``(unidentified)``).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Awaitable, Callable, Dict, List, Mapping, MutableMapping, Optional, Sequence, Tuple, Union

from capgate.client import DEFAULT_TIMEOUT, Client, Decision, _Call, conservative_call
from capgate.stats import counts, log_once_a_minute

__all__ = ["CapacityMiddleware", "Request", "JOINED_STATUS", "JOINED_BODY"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: A classifier: the request → the call, or None (sync or async).
Classifier = Callable[["Request"], Union[Optional[Mapping[str, Any]], Awaitable[Optional[Mapping[str, Any]]]]]

#: The default answer to a call that repeats one still running.
JOINED_STATUS = 409
JOINED_BODY = {"detail": "This call repeats one still running; retry once it has finished.",
               "error_code": "idempotency_key_in_use"}

#: The default bound on a body read to classify it.
DEFAULT_MAX_BODY = 16 << 20


class Request:
    """The request as a classifier reads it. ``body`` is the whole body
    (``complete`` false when it was longer than max_body: then only its
    start); ``headers`` maps each lower-case name to its values joined with
    ", "; ``query`` is the raw query string."""

    __slots__ = ("scope", "method", "path", "query", "headers", "body", "complete")

    def __init__(self, scope: Scope, body: bytes, complete: bool) -> None:
        self.scope = scope
        self.method: str = str(scope.get("method", "GET")).upper()
        self.path: str = str(scope.get("path", ""))
        self.query: str = bytes(scope.get("query_string", b"")).decode("latin-1")
        headers: Dict[str, str] = {}
        for k, v in scope.get("headers", []):
            name, value = k.decode("latin-1").lower(), v.decode("latin-1")
            headers[name] = headers[name] + ", " + value if name in headers else value
        self.headers = headers
        self.body = body
        self.complete = complete

    def json(self) -> Any:
        """The body as JSON (ValueError if it is not, or was cut)."""
        if not self.complete:
            raise ValueError("the body is larger than the middleware reads")
        return json.loads(self.body)


class CapacityMiddleware:
    """Gates the calls classify names heavy (see the module)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        url: str,
        classify: Classifier,
        token: Optional[str] = None,
        timeout: float = DEFAULT_TIMEOUT,
        identify: Optional[Callable[[Request], Optional[Mapping[str, Any]]]] = None,
        on_joined: Optional[Callable[[Request, Decision], Tuple[int, Mapping[str, str], Any]]] = None,
        paths: Sequence[str] = ("/",),
        max_body: int = DEFAULT_MAX_BODY,
        max_threads: int = 64,
    ) -> None:
        self.app = app
        self.client = Client(url, token=token, timeout=timeout)
        self.classify = classify
        self.identify = identify
        self.on_joined = on_joined
        self.paths = tuple(paths)
        self.max_body = max_body
        self._pool = ThreadPoolExecutor(max_workers=max_threads, thread_name_prefix="capgate")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http" or not str(scope.get("path", "")).startswith(self.paths):
            await self.app(scope, receive, send)
            return
        chunks, complete, more = await self._read(receive)
        request = Request(scope, b"".join(chunks), complete)
        replay = _Replay(chunks, more, receive)
        fields = await self._fields(request)
        if fields is None:
            await self.app(scope, replay, send)
            return
        loop = asyncio.get_running_loop()
        call, answer = await loop.run_in_executor(self._pool, self._begin, fields, request)
        if answer is not None:
            await _respond(send, *answer)
            return
        assert call is not None
        d = call.decision
        headers = [] if d is None or d.failed_open else [
            (k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in d.headers.items()]

        async def send_with_headers(message: Message) -> None:
            if message.get("type") == "http.response.start" and headers:
                message = dict(message)
                message["headers"] = list(message.get("headers", [])) + headers
            await send(message)

        scope.setdefault("state", {})["capgate_decision"] = d
        try:
            await self.app(scope, replay, send_with_headers)
        finally:
            call.close()  # after the last byte, an exception or a client gone

    async def _read(self, receive: Receive) -> Tuple[List[bytes], bool, bool]:
        """Reads the body up to max_body: (its chunks, whether it was read
        whole, whether more is to come from receive)."""
        chunks: List[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message.get("type") != "http.request":
                # The client went away: the app gets that too.
                return chunks, False, False
            body = bytes(message.get("body", b""))
            chunks.append(body)
            size += len(body)
            more = bool(message.get("more_body", False))
            if size > self.max_body:
                return chunks, False, more
            if not more:
                return chunks, True, False

    async def _fields(self, request: Request) -> Optional[Dict[str, Any]]:
        """The classifier's call; the conservative call when it raises,
        returns no dict, or the body could not be read whole."""
        try:
            got = self.classify(request)
            if inspect.isawaitable(got):
                got = await got
            if got is not None and not isinstance(got, Mapping):
                raise TypeError("capgate classifier returned %r, not a dict or None" % (type(got).__name__,))
            if got is not None and not request.complete:
                raise ValueError("the body is larger than max_body (%d bytes)" % self.max_body)
            return dict(got) if got is not None else None
        except Exception as e:
            counts.add("conservative", "classifier")
            log_once_a_minute("classifier", logging.WARNING,
                              "capgate: the classifier or the request failed; the call is counted as the conservative call: %r", e)
            return self._conservative(request)

    def _conservative(self, request: Request, route: Optional[str] = None) -> Dict[str, Any]:
        who: Mapping[str, Any] = {}
        if self.identify is not None:
            try:
                who = self.identify(request) or {}
            except Exception:
                who = {}
        return conservative_call(who.get("user"), groups=who.get("groups"), is_staff=who.get("is_staff"),
                                 tier=who.get("tier"), route=route,
                                 request_id=request.headers.get("x-request-id"))

    def _begin(self, fields: Dict[str, Any], request: Request) -> Tuple[Optional[_Call], Optional[Tuple[int, Mapping[str, str], Any]]]:
        """In a thread: asks the service; (the held call, or None and the
        answer to send instead of running the app)."""
        try:
            call = self.client.call(**fields)
        except TypeError as e:  # a classifier's unknown or missing field
            counts.add("conservative", "classifier")
            log_once_a_minute("classifier", logging.WARNING,
                              "capgate: the classifier's call has no such field; it is counted as the conservative call: %r", e)
            route = fields.get("route")
            call = self.client.call(**self._conservative(request, route if isinstance(route, str) else None))
        d = call.__enter__()
        if d.refused:
            call.close()
            return None, (d.status or 429, d.headers, d.body)
        if d.joined:
            try:
                if self.on_joined is not None:
                    return None, self.on_joined(request, d)
                return None, (JOINED_STATUS, dict(d.headers, **{"Retry-After": "1"}),
                              dict(JOINED_BODY, dedup_of=d.dedup_of))
            finally:
                call.close()
        return call, None


class _Replay:
    """The receive the app gets: the chunks already read, then the rest."""

    def __init__(self, chunks: List[bytes], more: bool, receive: Receive) -> None:
        self._chunks = list(chunks)
        self._more = more
        self._receive = receive

    async def __call__(self) -> Message:
        if self._chunks:
            body = self._chunks.pop(0)
            return {"type": "http.request", "body": body, "more_body": bool(self._chunks) or self._more}
        # The rest of a long body, then http.disconnect once the client goes.
        return await self._receive()


async def _respond(send: Send, status: int, headers: Mapping[str, str], body: Any) -> None:
    payload = json.dumps(body, separators=(",", ":")).encode()
    hs = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    hs += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()
           if k.lower() not in ("content-type", "content-length")]
    await send({"type": "http.response.start", "status": status, "headers": hs})
    await send({"type": "http.response.body", "body": payload})
