"""Django and Django REST framework integration.

Settings::

    CAPGATE = {
        "URL": "unix:/run/capgate.sock",   # or http://127.0.0.1:8091
        "TOKEN": None,                     # --decide-token, for TCP
        "CLASSIFY": "capgate.django.ocl.classify",
        "TIMEOUT": 0.25,                   # seconds; fail open past it
        "REUSE_AUTHENTICATION": True,      # the view reuses the middleware's DRF authentication
    }

``CapacityMiddleware`` (after AuthenticationMiddleware) gates every view the
classifier names heavy; ``@capacity_limited(classify)`` gates one view (a
function view, or a DRF view's method, where request.user and request.data
are DRF's). A classifier gets the request and returns the call (a dict of
the protocol's fields: user, groups and is_staff or tier, endpoint,
semantic, reranker, rows, aware, request_id, request_source) or None.

A refused call gets the service's 429 as a JsonResponse and the view never
runs. An admitted call's response gets the capacity headers, and its place
is held until the response is finished: Django closes it after the last
byte, streaming responses included, and on exceptions and client
disconnects. The request's decision is ``request.capgate_decision``.
Anything wrong with the service fails open: the view runs.
"""

import functools
import logging
import threading
import time

from capgate.client import DEFAULT_TIMEOUT, MISS_LOG_INTERVAL, Client

__all__ = ["CapacityMiddleware", "capacity_limited"]

logger = logging.getLogger("capgate")

_clients = {}
_clients_lock = threading.Lock()


def _conf():
    from django.conf import settings

    conf = dict(getattr(settings, "CAPGATE", None) or {})
    if not conf.get("URL"):
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured('settings.CAPGATE["URL"] is required: the capgate decision service')
    return conf


def _client(conf):
    key = (conf["URL"], conf.get("TOKEN"), float(conf.get("TIMEOUT", DEFAULT_TIMEOUT)))
    with _clients_lock:
        c = _clients.get(key)
        if c is None:
            c = _clients[key] = Client(key[0], token=key[1], timeout=key[2])
        return c


def _classifier(classify, conf):
    classify = classify or conf.get("CLASSIFY") or "capgate.django.ocl.classify"
    if isinstance(classify, str):
        from django.utils.module_loading import import_string

        classify = import_string(classify)
    return classify


class _Misses:
    """Logs a classifier's failures at most once a minute."""

    def __init__(self):
        self._lock = threading.Lock()
        self._last = None

    def log(self, err):
        now = time.monotonic()
        with self._lock:
            if self._last is not None and now - self._last < MISS_LOG_INTERVAL:
                return
            self._last = now
        logger.warning("capgate: the classifier failed; the call runs unlimited (fail open): %r", err)


_misses = _Misses()


def _classify(classify, request):
    try:
        return classify(request)
    except Exception as e:  # a classifier's bug never fails the call
        _misses.log(e)
        return None


def _django_request(request):
    """The Django HttpRequest under a DRF Request (or the request itself)."""
    return getattr(request, "_request", request)


def _refusal(decision):
    from django.http import JsonResponse

    body = decision.body if decision.body is not None else {"detail": "Matching is busy. Please retry."}
    resp = JsonResponse(body, status=decision.status or 429)
    for k, v in decision.headers.items():
        resp[k] = v
    return resp


def _attach(call, response):
    """Adds the capacity headers to response and ends call when response
    is closed (after its last byte, or when the client went away)."""
    d = call.decision
    if not d.failed_open:
        for k, v in d.headers.items():
            response[k] = v
    closers = getattr(response, "_resource_closers", None)
    if closers is not None:
        closers.append(call.close)
    else:  # pragma: no cover - Django before 3.0
        close = response.close

        def closing():
            try:
                close()
            finally:
                call.close()

        response.close = closing
    return response


def _begin(client, call_fields, django_request):
    """Asks the service; returns (call context, refusal response or None)."""
    call = client.call(**call_fields)
    d = call.__enter__()
    django_request.capgate_decision = d
    if d.refused:
        call.close()
        return None, _refusal(d)
    return call, None


# What a classifier may read of the request without DRF being asked: the
# method, the path, the query and the headers.
_PLAIN = frozenset(("method", "path", "path_info", "META", "GET", "headers", "COOKIES", "scheme", "get_full_path"))


def _keep_body(request):
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

    def __init__(self, request, view_func, view_args, view_kwargs):
        self._request = request
        self._view = (view_func, view_args, view_kwargs)
        self._drf = None

    def drf(self):
        if self._drf is None:
            view_func, args, kwargs = self._view
            request = self._request
            if request.method not in ("GET", "HEAD", "OPTIONS"):
                _keep_body(request)
            view = view_func.cls(**(getattr(view_func, "initkwargs", None) or {}))
            view.args, view.kwargs, view.request = args, kwargs, request
            view.format_kwarg = None
            self._drf = view.initialize_request(request, *args, **kwargs)
        return self._drf

    def __getattr__(self, name):
        if name in _PLAIN:
            return getattr(self._request, name)
        return getattr(self.drf(), name)


def _drf_request(request, view_func, view_args, view_kwargs):
    """The request for the classifier: a lazy DRF request for a DRF view,
    else the Django request."""
    cls = getattr(view_func, "cls", None)
    if cls is None or not hasattr(cls, "initialize_request"):
        return request
    return _LazyDRFRequest(request, view_func, view_args, view_kwargs)


def _reuse_authentication(request, lazy):
    """Hands the user the view's own authenticators found (for the
    classifier) to the view, so it does not authenticate the request a second
    time (a token lookup: about half of what the middleware adds to a call).
    Only a user that authenticated is handed on; DRF takes it as forced
    authentication."""
    drf_request = getattr(lazy, "_drf", None)
    user = getattr(drf_request, "_user", None)
    if user is None or not getattr(user, "is_authenticated", False):
        return
    request._force_auth_user = user
    request._force_auth_token = getattr(drf_request, "_auth", None)


class CapacityMiddleware:
    """Gates the views the CAPGATE["CLASSIFY"] classifier names heavy."""

    def __init__(self, get_response):
        self.get_response = get_response
        conf = _conf()
        self.client = _client(conf)
        self.classify = _classifier(None, conf)
        self.reuse_auth = conf.get("REUSE_AUTHENTICATION", True)

    def __call__(self, request):
        try:
            response = self.get_response(request)
        except BaseException:
            self._end(request)
            raise
        call = getattr(request, "_capgate_call", None)
        if call is None:
            return response
        request._capgate_call = None
        return _attach(call, response)

    @staticmethod
    def _end(request):
        call = getattr(request, "_capgate_call", None)
        if call is not None:
            request._capgate_call = None
            call.close()

    def process_view(self, request, view_func, view_args, view_kwargs):
        if getattr(request, "_capgate_call", None) is not None:
            return None
        try:
            req = _drf_request(request, view_func, view_args, view_kwargs)
        except Exception as e:
            _misses.log(e)
            return None
        fields = _classify(self.classify, req)
        if self.reuse_auth and isinstance(req, _LazyDRFRequest):
            _reuse_authentication(request, req)
        if not fields:
            return None
        call, refusal = _begin(self.client, fields, request)
        if refusal is not None:
            return refusal
        request._capgate_call = call
        return None


def capacity_limited(classify=None):
    """Gates one view: a function view, or a method of a DRF view (then the
    classifier gets DRF's request). classify is a callable or a dotted path;
    default CAPGATE["CLASSIFY"]. A call the middleware already gates is left
    to it."""

    def decorate(view):
        @functools.wraps(view)
        def wrapped(*args, **kwargs):
            request = next((a for a in args if hasattr(_django_request(a), "META")), None)
            if request is None:
                return view(*args, **kwargs)
            django_request = _django_request(request)
            if getattr(django_request, "_capgate_call", None) is not None:
                return view(*args, **kwargs)
            conf = _conf()
            fields = _classify(_classifier(classify, conf), request)
            if not fields:
                return view(*args, **kwargs)
            call, refusal = _begin(_client(conf), fields, django_request)
            if refusal is not None:
                return refusal
            try:
                response = view(*args, **kwargs)
            except BaseException:
                call.close()
                raise
            return _attach(call, response)

        return wrapped

    return decorate
