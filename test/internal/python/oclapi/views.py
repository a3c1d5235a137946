"""OCL's heavy views as both suites' sites serve them.

POST /concepts/$match/ and POST /concepts/$rerank/ read
request.query_params and request.data exactly as DRF hands them to OCL's
views and decide whether the heavy work runs; the heavy run itself is the
site's: as_view(heavy=f) calls f(request, endpoint, rows), which records the
run and returns the response.
"""
from rest_framework.response import Response
from rest_framework.views import APIView

# OCL's truthy query values (get_truthy_values): exact strings, no folding.
TRUTHY = ["true", "True", 1, "1", True]


def hold_seconds(request, most_ms):
    """X-Test-Hold-Ms, in seconds, at most most_ms."""
    try:
        return min(max(int(request.META.get("HTTP_X_TEST_HOLD_MS", "0")), 0), most_ms) / 1000
    except ValueError:
        return 0


def rows(request):
    """The body's non-empty list of rows, or None."""
    try:
        found = request.data.get("rows")
    except AttributeError:  # a body that is no JSON object
        return None
    if not isinstance(found, list) or not found:
        return None
    return found


def no_rows():
    return Response({"detail": 'Invalid or missing "rows" in request body.'}, status=400)


class MatchView(APIView):
    heavy = None  # the site's heavy run: as_view(heavy=f)

    def post(self, request):
        semantic = request.query_params.get("semantic", None) in TRUTHY
        reranker = request.query_params.get("reranker", None) in TRUTHY
        found = rows(request)
        if found is None:
            return no_rows()
        if not (semantic or reranker):
            return Response({"results": [], "rows": len(found), "endpoint": "lexical"})
        return self.heavy(request, "$match", len(found))


class RerankView(APIView):
    heavy = None  # the site's heavy run: as_view(heavy=f)

    def post(self, request):
        found = rows(request)
        if found is None:
            return no_rows()
        if not request.data.get("q"):
            return Response({"detail": 'Missing "q" in request body.'}, status=400)
        return self.heavy(request, "$rerank", len(found))
