"""Django and Django REST framework integration.

Settings::

    CAPGATE = {
        "URL": "unix:/run/capgate.sock",   # or http://127.0.0.1:8091
        "TOKEN": None,                     # --decide-token, for TCP
        "CLASSIFY": "capgate.django.ocl.classify",
        "TIMEOUT": 0.25,                   # seconds; fail open past it
        "REUSE_AUTHENTICATION": True,      # the view reuses the middleware's DRF authentication
    }

Three ways to gate a view, each with the same classifier:

- ``CapacityMiddleware`` (after AuthenticationMiddleware) gates every view
  the classifier names heavy: DRF views (APIView, generic views, ViewSets:
  the classifier gets the request as DRF will hand it to the view), plain
  Django views and function views, sync or async (the middleware is
  sync- and async-capable).
- ``CapacityLimitedMixin`` (or ``@capacity_limited()`` on the class) gates
  one DRF view after its authentication and permissions and before its
  throttles, so a capacity refusal never spends throttle allowance.
- ``@capacity_limited(classify)`` on a function view (or a view's method;
  on a DRF method it runs after DRF's throttles, which then count the
  refusal: use the class form for DRF).

A classifier gets the request and returns the call (a dict of the
protocol's fields: user, groups and is_staff or tier, endpoint, semantic,
reranker, rows, aware, request_id, request_source) or None.

A refused call gets the service's 429 as a JsonResponse and the view never
runs. An admitted call's response gets the capacity headers, and its place
is held until the response is finished: Django closes it after the last
byte, streaming responses included, and on exceptions and client
disconnects. The request's decision is ``request.capgate_decision``.

One rule for failures (docs/SECURITY.md): the view runs uncounted only when
the decision service can't be reached or does not answer within its bound.
A classifier that raises, or a request that can't be read, is gated as the
most conservative call (``conservative_call``: a bulk semantic ``$match``
of the caller as identified, else ``(unidentified)``); an answer that can't
be read refuses the call (503).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from typing import Any, Callable, Dict, Optional, Tuple, Union

from capgate.client import DEFAULT_TIMEOUT, MISS_LOG_INTERVAL, Client, _Call

__all__ = [
    "CapacityMiddleware",
    "CapacityLimitedMixin",
    "capacity_limited",
    "conservative_call",
    "UNIDENTIFIED",
]

logger = logging.getLogger("capgate")

#: The user of a conservative call whose caller could not be identified.
UNIDENTIFIED = "(unidentified)"

Classifier = Callable[[Any], Optional[Dict[str, Any]]]

_clients: Dict[Tuple[str, Optional[str], float], Client] = {}
_clients_lock = threading.Lock()


def _conf() -> Dict[str, Any]:
    from django.conf import settings

    conf = dict(getattr(settings, "CAPGATE", None) or {})
    if not conf.get("URL"):
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured('settings.CAPGATE["URL"] is required: the capgate decision service')
    return conf


def _client(conf: Dict[str, Any]) -> Client:
    key = (conf["URL"], conf.get("TOKEN"), float(conf.get("TIMEOUT", DEFAULT_TIMEOUT)))
    with _clients_lock:
        c = _clients.get(key)
        if c is None:
            c = _clients[key] = Client(key[0], token=key[1], timeout=key[2])
        return c


def _classifier(classify: Union[None, str, Classifier], conf: Dict[str, Any]) -> Classifier:
    classify = classify or conf.get("CLASSIFY") or "capgate.django.ocl.classify"
    if isinstance(classify, str):
        from django.utils.module_loading import import_string

        classify = import_string(classify)
    return classify  # type: ignore[return-value]


class _Misses:
    """Logs a classifier's failures at most once a minute."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: Optional[float] = None

    def log(self, err: BaseException) -> None:
        now = time.monotonic()
        with self._lock:
            if self._last is not None and now - self._last < MISS_LOG_INTERVAL:
                return
            self._last = now
        logger.warning("capgate: the classifier failed; the call is gated as the most conservative call: %r", err)


_misses = _Misses()


class RequestUnreadable(RuntimeError):
    """The middleware could not build the request a classifier reads (a
    DRF view it can't set up, a body it can't read). Never an
    AttributeError, which ``getattr(request, name, None)`` would hide."""


def _identified(request: Any) -> Tuple[Optional[Any], Any]:
    """The caller as far as it was identified without asking again: the user
    DRF's authenticators found, else Django's (session) user; (None, the
    Django request) when neither is an authenticated user."""
    django_request = _django_request(request)
    if isinstance(request, _LazyDRFRequest):
        drf_request = request.__dict__.get("_drf")
    else:
        drf_request = request if request is not django_request else None
    users = []
    if drf_request is not None:
        users.append(vars(drf_request).get("_user"))  # what DRF authenticated, if it did
    try:
        users.append(getattr(django_request, "user", None))  # the session's (AuthenticationMiddleware)
    except Exception:
        pass
    for user in users:
        try:
            if user is not None and getattr(user, "is_authenticated", False):
                return user, django_request
        except Exception:
            continue
    return None, django_request


def conservative_call(request: Any) -> Dict[str, Any]:
    """The call a request is gated as when its classifier failed: a bulk
    (rows unknown) semantic and reranked ``$match``, capacity-aware (refused
    under ``enforce_for: aware`` too), of the caller as identified — with
    its groups when they can be read, else none (the lowest tier) — or of
    ``(unidentified)``."""
    user, django_request = _identified(request)
    call: Dict[str, Any] = {
        "user": UNIDENTIFIED, "groups": [], "is_staff": False, "endpoint": "$match",
        "semantic": True, "reranker": True, "rows": 0, "aware": True,
    }
    if user is not None:
        try:
            name = user.get_username()
            if isinstance(name, str) and 0 < len(name) <= 150:
                call["user"] = name
                call["is_staff"] = bool(getattr(user, "is_staff", False) or getattr(user, "is_superuser", False))
                call["groups"] = [str(g.name) for g in user.groups.all()] if hasattr(user, "groups") else []
        except Exception:
            call["is_staff"], call["groups"] = False, []
    try:
        rid = django_request.META.get("HTTP_X_REQUEST_ID")
        if isinstance(rid, str) and rid:
            call["request_id"] = rid[:200]
    except Exception:
        pass
    return call


def _classify(classify: Classifier, request: Any) -> Optional[Dict[str, Any]]:
    """The classifier's call; when it raises (RecursionError included), the
    conservative call, never None: an error is counted, not run."""
    try:
        fields = classify(request)
        if fields is not None and not isinstance(fields, dict):
            raise TypeError("capgate classifier returned %r, not a dict or None" % (type(fields).__name__,))
        return fields
    except Exception as e:
        _misses.log(e)
        return conservative_call(request)


def _django_request(request: Any) -> Any:
    """The Django HttpRequest under a DRF Request (or the request itself)."""
    inner = getattr(request, "__dict__", {}).get("_request")
    return inner if inner is not None else request


def _refusal(decision: Any) -> Any:
    from django.http import JsonResponse

    body = decision.body if decision.body is not None else {"detail": "Matching is busy. Please retry."}
    resp = JsonResponse(body, status=decision.status or 429)
    for k, v in decision.headers.items():
        resp[k] = v
    return resp


def _attach(call: _Call, response: Any) -> Any:
    """Adds the capacity headers to response and ends call when response
    is closed (after its last byte, or when the client went away). A 429
    the app answered itself (a DRF throttle) ends the call at once and
    carries no capacity decision: it is not capgate's."""
    d = call.decision
    if getattr(response, "status_code", None) == 429:
        call.close()
        return response
    if d is not None and not d.failed_open:
        for k, v in d.headers.items():
            response[k] = v
    closers = getattr(response, "_resource_closers", None)
    if closers is not None:
        closers.append(call.close)
    else:  # pragma: no cover - Django before 3.0
        close = response.close

        def closing() -> None:
            try:
                close()
            finally:
                call.close()

        response.close = closing
    return response


def _begin(client: Client, call_fields: Dict[str, Any], django_request: Any) -> Tuple[Optional[_Call], Any]:
    """Asks the service; returns (call context, refusal response or None)."""
    try:
        call = client.call(**call_fields)
    except TypeError as e:  # a classifier's unknown field: count the call all the same
        _misses.log(e)
        call = client.call(**conservative_call(django_request))
    d = call.__enter__()
    django_request.capgate_decision = d
    if d.refused:
        call.close()
        return None, _refusal(d)
    return call, None


# What a classifier may read of the request without DRF being asked: the
# method, the path, the query and the headers.
_PLAIN = frozenset(("method", "path", "path_info", "META", "GET", "headers", "COOKIES", "scheme", "get_full_path"))


def _keep_body(request: Any) -> None:
    """Reads the body so that Django keeps it: the classifier's parse and the
    view's then read the same bytes. Past DATA_UPLOAD_MAX_MEMORY_SIZE Django
    refuses request.body, yet DRF's parsers read the stream with no limit:
    read it here all the same, as DRF will, so such a body is classified,
    not passed."""
    from django.core.exceptions import RequestDataTooBig

    try:
        request.body
    except RequestDataTooBig:
        import io

        request._body = request.read()
        request._stream = io.BytesIO(request._body)


class _LazyDRFRequest:
    """The request as a DRF view will see it — its authenticators and
    parsers: request.user, request.query_params, request.data — made only
    when the classifier asks for more than the method, path, query and
    headers, so a call that is not heavy costs no parse and no
    authentication."""

    def __init__(self, request: Any, view_func: Any, view_args: Any, view_kwargs: Any) -> None:
        self._request = request
        self._view = (view_func, view_args, view_kwargs)
        self._drf: Any = None

    def drf(self) -> Any:
        if self._drf is None:
            try:
                self._drf = self._build()
            except Exception as e:
                # Never an AttributeError out of __getattr__: Python would
                # report it as a missing attribute (request.user as None)
                # and the call would pass ungated.
                raise RequestUnreadable("capgate: can't make the DRF request for the classifier: %r" % (e,)) from e
        return self._drf

    def _build(self) -> Any:
        view_func, args, kwargs = self._view
        request = self._request
        if request.method not in ("GET", "HEAD", "OPTIONS"):
            _keep_body(request)
        view = view_func.cls(**(getattr(view_func, "initkwargs", None) or {}))
        actions = getattr(view_func, "actions", None)
        if actions is not None:
            # A ViewSet: as_view(actions) binds the HTTP methods to its
            # actions; its initialize_request reads action_map.
            view.action_map = actions
            for method, action in actions.items():
                setattr(view, method, getattr(view, action))
        view.args, view.kwargs, view.request = args, kwargs, request
        view.format_kwarg = None
        return view.initialize_request(request, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name in _PLAIN:
            return getattr(self._request, name)
        return getattr(self.drf(), name)


def _drf_request(request: Any, view_func: Any, view_args: Any, view_kwargs: Any) -> Any:
    """The request for the classifier: a lazy DRF request for a DRF view,
    else the Django request."""
    cls = getattr(view_func, "cls", None)
    if cls is None or not hasattr(cls, "initialize_request"):
        return request
    return _LazyDRFRequest(request, view_func, view_args, view_kwargs)


def _reuse_authentication(request: Any, lazy: Any) -> None:
    """Hands the user the view's own authenticators found (for the
    classifier) to the view, so it does not authenticate the request a second
    time (a token lookup: about half of what the middleware adds to a call).
    Only a user that authenticated is handed on; DRF takes it as forced
    authentication."""
    drf_request = lazy.__dict__.get("_drf")
    user = getattr(drf_request, "_user", None) if drf_request is not None else None
    if user is None or not getattr(user, "is_authenticated", False):
        return
    request._force_auth_user = user
    request._force_auth_token = getattr(drf_request, "_auth", None)


class CapacityMiddleware:
    """Gates the views the CAPGATE["CLASSIFY"] classifier names heavy; sync
    and async (under ASGI the decision is asked in a thread of the default
    executor, so a call that waits costs no event loop)."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[Any], Any]) -> None:
        self.get_response = get_response
        conf = _conf()
        self.client = _client(conf)
        self.classify = _classifier(None, conf)
        self.reuse_auth = conf.get("REUSE_AUTHENTICATION", True)
        self._async = asyncio.iscoroutinefunction(get_response)
        if self._async:
            # Django (3.2's way) tells an async middleware by this marker.
            self._is_coroutine = asyncio.coroutines._is_coroutine  # type: ignore[attr-defined]
            self.process_view = self._process_view_async  # type: ignore[assignment]

    def __call__(self, request: Any) -> Any:
        if self._async:
            return self._acall(request)
        try:
            response = self.get_response(request)
        except BaseException:
            self._end(request)
            raise
        return self._finish(request, response)

    async def _acall(self, request: Any) -> Any:
        try:
            response = await self.get_response(request)
        except BaseException:
            self._end(request)
            raise
        return self._finish(request, response)

    @staticmethod
    def _finish(request: Any, response: Any) -> Any:
        call = getattr(request, "_capgate_call", None)
        if call is None:
            return response
        request._capgate_call = None
        return _attach(call, response)

    @staticmethod
    def _end(request: Any) -> None:
        call = getattr(request, "_capgate_call", None)
        if call is not None:
            request._capgate_call = None
            call.close()

    def _fields(self, request: Any, view_func: Any, view_args: Any, view_kwargs: Any) -> Optional[Dict[str, Any]]:
        """The call to ask about, or None for a call that is not heavy."""
        try:
            req = _drf_request(request, view_func, view_args, view_kwargs)
        except Exception as e:
            _misses.log(e)
            return conservative_call(request)
        fields = _classify(self.classify, req)
        if self.reuse_auth and isinstance(req, _LazyDRFRequest):
            _reuse_authentication(request, req)
        return fields

    def process_view(self, request: Any, view_func: Any, view_args: Any, view_kwargs: Any) -> Any:
        if getattr(request, "_capgate_call", None) is not None:
            return None
        fields = self._fields(request, view_func, view_args, view_kwargs)
        if not fields:
            return None
        call, refusal = _begin(self.client, fields, request)
        if refusal is not None:
            return refusal
        request._capgate_call = call
        return None

    async def _process_view_async(self, request: Any, view_func: Any, view_args: Any, view_kwargs: Any) -> Any:
        from asgiref.sync import sync_to_async

        if getattr(request, "_capgate_call", None) is not None:
            return None
        # The classifier may use the ORM (the user's groups): Django's sync
        # thread. The decision (which may wait) in a thread of its own.
        fields = await sync_to_async(self._fields, thread_sensitive=True)(request, view_func, view_args, view_kwargs)
        if not fields:
            return None
        call, refusal = await sync_to_async(_begin, thread_sensitive=False)(self.client, fields, request)
        if refusal is not None:
            return refusal
        request._capgate_call = call
        return None


def _fields_for(classify: Union[None, str, Classifier], request: Any) -> Optional[Dict[str, Any]]:
    """The call to ask about, or None: not heavy, or one the middleware
    already gates."""
    if getattr(_django_request(request), "_capgate_call", None) is not None:
        return None
    return _classify(_classifier(classify, _conf()), request)


def _gate(classify: Union[None, str, Classifier], request: Any) -> Tuple[Optional[_Call], Any]:
    """Classifies request and asks the service: (the held call or None, a
    refusal or None)."""
    fields = _fields_for(classify, request)
    if not fields:
        return None, None
    return _begin(_client(_conf()), fields, _django_request(request))


class _Refused(Exception):
    """Carries a capacity refusal out of DRF's initial() to the view's
    handle_exception."""

    def __init__(self, response: Any) -> None:
        super().__init__("capacity refused")
        self.response = response


class CapacityLimitedMixin:
    """A DRF view mixin (put it first: ``class V(CapacityLimitedMixin,
    APIView)``) that gates the view after DRF's authentication and
    permissions and before its throttles: a refused call never reaches
    ``check_throttles``, so it spends no throttle allowance, and a
    throttle's own 429 carries no capacity decision (the call's place is
    given back at once). ``capacity_classify`` is the classifier (a callable
    or a dotted path; default CAPGATE["CLASSIFY"])."""

    capacity_classify: Union[None, str, Classifier] = None
    _capgate_call: Optional[_Call] = None

    def check_throttles(self, request: Any) -> None:
        classify = type(self).capacity_classify  # a plain function, not a method
        call, refusal = _gate(classify, request)
        if refusal is not None:
            raise _Refused(refusal)
        self._capgate_call = call
        try:
            super().check_throttles(request)  # type: ignore[misc]
        except BaseException:
            self._end_call()
            raise

    def handle_exception(self, exc: Exception) -> Any:
        if isinstance(exc, _Refused):
            return exc.response
        return super().handle_exception(exc)  # type: ignore[misc]

    def finalize_response(self, request: Any, response: Any, *args: Any, **kwargs: Any) -> Any:
        response = super().finalize_response(request, response, *args, **kwargs)  # type: ignore[misc]
        call, self._capgate_call = self._capgate_call, None
        if call is not None:
            _attach(call, response)
        return response

    def dispatch(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().dispatch(request, *args, **kwargs)  # type: ignore[misc]
        except BaseException:
            self._end_call()
            raise

    def _end_call(self) -> None:
        call, self._capgate_call = self._capgate_call, None
        if call is not None:
            call.close()


def capacity_limited(classify: Union[None, str, Classifier] = None) -> Callable[[Any], Any]:
    """Gates one view. On a DRF view class (``@capacity_limited()`` above
    ``class V(APIView)``, ViewSets and generic views too) it adds
    CapacityLimitedMixin: gated after authentication and permissions,
    before throttles — the way to use it with DRF. On a function view, or a
    view's method (then after DRF's throttles), it gates each call. classify
    is a callable or a dotted path; default CAPGATE["CLASSIFY"]. A call the
    middleware already gates is left to it."""

    def decorate(view: Any) -> Any:
        if isinstance(view, type):
            if not hasattr(view, "check_throttles"):
                raise TypeError("capacity_limited on a class: want a DRF view (APIView, a generic view, a ViewSet)")
            attrs = {"capacity_classify": staticmethod(classify) if callable(classify) else classify,
                     "__module__": view.__module__, "__doc__": view.__doc__}
            return type(view.__name__, (CapacityLimitedMixin, view), attrs)

        if asyncio.iscoroutinefunction(view):
            @functools.wraps(view)
            async def awrapped(*args: Any, **kwargs: Any) -> Any:
                from asgiref.sync import sync_to_async

                request = _find_request(args)
                if request is None:
                    return await view(*args, **kwargs)
                fields = await sync_to_async(_fields_for, thread_sensitive=True)(classify, request)
                call, refusal = None, None
                if fields:
                    # The decision (which may wait) in a thread of its own.
                    call, refusal = await sync_to_async(_begin, thread_sensitive=False)(
                        _client(_conf()), fields, _django_request(request))
                if refusal is not None:
                    return refusal
                return await _arun(call, view, args, kwargs)

            return awrapped

        @functools.wraps(view)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            request = _find_request(args)
            if request is None:
                return view(*args, **kwargs)
            call, refusal = _gate(classify, request)
            if refusal is not None:
                return refusal
            return _run(call, view, args, kwargs)

        return wrapped

    return decorate


def _find_request(args: Any) -> Any:
    for a in args:
        if hasattr(_django_request(a), "META"):
            return a
    return None


def _run(call: Optional[_Call], view: Any, args: Any, kwargs: Any) -> Any:
    if call is None:
        return view(*args, **kwargs)
    try:
        response = view(*args, **kwargs)
    except BaseException:
        call.close()
        raise
    return _attach(call, response)


async def _arun(call: Optional[_Call], view: Any, args: Any, kwargs: Any) -> Any:
    if call is None:
        return await view(*args, **kwargs)
    try:
        response = await view(*args, **kwargs)
    except BaseException:
        call.close()
        raise
    return _attach(call, response)
