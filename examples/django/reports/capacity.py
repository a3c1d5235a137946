"""The app's classifier: which of its calls are heavy, named by the
policy's route and fields (policy.yaml).

The middleware hands it the request as the DRF view will see it (its
authenticators and parser: request.user, request.data). It returns the
call, or None when the call is not heavy — here, when the view will refuse
it itself (no valid token: 401; a body DRF can't parse: 400), so nothing
heavy runs. If it raises, the middleware counts the call as the policy's
most expensive reading of the caller, never uncounted.
"""
from rest_framework import exceptions

from capgate.django import repeat_key

_REJECTED = (exceptions.AuthenticationFailed, exceptions.NotAuthenticated, exceptions.ParseError,
             exceptions.UnsupportedMediaType)


def classify(request):
    if request.method != "POST" or request.path_info != "/report/":
        return None
    try:
        user = request.user
        data = request.data
    except _REJECTED:
        return None  # the view answers 401, 400 or 415 itself
    if user is None or not user.is_authenticated:
        return None
    pages = data.get("pages") if hasattr(data, "get") else None
    fmt = data.get("format") if hasattr(data, "get") else None
    call = {
        "user": user.get_username(),
        "is_staff": user.is_staff,
        "groups": [g.name for g in user.groups.all()],
        "route": "report",
        "fields": {"pages": len(pages) if isinstance(pages, list) else 0,
                   "format": fmt if isinstance(fmt, str) else ""},
        "request_id": request.META.get("HTTP_X_REQUEST_ID"),
    }
    # A client's Idempotency-Key: a retry of a report still rendering is
    # not rendered twice (the service answers "joined": 409 here).
    call.update(repeat_key(request))
    return call
