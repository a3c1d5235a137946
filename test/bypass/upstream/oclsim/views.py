"""The API surface capgate stands in front of, as OCL behaves.

GET /user/?includeAuthGroups=true answers who is calling. POST
/concepts/$match/ and POST /concepts/$rerank/ are OCL's views (oclapi.views)
around run_heavy, which records every heavy run (who, the X-Request-ID
capgate forwarded, and how many heavy runs of that user were in flight at
its start) to BYPASS_RECORD before holding the call for X-Test-Hold-Ms.
"""
import json
import os
import threading
import time

from rest_framework.response import Response
from rest_framework.views import APIView

from oclapi.views import TRUTHY, hold_seconds

_lock = threading.Lock()
_in_flight = {}  # username -> heavy runs in flight
_total = [0]


def run_heavy(request, endpoint, rows):
    """Records one heavy run, then holds it."""
    user = request.user.username
    with _lock:
        _in_flight[user] = _in_flight.get(user, 0) + 1
        _total[0] += 1
        line = {
            "cid": request.META.get("HTTP_X_REQUEST_ID", ""),
            "case": request.META.get("HTTP_X_TEST_CASE", ""),
            "user": user,
            "staff": bool(request.user.is_staff or request.user.is_superuser),
            "endpoint": endpoint,
            "rows": rows,
            "user_in_flight": _in_flight[user],
            "in_flight": _total[0],
            "method": request.META.get("REQUEST_METHOD"),
            "path": request.path_info,
            "t": time.time(),
        }
        with open(os.environ["BYPASS_RECORD"], "a") as f:
            f.write(json.dumps(line) + "\n")
    try:
        time.sleep(hold_seconds(request, 10000))
    finally:
        with _lock:
            _in_flight[user] -= 1
            _total[0] -= 1
    return Response({"results": [], "rows": rows, "endpoint": endpoint})


class UserView(APIView):
    def get(self, request):
        u = request.user
        body = {"username": u.username, "is_staff": u.is_staff, "is_superuser": u.is_superuser}
        if request.query_params.get("includeAuthGroups") in TRUTHY:
            body["auth_groups"] = sorted(g.name for g in u.groups.all())
        return Response(body)

