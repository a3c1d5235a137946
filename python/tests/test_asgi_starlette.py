"""capgate.asgi.CapacityMiddleware in a Starlette app under uvicorn
(Debian's python3-starlette and python3-uvicorn), against the decision
stub: a heavy call is decided and held until its response's last byte, a
refusal is the service's answer, a light call is never asked about, the
classifier's errors and a body too long to read are counted as the
conservative call, and a failing service fails open."""
import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from capgate.client import _UnixConnection

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def app(stub):
    for mod in ("uvicorn", "starlette"):
        try:
            __import__(mod)
        except ImportError:  # pragma: no cover
            msg = "%s is missing (scripts/python-deps.sh installs python3-%s)" % (mod, mod)
            if os.environ.get("CAPGATE_REQUIRE_BYPASS") == "1":
                pytest.fail(msg)
            pytest.skip(msg)
    d = tempfile.mkdtemp(prefix="capgate-starlette-")
    runs = os.path.join(d, "runs.jsonl")
    env = dict(os.environ, CAPGATE_TEST_STUB=stub.url, CAPGATE_TEST_RUNS=runs,
               PYTHONPATH=os.pathsep.join([os.path.dirname(HERE), HERE]), PYTHONDONTWRITEBYTECODE="1")
    sock = os.path.join(d, "app.sock")
    log = open(os.path.join(d, "uvicorn.log"), "w")
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "--uds", sock, "--log-level", "warning",
                             "starletteapp:app"], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=HERE)
    deadline = time.monotonic() + 30
    while not os.path.exists(sock):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail("uvicorn did not start: " + open(log.name).read())
        time.sleep(0.05)  # another process: no event to wait on
    yield sock, runs
    proc.terminate()
    proc.wait()
    log.close()


def ask(sock, method="POST", path="/v1/chat", user="free", body=None, **headers):
    c = _UnixConnection(sock, 30)
    try:
        h = {"Content-Type": "application/json", "Authorization": "Bearer u-" + user}
        h.update({k.replace("_", "-"): v for k, v in headers.items()})
        c.request(method, path, body=body if body is not None else json.dumps({"model": "small"}), headers=h)
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def runs(path):
    try:
        with open(path) as f:
            return [json.loads(line) for line in f]
    except FileNotFoundError:
        return []


def test_heavy_calls_are_decided_and_light_ones_never_asked(app, stub):
    sock, rec = app
    stub.limits(paused=0, _prefix="Capgate-")
    status, h, body = ask(sock, user="paused")
    assert (status, h["capgate-decision"], json.loads(body)["error_code"]) == (429, "refused", "capacity_exceeded")
    status, h, body = ask(sock, user="free")
    assert (status, h["capgate-decision"]) == (200, "admitted")
    assert json.loads(body) == {"ran": True, "size": len(json.dumps({"model": "small"}))}  # the body reached the app whole
    assert ask(sock, "GET", "/v1/models")[0] == 200
    assert [(c["user"], c["route"], c["fields"]) for c in stub.calls()] == [
        ("paused", "chat", {"model": "small"}), ("free", "chat", {"model": "small"})]
    assert stub.wait_released() == {}


def test_a_call_holds_its_place_until_its_last_byte(app, stub):
    sock, _ = app
    stub.limits(one=1)
    got = {}
    t = threading.Thread(target=lambda: got.setdefault("r", ask(sock, user="one", X_Test_Hold_Ms="1500", X_Test_Stream="3")))
    t.start()
    deadline = time.monotonic() + 10
    while stub.stats()["held"].get("one", 0) != 1:
        assert time.monotonic() < deadline, stub.stats()
        time.sleep(0.01)
    assert ask(sock, user="one")[0] == 429
    start = time.monotonic()
    assert ask(sock, user="free")[0] == 200  # the loop is free meanwhile
    assert time.monotonic() - start < 1.0
    t.join()
    assert got["r"][0] == 200 and got["r"][2].count(b"\n") == 3
    assert stub.wait_released() == {}


def test_errors_on_the_callers_side_count(app, stub):
    sock, _ = app
    stub.limits(paused=0)
    assert ask(sock, user="paused", X_Test_Raise="1")[0] == 429
    big = json.dumps({"model": "small", "pad": "x" * (128 << 10)})
    assert ask(sock, user="paused", body=big)[0] == 429
    assert stub.calls() == [{"user": "paused", "conservative": True}] * 2


def test_a_failing_service_fails_open(app, stub):
    sock, rec = app
    stub.limits(paused=0, _status=503)
    before = len(runs(rec))
    status, h, _ = ask(sock, user="paused")
    assert status == 200 and "capgate-decision" not in h and "x-ocl-capacity-decision" not in h
    assert runs(rec)[before:] == [{"decision": "failed-open", "size": len(json.dumps({"model": "small"}))}]
