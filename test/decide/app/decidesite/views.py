"""The decision suite's heavy run behind OCL's views (oclapi.views), and a
DRF view gated by @capacity_limited on its class.

Each heavy run is recorded to DECIDE_RECORD: a "start" line when the view
begins the heavy work and an "end" line when it is done (for a streamed
response, after its last chunk), with the user, the capgate decision the
middleware attached, the request id, the process and a monotonic clock
shared by every process of the machine. X-Test-Hold-Ms holds the call;
X-Test-Stream: n streams the answer in n chunks spread over the hold.
"""
import json
import os
import time
import uuid

from django.http import StreamingHttpResponse
from rest_framework import viewsets
from rest_framework.response import Response
from rest_framework.views import APIView

from capgate.django import capacity_limited, repeat_key
from oclapi.views import RerankView, hold_seconds, no_rows, rows


def _record(line):
    with open(os.environ["DECIDE_RECORD"], "a") as f:
        f.write(json.dumps(line) + "\n")


def run_heavy(request, endpoint, nrows):
    meta = request.META
    d = getattr(request, "capgate_decision", None)
    if d is None:
        d = getattr(getattr(request, "_request", None), "capgate_decision", None)
    run = {
        "run": uuid.uuid4().hex,
        "user": request.user.username,
        "endpoint": endpoint,
        "rows": nrows,
        "decision": d.decision if d is not None else "",
        "cid": (d.headers.get("X-Request-Id", "") if d is not None else ""),
        "case": meta.get("HTTP_X_TEST_CASE", ""),
        "host": os.environ.get("DECIDE_HOST", ""),
        "pid": os.getpid(),
    }
    now = time.monotonic()
    t0 = getattr(request, "decide_t0", None)
    # How long the middlewares took between deciding to run this view and
    # running it: the limiter's delay.
    run["delay"] = now - t0 if t0 is not None else None
    _record(dict(run, ev="start", t=now))
    hold = hold_seconds(request, 30000)
    if meta.get("HTTP_X_TEST_RAISE"):
        try:
            raise RuntimeError("the view failed mid-call (X-Test-Raise)")
        finally:
            _record(dict(run, ev="end", t=time.monotonic()))
    chunks = int(meta.get("HTTP_X_TEST_STREAM", "0") or 0)
    if chunks > 0:
        def stream():
            try:
                for i in range(chunks):
                    yield (json.dumps({"chunk": i}) + "\n").encode()
                    time.sleep(hold / chunks)
            finally:
                _record(dict(run, ev="end", t=time.monotonic()))

        return StreamingHttpResponse(stream(), content_type="application/x-ndjson")
    try:
        time.sleep(hold)
    finally:
        _record(dict(run, ev="end", t=time.monotonic()))
    return Response({"results": [], "rows": nrows, "endpoint": endpoint})


def v2_classify(request):
    """The decorated view's classifier: any authenticated caller's call with
    rows is a heavy $match (the view is mounted where the OCL classifier,
    and so the middleware, does not look), named by its route and fields;
    the caller's Idempotency-Key, as sent, is its repeat_key (one the
    service can't take gets the call counted as the conservative call)."""
    user = request.user
    if user is None or not user.is_authenticated:
        return None
    found = rows(request)
    if found is None:
        return None
    call = {"user": user.username, "is_staff": user.is_staff, "groups": [g.name for g in user.groups.all()],
            "route": "match", "fields": {"semantic": True, "rows": len(found)},
            "request_id": request.META.get("HTTP_X_REQUEST_ID")}
    call.update(repeat_key(request))
    return call


@capacity_limited(v2_classify)
class DecoratedMatchView(APIView):
    """A DRF view gated the way the README recommends: @capacity_limited on
    the class, deciding after authentication and permissions and before the
    throttles; the classifier gets DRF's request."""

    def post(self, request):
        found = rows(request)
        if found is None:
            return no_rows()
        return run_heavy(request, "$match", len(found))


class RerankViewSet(viewsets.ViewSet):
    """OCL's $rerank view (oclapi.views.RerankView) as a ViewSet action."""

    heavy = None  # as_view(actions, heavy=f)

    def create(self, request):
        return RerankView.post(self, request)
