"""The OCL classifier: which calls of an OCL API are heavy, written from the
same rules as the capgate gateway's.

- ``POST /concepts/$match/`` (the trailing slash optional) whose query has
  ``semantic`` or ``reranker`` true (the last value of each; true, True or 1,
  any case), and whose body has a non-empty ``rows`` list;
- ``POST /concepts/$rerank/`` whose body has a non-empty ``rows`` list and a
  truthy ``q``.

The app has parsed the request already, so the classifier reads it as the
view does: the path Django routed, DRF's ``request.query_params`` and
``request.data``, and the user DRF (or Django) authenticated. An anonymous
caller's call is not gated (the API refuses it itself), nor is one whose
body the view would reject. ``PATH_PREFIX`` in ``settings.CAPGATE`` names
where the API is mounted inside the app, if not at its root.
"""

import json
import re

__all__ = ["classify"]

_MAX_REQUEST_SOURCE = 50
_MAX_REQUEST_ID = 200


def _truthy(v):
    return v is not None and (v == "1" or str(v).lower() == "true")


def _prefix():
    try:
        from django.conf import settings

        return (getattr(settings, "CAPGATE", None) or {}).get("PATH_PREFIX", "").rstrip("/")
    except Exception:
        return ""


_ENDPOINT = re.compile(r"^/concepts/(\$match|\$rerank)/?$")


def _data(request):
    data = getattr(request, "data", None)
    if data is None and not hasattr(request, "data"):
        # A plain Django request: the body as JSON in its charset.
        body = request.body
        if not body:
            return None
        data = json.loads(body.decode(request.encoding or "utf-8"))
    return data


def _aware(request):
    meta = request.META.get("HTTP_X_OCL_EVENT_METADATA")
    if not meta:
        return False
    try:
        v = json.loads(meta).get("capacity_aware")
    except (ValueError, AttributeError):
        return False
    if isinstance(v, bool):
        v = "true" if v else "false"
    return v is not None and str(v).lower() in ("true", "1")


def classify(request):
    """Returns the call of a heavy OCL request, else None."""
    if request.method.upper() != "POST":
        return None
    path = request.path_info
    prefix = _prefix()
    if prefix:
        if not path.startswith(prefix + "/"):
            return None
        path = path[len(prefix):]
    m = _ENDPOINT.match(path)
    if not m:
        return None
    endpoint = m.group(1)
    semantic = reranker = False
    if endpoint == "$match":
        query = getattr(request, "query_params", None)
        if query is None:
            query = request.GET
        semantic = _truthy(query.get("semantic"))
        reranker = _truthy(query.get("reranker"))
        if not (semantic or reranker):
            return None  # lexical: not heavy
    user = getattr(request, "user", None)
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    try:
        data = _data(request)
    except Exception:
        return None  # the view answers a body it can't parse with 400
    if not hasattr(data, "get"):
        return None
    rows = data.get("rows")
    if not isinstance(rows, list) or not rows:
        return None
    if endpoint == "$rerank" and not data.get("q"):
        return None
    call = {
        "user": user.get_username(),
        "is_staff": bool(getattr(user, "is_staff", False) or getattr(user, "is_superuser", False)),
        "groups": [g.name for g in user.groups.all()] if hasattr(user, "groups") else [],
        "endpoint": endpoint,
        "semantic": semantic,
        "reranker": reranker,
        "rows": len(rows),
        "aware": _aware(request),
    }
    rid = request.META.get("HTTP_X_REQUEST_ID")
    if rid:
        call["request_id"] = rid[:_MAX_REQUEST_ID]
    source = request.META.get("HTTP_X_OCL_REQUEST_SOURCE")
    if source:
        call["request_source"] = source[:_MAX_REQUEST_SOURCE]
    return call
