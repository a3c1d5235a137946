"""The request as a classifier reads it: the request a DRF view will see
(its authenticators and parsers), made only when the classifier asks for
more than the method, path, query and headers; and the caller as far as
it was identified without asking again."""

from __future__ import annotations

from typing import Any, Optional, Tuple

__all__ = ["RequestUnreadable"]


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



def _django_request(request: Any) -> Any:
    """The Django HttpRequest under a DRF Request (or the request itself)."""
    inner = getattr(request, "__dict__", {}).get("_request")
    return inner if inner is not None else request


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


