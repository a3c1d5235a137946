"""The unit tests' views. Each heavy view records its run in RUNS (the
user and the decision the request carried), so a test sees whether the
view ran. The middleware's classifier (classify) names POSTs under /mw/
heavy, with OCL's rules for /concepts/; the per-view classifier
(pv_classify) names any POST with rows heavy."""
import asyncio
import json
import re
import threading

from django.http import JsonResponse
from django.utils.decorators import method_decorator
from django.views import View
from django.views.decorators.csrf import csrf_exempt
from rest_framework import generics, viewsets
from rest_framework.decorators import api_view
from rest_framework.response import Response
from rest_framework.throttling import UserRateThrottle
from rest_framework.views import APIView

from capgate.django import CapacityLimitedMixin, capacity_limited, ocl, repeat_key

RUNS = []
_lock = threading.Lock()


def _rows(request):
    if hasattr(type(request), "data") or "_drf" in vars(request):
        data = request.data
    else:
        data = json.loads(request.body or b"{}")
    rows = data.get("rows") if hasattr(data, "get") else None
    return rows if isinstance(rows, list) and rows else None


def _call(request):
    user = request.user
    if user is None or not user.is_authenticated:
        return None
    rows = _rows(request)
    if rows is None:
        return None
    return {"user": user.get_username(), "groups": [g.name for g in user.groups.all()],
            "is_staff": user.is_staff, "endpoint": "$match", "semantic": True, "rows": len(rows)}


_MW = re.compile(r"^/mw/[a-z_]+/heavy/$")


def classify(request):
    if request.method != "POST":
        return None
    if request.path_info.startswith("/concepts/"):
        return ocl.classify(request)
    if not _MW.match(request.path_info):
        return None
    return _call(request)


def pv_classify(request):
    if request.method != "POST":
        return None
    return _call(request)


def raising_classify(request):
    raise RecursionError("maximum recursion depth exceeded")


def report_classify(request):
    """A policy's own route: POST /mw/<kind>/heavy/ is a "report" call of
    the caller, its rows the report's pages; an Idempotency-Key is its
    repeat_key. X-Test-Route names another route (one the policy lacks),
    X-Test-Field adds a field the classifier should not send."""
    call = _call(request)
    if call is None or not re.match(r"^/(mw|pv)/[a-z_]+/heavy/$", request.path_info):
        return None
    pages = call.pop("rows")
    for k in ("endpoint", "semantic"):
        call.pop(k)
    call.update(route=request.META.get("HTTP_X_TEST_ROUTE", "report"), fields={"pages": pages},
                request_id=request.META.get("HTTP_X_REQUEST_ID"))
    call.update(repeat_key(request))
    if request.META.get("HTTP_X_TEST_FIELD"):
        call["colour"] = "blue"  # no field of the protocol's: Client.call raises TypeError
    return call


def joined_answer(request, decision):
    """An ON_JOINED that waits for the call it repeats, then says so."""
    return JsonResponse({"repeated": decision.dedup_of, "ended": decision.wait(5)}, status=202)


def run(request, kind):
    django_request = getattr(request, "_request", request)
    d = getattr(django_request, "capgate_decision", None)
    with _lock:
        RUNS.append({"kind": kind, "user": request.user.get_username(), "decision": d.decision if d else None})
    return {"ran": kind}


class MatchView(APIView):
    def post(self, request):
        return Response(run(request, "ocl"))


class HeavyAPIView(APIView):
    def post(self, request):
        return Response(run(request, "apiview"))


class HeavyGenericView(generics.GenericAPIView):
    def post(self, request):
        return Response(run(request, "generic"))


class HeavyViewSet(viewsets.ViewSet):
    def create(self, request):
        return Response(run(request, "viewset"))


@api_view(["POST"])
def heavy_drf_function(request):
    return Response(run(request, "drf_function"))


@method_decorator(csrf_exempt, name="dispatch")
class HeavyDjangoView(View):
    def post(self, request):
        return JsonResponse(run(request, "django"))


@csrf_exempt
def heavy_function(request):
    return JsonResponse(run(request, "function"))


async def heavy_async(request):
    user = request.user
    d = getattr(request, "capgate_decision", None)
    with _lock:
        RUNS.append({"kind": "async", "user": user.username if user else None, "decision": d.decision if d else None})
    hold = int(request.META.get("HTTP_X_TEST_HOLD_MS", "0") or 0)
    if hold:
        await asyncio.sleep(hold / 1000)  # held without a thread
    return JsonResponse({"ran": "async"})


class ThrottledView(APIView):
    throttle_classes = [UserRateThrottle]

    def post(self, request):
        return Response(run(request, "throttled"))


# (Django 3.2's csrf_exempt makes an async view sync; the test client
# checks no CSRF anyway.)


# The per-view way: the mixin (or the decorator on the class) for DRF, the
# decorator for functions and plain Django views.

class PVAPIView(CapacityLimitedMixin, APIView):
    capacity_classify = pv_classify

    def post(self, request):
        return Response(run(request, "apiview"))


@capacity_limited(pv_classify)
class PVGenericView(generics.GenericAPIView):
    def post(self, request):
        return Response(run(request, "generic"))


@capacity_limited(pv_classify)
class PVViewSet(viewsets.ViewSet):
    def create(self, request):
        return Response(run(request, "viewset"))


@api_view(["POST"])
@capacity_limited(pv_classify)
def pv_drf_function(request):
    return Response(run(request, "drf_function"))


@method_decorator(csrf_exempt, name="dispatch")
class PVDjangoView(View):
    @capacity_limited(pv_classify)
    def post(self, request):
        return JsonResponse(run(request, "django"))


@csrf_exempt
@capacity_limited(pv_classify)
def pv_function(request):
    return JsonResponse(run(request, "function"))


@capacity_limited(pv_classify)
async def pv_async(request):
    user = request.user
    d = getattr(request, "capgate_decision", None)
    with _lock:
        RUNS.append({"kind": "async", "user": user.username if user else None, "decision": d.decision if d else None})
    return JsonResponse({"ran": "async"})


class PVThrottledView(CapacityLimitedMixin, APIView):
    capacity_classify = pv_classify
    throttle_classes = [UserRateThrottle]

    def post(self, request):
        return Response(run(request, "throttled"))
