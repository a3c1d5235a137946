"""The middleware and the per-view gate against the decision stub, through
Django's test client: every kind of view is gated, a classifier's error is
counted, a capacity refusal spends no DRF throttle allowance, async views
are gated."""
import json
import os

import pytest
from asgiref.sync import async_to_sync

import capgate
from django.test import AsyncClient, Client

from testsite import views
from testsite.urls import KINDS

BODY = json.dumps({"rows": [{"name": "fever"}]})
WAYS = ["mw", "pv"]


def post(client, path, user=None, session=False, **headers):
    extra = {"HTTP_" + k.upper().replace("-", "_"): v for k, v in headers.items()}
    if user is not None and not session:
        extra["HTTP_AUTHORIZATION"] = "Token " + user.token
    return client.post(path, BODY, content_type="application/json", **extra)


def session_client(user):
    c = Client()
    c.force_login(user)
    return c


def login_kind(kind):
    """Plain Django views see the session's user; DRF views the token's."""
    return kind in ("django", "function")


def ask(kind, way, user):
    if login_kind(kind):
        return post(session_client(user), "/%s/%s/heavy/" % (way, kind), user, session=True)
    return post(Client(), "/%s/%s/heavy/" % (way, kind), user)


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_of_view_is_gated(stub, users, kind, way):
    # A ViewSet route ran ungated through the middleware (issue 28, finding
    # 3: AttributeError on action_map hidden by __getattr__).
    stub.limits(paused=0)
    r = ask(kind, way, users["paused"])
    assert r.status_code == 429, r.content
    assert r["X-Ocl-Capacity-Decision"] == "refused"
    assert r.json()["scope"] == "user"
    assert views.RUNS == []

    r = ask(kind, way, users["free"])
    assert r.status_code == 200, r.content
    assert r["X-Ocl-Capacity-Decision"] == "admitted"
    assert [run["kind"] for run in views.RUNS] == [kind]
    assert views.RUNS[0]["decision"] == "admitted"
    assert [c["user"] for c in stub.calls()] == ["paused", "free"]
    assert stub.wait_released() == {}


@pytest.mark.parametrize("way", WAYS)
def test_async_views_are_gated(stub, users, way):
    stub.limits(paused=0)
    for name, want in (("paused", 429), ("free", 200)):
        c = AsyncClient()
        c.force_login(users[name])

        async def go():
            return await c.post("/%s/async/heavy/" % way, BODY, content_type="application/json")

        r = async_to_sync(go)()
        assert r.status_code == want, r.content
    assert [run["user"] for run in views.RUNS] == ["free"]
    assert stub.wait_released() == {}


def test_a_classifier_that_raises_is_gated_as_the_most_conservative_call(stub, users, settings):
    settings.CAPGATE = dict(settings.CAPGATE, CLASSIFY="testsite.views.raising_classify")
    stub.limits(paused=0, **{"(unidentified)": 0})
    # A session user is identified without the classifier: its own lane.
    r = post(session_client(users["paused"]), "/mw/function/heavy/", session=True)
    assert r.status_code == 429
    # A token user the classifier never authenticated: (unidentified).
    r = post(Client(), "/mw/apiview/heavy/", users["free"])
    assert r.status_code == 429
    assert views.RUNS == []
    calls = stub.calls()
    # The conservative call: the service reads it at the policy's most
    # expensive (decide's tests check how); nothing of OCL's here.
    assert calls == [{"user": "paused", "is_staff": False, "conservative": True},
                     {"user": "(unidentified)", "is_staff": False, "conservative": True}]
    assert capgate.stats()["conservative"]["classifier"] >= 2


def test_deep_event_metadata_is_read_within_bounds(stub, users):
    # ~3,000 "[" raised RecursionError in the OCL classifier, which the
    # middleware swallowed: the paused user's call ran (issue 28, finding 1).
    stub.limits(paused=0)
    for meta in ("[" * 3000, "[" * 3000 + "]" * 3000, '{"capacity_aware": true, "x": "' + "a" * 20000 + '"}',
                 '{"a":' * 200 + "1" + "}" * 200):
        r = post(Client(), "/concepts/$match/?semantic=true", users["paused"], **{"X-OCL-Event-Metadata": meta})
        assert r.status_code == 429, (meta[:20], r.content)
    assert views.RUNS == []
    assert [c["aware"] for c in stub.calls()] == [False] * 4
    r = post(Client(), "/concepts/$match/?semantic=true", users["paused"],
             **{"X-OCL-Event-Metadata": '{"capacity_aware": "True"}'})
    assert r.status_code == 429
    assert stub.calls()[-1]["aware"] is True


def test_a_request_the_middleware_cannot_read_is_gated(stub, users, monkeypatch):
    # Building the view's DRF request fails: never an AttributeError read
    # as "no user" (which let the call pass), the call is gated.
    from rest_framework.views import APIView

    def broken(self, request, *args, **kwargs):
        raise AttributeError("action_map")

    stub.limits(**{"(unidentified)": 0})
    monkeypatch.setattr(APIView, "initialize_request", broken)
    r = post(Client(), "/mw/apiview/heavy/", users["free"])
    assert r.status_code == 429
    assert views.RUNS == []


def test_an_unreachable_service_fails_open(users, settings):
    settings.CAPGATE = dict(settings.CAPGATE, URL="unix:/nonexistent/capgate.sock")
    r = post(Client(), "/mw/viewset/heavy/", users["paused"])
    assert r.status_code == 200
    assert "X-Ocl-Capacity-Decision" not in r
    assert views.RUNS[0]["decision"] == "failed-open"


@pytest.mark.parametrize("path", ["/mw/throttled/heavy/", "/pv/throttled/heavy/"])
def test_a_capacity_refusal_spends_no_throttle_allowance(stub, users, path):
    # UserRateThrottle 3/min: five refusals while paused, then the pause
    # lifts and the user still has all three calls (issue 29).
    stub.limits(paused=0)
    for _ in range(5):
        r = post(Client(), path, users["paused"])
        assert r.status_code == 429
        assert r["X-Ocl-Capacity-Decision"] == "refused"
    stub.limits()
    for _ in range(3):
        r = post(Client(), path, users["paused"])
        assert r.status_code == 200, r.content
        assert r["X-Ocl-Capacity-Decision"] == "admitted"
    # The throttle's own 429 is not capgate's: no capacity decision, and
    # the call's place is given back at once.
    r = post(Client(), path, users["paused"])
    assert r.status_code == 429
    assert "X-Ocl-Capacity-Decision" not in r
    assert "throttled" in r.json()["detail"].lower()
    assert len(views.RUNS) == 3
    assert stub.wait_released() == {}


def test_an_admitted_call_holds_its_place_until_the_response_is_closed(stub, users):
    r = post(Client(), "/mw/apiview/heavy/", users["one"])
    assert r.status_code == 200
    # The test client closes the response before handing it back.
    assert stub.wait_released() == {}
    assert stub.stats()["max"] == {"one": 1}


REPORT = "testsite.views.report_classify"


def test_a_policys_own_route_and_fields(stub, users, settings):
    # A non-OCL policy's call (issue 40: every call answered 503).
    settings.CAPGATE = dict(settings.CAPGATE, CLASSIFY=REPORT)
    stub.limits(paused=0, _routes=["report"], _prefix="Capgate-")
    r = post(Client(), "/mw/apiview/heavy/", users["free"])
    assert r.status_code == 200, r.content
    assert r["Capgate-Decision"] == "admitted"
    assert "X-Ocl-Capacity-Decision" not in r
    r = post(Client(), "/mw/apiview/heavy/", users["paused"])
    assert (r.status_code, r["Capgate-Decision"], r.json()["error_code"]) == (429, "refused", "capacity_exceeded")
    assert [c.get("route") for c in stub.calls()] == ["report", "report"]
    assert stub.calls()[0]["fields"] == {"pages": 1}
    assert [run["user"] for run in views.RUNS] == ["free"]


@pytest.mark.parametrize("way", WAYS)
def test_a_call_the_service_cannot_take_is_counted_as_the_conservative_call(stub, users, settings, way):
    # The service answers 400 (a route its policy lacks), or the classifier
    # names a field the protocol lacks: the caller's side counts — as the
    # conservative call of the caller as identified — never uncounted.
    settings.CAPGATE = dict(settings.CAPGATE, CLASSIFY=REPORT)
    stub.limits(paused=0, _routes=["report"])
    path = "/%s/apiview/heavy/" % way
    classify = None if way == "mw" else REPORT
    if classify:
        settings.CAPGATE = dict(settings.CAPGATE, CLASSIFY="testsite.views.classify")
        views.PVAPIView.capacity_classify = staticmethod(views.report_classify)
    try:
        for extra in ({"X-Test-Route": "reprot"}, {"X-Test-Field": "1"}):
            r = post(Client(), path, users["paused"], **extra)
            assert r.status_code == 429, (extra, r.content)
        r = post(Client(), path, users["free"], **{"X-Test-Route": "reprot", "X-Request-ID": "rid-7"})
        assert r.status_code == 200
        assert r.wsgi_request.capgate_decision.conservative
    finally:
        views.PVAPIView.capacity_classify = staticmethod(views.pv_classify)
    calls = stub.calls()
    assert [c["user"] for c in calls if c.get("conservative")] == ["paused", "paused", "free"]
    assert calls[-1] == {"user": "free", "is_staff": False, "route": "reprot",
                         "request_id": "rid-7", "conservative": True}
    assert [run["user"] for run in views.RUNS] == ["free"]


@pytest.mark.parametrize("status", [500, 503, 502, 401])
def test_a_failing_service_fails_open(stub, users, status):
    # A failing limiter never refuses (issue 40: a 503 from the service
    # refused every heavy call).
    stub.limits(paused=0, _status=status)
    r = post(Client(), "/mw/viewset/heavy/", users["paused"])
    assert r.status_code == 200, r.content
    assert "X-Ocl-Capacity-Decision" not in r
    d = r.wsgi_request.capgate_decision
    assert (d.decision, d.failed_open, d.reason) == ("failed-open", True, "status")


def test_a_repeat_of_a_call_running_is_not_run(stub, users, settings):
    settings.CAPGATE = dict(settings.CAPGATE, CLASSIFY=REPORT)
    stub.limits(_running=["key-1"])
    r = post(Client(), "/mw/apiview/heavy/", users["free"], **{"Idempotency-Key": '"key-1"', "X-Request-ID": "r2"})
    assert r.status_code == 409
    assert r.json()["error_code"] == "idempotency_key_in_use"
    assert (r["Retry-After"], r["X-Request-Id"]) == ("1", "r2")
    call = stub.calls()[-1]
    assert call["repeat_key"] == "key-1" and len(call["fingerprint"]) == 64
    assert views.RUNS == []
    # An app's own answer: wait for the call it repeats, then look for its result.
    settings.CAPGATE = dict(settings.CAPGATE, ON_JOINED="testsite.views.joined_answer")
    r = post(Client(), "/mw/apiview/heavy/", users["free"], **{"Idempotency-Key": "key-1"})
    assert (r.status_code, r.json()) == (202, {"repeated": "first-call", "ended": "finished"})
    # Another key runs.
    r = post(Client(), "/mw/apiview/heavy/", users["free"], **{"Idempotency-Key": "key-2"})
    assert r.status_code == 200
    assert [run["user"] for run in views.RUNS] == ["free"]


def test_the_same_key_and_request_have_the_same_fingerprint(rf):
    from capgate.django import repeat_key

    def key(body, path="/r/"):
        return repeat_key(rf.post(path, body, content_type="application/json", HTTP_IDEMPOTENCY_KEY="k"))

    assert key("{}") == key("{}")
    assert key("{}")["fingerprint"] != key("[]")["fingerprint"]
    assert key("{}")["fingerprint"] != key("{}", "/s/")["fingerprint"]
    assert repeat_key(rf.post("/r/", "{}", content_type="application/json")) == {}


def test_stats_are_exported_to_prometheus(stub, users, settings):
    try:
        import prometheus_client
    except ImportError:  # pragma: no cover
        msg = "prometheus_client is missing (scripts/python-deps.sh installs python3-prometheus-client)"
        if os.environ.get("CAPGATE_REQUIRE_BYPASS") == "1":
            pytest.fail(msg)
        pytest.skip(msg)
    from capgate import prometheus

    reg = prometheus_client.CollectorRegistry()
    prometheus.register(reg)
    prometheus.register(reg)  # once per registry
    settings.CAPGATE = dict(settings.CAPGATE, URL="unix:/nonexistent/capgate.sock")
    post(Client(), "/mw/viewset/heavy/", users["paused"])
    assert reg.get_sample_value("capgate_client_failed_open_total", {"reason": "unreachable"}) == 1
    assert reg.get_sample_value("capgate_client_decisions_total", {"decision": "failed-open"}) == 1
