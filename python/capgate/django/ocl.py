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
caller's call is not gated (the API refuses it itself: DRF's
authenticators refuse a bad token), nor is one whose body the view rejects
(a parse error: 400). Anything else that goes wrong raises, and the
middleware gates the call as the most conservative one. ``PATH_PREFIX`` in
``settings.CAPGATE`` names where the API is mounted inside the app, if not
at its root.

``X-OCL-Event-Metadata`` is read within bounds (at most 8 KiB, nested at
most 32 deep); past them, or malformed, it says nothing (not
capacity-aware), as the gateway reads it.
"""

from __future__ import annotations

import json
import re
from typing import Any, Dict, Optional, Tuple, Type

__all__ = ["classify"]

_MAX_REQUEST_SOURCE = 50
_MAX_REQUEST_ID = 200
_MAX_METADATA = 8 << 10
_MAX_METADATA_DEPTH = 32


def _truthy(v: Any) -> bool:
    return v is not None and (v == "1" or str(v).lower() == "true")


def _prefix() -> str:
    try:
        from django.conf import settings

        return str((getattr(settings, "CAPGATE", None) or {}).get("PATH_PREFIX", "")).rstrip("/")
    except Exception:
        return ""


_ENDPOINT = re.compile(r"^/concepts/(\$match|\$rerank)/?$")


def _rejected() -> Tuple[Type[BaseException], ...]:
    """The errors with which the view itself rejects the request: a body
    it can't parse (400, 415), a caller DRF's authenticators refuse (401)."""
    try:
        from rest_framework import exceptions

        return (ValueError, exceptions.ParseError, exceptions.UnsupportedMediaType,
                exceptions.AuthenticationFailed, exceptions.NotAuthenticated)
    except ImportError:  # plain Django
        return (ValueError,)


def _data(request: Any) -> Any:
    if _is_drf(request):
        return request.data  # DRF's parse, as the view gets it
    # A plain Django request: the body as JSON in its charset.
    body = request.body
    if not body:
        return None
    return json.loads(body.decode(request.encoding or "utf-8"))


def _is_drf(request: Any) -> bool:
    """A DRF request (or the middleware's lazy one) has data; a Django
    HttpRequest has not. Asked of the type, so that asking never parses nor
    hides an error (hasattr would call the property)."""
    from capgate.django.reading import _LazyDRFRequest

    return isinstance(request, _LazyDRFRequest) or hasattr(type(request), "data")


def _depth(text: str) -> int:
    """How deep text's JSON nests (strings skipped), counted without
    parsing it, so that a header of thousands of "[" costs a scan, not a
    RecursionError."""
    depth = most = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > most:
                most = depth
        elif ch in "]}":
            depth -= 1
    return most


def _aware(request: Any) -> bool:
    meta = request.META.get("HTTP_X_OCL_EVENT_METADATA")
    if not meta or len(meta) > _MAX_METADATA or _depth(meta) > _MAX_METADATA_DEPTH:
        return False
    try:
        parsed = json.loads(meta)
    except (ValueError, RecursionError):
        return False
    if not isinstance(parsed, dict):
        return False
    v = parsed.get("capacity_aware")
    if isinstance(v, bool):
        v = "true" if v else "false"
    return v is not None and str(v).lower() in ("true", "1")


def classify(request: Any) -> Optional[Dict[str, Any]]:
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
        query = request.query_params if _is_drf(request) else request.GET
        semantic = _truthy(query.get("semantic"))
        reranker = _truthy(query.get("reranker"))
        if not (semantic or reranker):
            return None  # lexical: not heavy
    try:
        user = request.user
    except _rejected():
        return None  # the view answers 401 itself
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    try:
        data = _data(request)
    except _rejected():
        return None  # the view answers a body it can't parse with 400
    if not hasattr(data, "get"):
        return None
    rows = data.get("rows")
    if not isinstance(rows, list) or not rows:
        return None
    if endpoint == "$rerank" and not data.get("q"):
        return None
    call: Dict[str, Any] = {
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
