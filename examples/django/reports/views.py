"""The example's views: one heavy (POST /report/: render a report of the
pages the body lists, a fake that takes `seconds`, default 1), one light
(GET /reports/)."""
import json
import os
import time
import uuid

from rest_framework.response import Response
from rest_framework.views import APIView

_RECORD = os.environ.get("REPORTS_RECORD")


def _record(line):
    # For the end-to-end test (test/inapp): each run's start and end.
    if _RECORD:
        with open(_RECORD, "a") as f:
            f.write(json.dumps(line) + "\n")


class ReportView(APIView):
    def post(self, request):
        pages = request.data.get("pages") if hasattr(request.data, "get") else None
        if not isinstance(pages, list):
            return Response({"detail": '"pages" must be a list.'}, status=400)
        seconds = request.data.get("seconds", 1)
        seconds = min(max(float(seconds), 0.0), 30.0) if isinstance(seconds, (int, float)) else 1.0
        d = getattr(request._request, "capgate_decision", None)
        run = {"run": uuid.uuid4().hex, "user": request.user.username, "pid": os.getpid(),
               "decision": d.decision if d is not None else None}
        _record(dict(run, ev="start", t=time.monotonic()))
        try:
            time.sleep(seconds)  # rendering
        finally:
            _record(dict(run, ev="end", t=time.monotonic()))
        return Response({"report": "%d pages" % len(pages), "format": request.data.get("format", "pdf")})


class ReportListView(APIView):
    def get(self, request):
        return Response({"reports": []})
