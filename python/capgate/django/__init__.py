"""Django and Django REST framework integration.

Settings::

    CAPGATE = {
        "URL": "unix:/run/capgate/decide.sock",  # or http://127.0.0.1:8091
        "TOKEN": None,                     # --decide-token, for TCP
        "CLASSIFY": "myapp.capacity.classify",  # default: capgate.django.ocl.classify
        "TIMEOUT": 0.25,                   # seconds; fail open past it
        "REUSE_AUTHENTICATION": True,      # the view reuses the middleware's DRF authentication
        "ON_JOINED": None,                 # a repeat of a call running: default 409
        "PROMETHEUS": False,               # export capgate.stats() (capgate.prometheus)
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

A classifier gets the request and returns the call — a dict of the
protocol's fields (``capgate.Client.call``): the caller (user, and groups
and is_staff, or tier), the policy's route and its fields
(``{"user": u, "groups": g, "route": "report", "fields": {"pages": 40}}``),
and optionally aware, request_id, request_source, task, and repeat_key and
fingerprint (``repeat_key(request)``) — or None for a call that is not
heavy.

A refused call gets the service's answer — its status (429; 422 for a
repeat_key used for another request), headers and body, in the policy's
names — and the view never runs. A call that repeats one still running
(``joined``) gets ``ON_JOINED(request, decision)``, by default a 409. An
admitted call's response gets the capacity headers, and its place is held
until the response is finished: Django closes it after the last byte,
streaming responses included, and on exceptions and client disconnects.
The request's decision is ``request.capgate_decision``.

Two rules for failures (docs/SECURITY.md): a failing limiter never
refuses — the view runs uncounted (``decision.failed_open``) when the
decision service can't be reached, does not answer within its bound, or
answers something that is no decision; and the caller's side always
counts — a classifier that raises, a request that can't be read, or a call
the service can't take as read is counted as the conservative call
(``conservative_call``: the policy's most expensive reading of the call,
of the caller as identified, else ``(unidentified)``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

from capgate import client as _client_mod
from capgate.client import DEFAULT_TIMEOUT, UNIDENTIFIED, Client, _Call
from capgate.django.answers import JOINED_BODY, JOINED_STATUS, OnJoined, _on_joined, _refusal, joined_conflict, repeat_key
from capgate.django.reading import (
    RequestUnreadable,
    _django_request,
    _drf_request,
    _identified,
    _LazyDRFRequest,
    _reuse_authentication,
)
from capgate.stats import counts, log_once_a_minute

__all__ = [
    "CapacityMiddleware",
    "CapacityLimitedMixin",
    "capacity_limited",
    "conservative_call",
    "repeat_key",
    "joined_conflict",
    "RequestUnreadable",
    "UNIDENTIFIED",
    "JOINED_STATUS",
    "JOINED_BODY",
]


#: A classifier: the request → the call (the protocol's fields), or None.
Classifier = Callable[[Any], Optional[Mapping[str, Any]]]

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
            if conf.get("PROMETHEUS"):
                from capgate import prometheus

                prometheus.register()
        return c


def _classifier(classify: Union[None, str, Classifier], conf: Dict[str, Any]) -> Classifier:
    classify = classify or conf.get("CLASSIFY") or "capgate.django.ocl.classify"
    if isinstance(classify, str):
        from django.utils.module_loading import import_string

        classify = import_string(classify)
    return classify  # type: ignore[return-value]


def _counted_conservative(why: str, err: BaseException) -> None:
    """Counts (and logs, at most once a minute) a call counted as the
    conservative call because of err on the caller's side."""
    counts.add("conservative", why)
    log_once_a_minute("classifier", logging.WARNING,
                      "capgate: the classifier or the request failed; the call is counted as the conservative call: %r",
                      err)


def conservative_call(request: Any, route: Optional[str] = None) -> Dict[str, Any]:
    """The call a request is counted as when its own reading failed (the
    classifier raised, the request could not be read, the service could
    not take the call as read): the policy's most expensive reading of
    route — of the policy's most expensive route without one — as the
    service in force computes it (``capgate.conservative_call``), of the
    caller as identified — with its groups when they can be read, else
    none (the lowest tier) — or of ``(unidentified)``."""
    user, django_request = _identified(request)
    name: Optional[str] = None
    groups: List[str] = []
    is_staff = False
    if user is not None:
        try:
            got = user.get_username()
            if isinstance(got, str):
                name = got
                is_staff = bool(getattr(user, "is_staff", False) or getattr(user, "is_superuser", False))
                groups = [str(g.name) for g in user.groups.all()] if hasattr(user, "groups") else []
        except Exception:
            is_staff, groups = False, []
    rid = None
    try:
        rid = django_request.META.get("HTTP_X_REQUEST_ID")
    except Exception:
        pass
    return _client_mod.conservative_call(name, groups=groups, is_staff=is_staff, route=route, request_id=rid)


def _classify(classify: Classifier, request: Any) -> Optional[Dict[str, Any]]:
    """The classifier's call; when it raises (RecursionError included) or
    returns something else than a dict or None, the conservative call,
    never None: an error is counted, not run."""
    try:
        fields = classify(request)
        if fields is not None and not isinstance(fields, Mapping):
            raise TypeError("capgate classifier returned %r, not a dict or None" % (type(fields).__name__,))
        return dict(fields) if fields is not None else None
    except Exception as e:
        _counted_conservative("unreadable" if isinstance(e, RequestUnreadable) else "classifier", e)
        return conservative_call(request)


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


def _begin(client: Client, call_fields: Dict[str, Any], request: Any,
           on_joined: OnJoined) -> Tuple[Optional[_Call], Any]:
    """Asks the service; returns (call context, the answer instead of the
    view or None)."""
    django_request = _django_request(request)
    try:
        call = client.call(**call_fields)
    except TypeError as e:  # a classifier's unknown or missing field: count the call all the same
        _counted_conservative("classifier", e)
        route = call_fields.get("route")
        call = client.call(**conservative_call(request, route if isinstance(route, str) else None))
    d = call.__enter__()
    django_request.capgate_decision = d
    if d.refused:
        call.close()
        return None, _refusal(d)
    if d.joined:
        try:
            return None, on_joined(request, d)
        finally:
            call.close()
    return call, None


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
        self.on_joined = _on_joined(conf)
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
            _counted_conservative("unreadable", e)
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
        call, refusal = _begin(self.client, fields, request, self.on_joined)
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
        call, refusal = await sync_to_async(_begin, thread_sensitive=False)(self.client, fields, request, self.on_joined)
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
    conf = _conf()
    return _begin(_client(conf), fields, request, _on_joined(conf))


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
                        _client(_conf()), fields, request, _on_joined(_conf()))
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
