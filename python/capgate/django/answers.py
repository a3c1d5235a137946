"""What the app answers instead of running a call: the service's refusal,
and a repeat of a call still running (its repeat_key, from the caller's
Idempotency-Key: ``repeat_key``)."""

from __future__ import annotations

from typing import Any, Callable, Dict, Mapping

from capgate.client import Decision
from capgate.django.reading import _django_request

__all__ = ["joined_conflict", "repeat_key", "JOINED_STATUS", "JOINED_BODY"]

#: What answers a call that repeats one still running: (request, its
#: decision) → the response.
OnJoined = Callable[[Any, Decision], Any]


def _refusal(decision: Decision) -> Any:
    """The service's answer to a call it refused: its status, headers and
    body (the policy's words; Decision.from_line checked they are there)."""
    from django.http import JsonResponse

    resp = JsonResponse(decision.body, status=decision.status or 429)
    for k, v in decision.headers.items():
        resp[k] = v
    return resp


#: The default answer to a call that repeats one still running.
JOINED_STATUS = 409
JOINED_BODY = {"detail": "This call repeats one still running; retry once it has finished.",
               "error_code": "idempotency_key_in_use"}


def joined_conflict(request: Any, decision: Decision) -> Any:
    """The default ON_JOINED: 409, with the decision's headers (its
    X-Request-Id) and Retry-After: 1. The call it repeats runs on; the
    caller asks again later (and, with the same key, joins it again until
    it has finished)."""
    from django.http import JsonResponse

    resp = JsonResponse(dict(JOINED_BODY, dedup_of=decision.dedup_of), status=JOINED_STATUS)
    for k, v in decision.headers.items():
        resp[k] = v
    resp["Retry-After"] = "1"
    return resp


def _on_joined(conf: Mapping[str, Any]) -> OnJoined:
    hook = conf.get("ON_JOINED") or joined_conflict
    if isinstance(hook, str):
        from django.utils.module_loading import import_string

        hook = import_string(hook)
    return hook  # type: ignore[no-any-return]


def repeat_key(request: Any, header: str = "Idempotency-Key") -> Dict[str, str]:
    """The repeat_key and fingerprint of a request that sends header (its
    client's idempotency key), for a classifier to add to its call
    (``call.update(repeat_key(request))``); {} without one. The key is the
    header as sent, a quoted one unquoted; the fingerprint is a SHA-256 of
    the method, the path, the query, the body and the Content-Type: the same
    key with another request is ``reused`` (422). A key the service can't
    take (not 1 to 255 visible ASCII characters) gets the call counted as
    the conservative call."""
    import hashlib

    django_request = _django_request(request)
    meta = django_request.META
    key = meta.get("HTTP_" + header.upper().replace("-", "_"))
    if not key:
        return {}
    if len(key) >= 2 and key[0] == key[-1] == '"':
        key = key[1:-1]
    h = hashlib.sha256()
    for part in (django_request.method or "", django_request.path, meta.get("QUERY_STRING", ""),
                 meta.get("CONTENT_TYPE", "")):
        h.update(part.encode("utf-8", "surrogatepass") + b"\0")
    h.update(hashlib.sha256(django_request.body).digest())
    return {"repeat_key": key, "fingerprint": h.hexdigest()}


