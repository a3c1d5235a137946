"""The middleware in an ASGI app under uvicorn (Debian's python3-uvicorn):
async views are gated, and an admitted call's place is held while its
async view runs, with no thread held for it."""
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from capgate.client import _UnixConnection

HERE = os.path.dirname(os.path.abspath(__file__))
BODY = json.dumps({"rows": [{"name": "fever"}]})

try:
    import uvicorn  # noqa: F401
except ImportError:  # pragma: no cover
    uvicorn = None


@pytest.fixture(scope="module")
def asgi(stub):
    if uvicorn is None:
        if os.environ.get("CAPGATE_REQUIRE_BYPASS") == "1":
            pytest.fail("uvicorn is missing (scripts/python-deps.sh installs python3-uvicorn)")
        pytest.skip("uvicorn is missing (scripts/python-deps.sh installs python3-uvicorn)")
    d = tempfile.mkdtemp(prefix="capgate-asgi-")
    env = dict(os.environ, CAPGATE_TEST_DB=os.path.join(d, "db.sqlite3"), CAPGATE_TEST_STUB=stub.url,
               DJANGO_SETTINGS_MODULE="testsite.settings",
               PYTHONPATH=os.pathsep.join([os.path.dirname(HERE), HERE]), PYTHONDONTWRITEBYTECODE="1")
    sessions = json.loads(subprocess.run([sys.executable, os.path.join(HERE, "testsite", "setup_db.py")], env=env,
                                         check=True, capture_output=True).stdout.decode().strip().splitlines()[-1])
    sock = os.path.join(d, "app.sock")
    log = open(os.path.join(d, "uvicorn.log"), "w")
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "--uds", sock, "--log-level", "warning",
                             "testsite.asgi:application"], env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while not os.path.exists(sock):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail("uvicorn did not start: " + open(log.name).read())
        time.sleep(0.05)  # another process: no event to wait on
    yield sock, sessions
    proc.terminate()
    proc.wait()
    log.close()


def post(sock, session, path="/mw/async/heavy/", hold=0):
    c = _UnixConnection(sock, 30)
    try:
        c.request("POST", path, body=BODY, headers={"Content-Type": "application/json",
                                                     "Cookie": "sessionid=" + session,
                                                     "X-Test-Hold-Ms": str(hold)})
        r = c.getresponse()
        r.read()
        return r.status, r.getheader("X-Ocl-Capacity-Decision")
    finally:
        c.close()


def wait_held(stub, user, n, timeout=10.0):
    deadline = time.monotonic() + timeout
    while stub.stats()["held"].get(user, 0) != n:
        if time.monotonic() > deadline:
            raise AssertionError("the stub holds %r, want %s=%d" % (stub.stats()["held"], user, n))
        time.sleep(0.01)


@pytest.mark.parametrize("path", ["/mw/async/heavy/", "/pv/async/heavy/"])
def test_async_views_are_gated_under_uvicorn(asgi, stub, path):
    sock, sessions = asgi
    stub.limits(paused=0)
    assert post(sock, sessions["paused"], path) == (429, "refused")
    assert post(sock, sessions["free"], path) == (200, "admitted")
    assert [c["user"] for c in stub.calls()] == ["paused", "free"]
    assert stub.wait_released() == {}


def test_an_async_call_holds_its_place_while_its_view_awaits(asgi, stub):
    sock, sessions = asgi
    stub.limits(one=1)
    held = {}
    t = threading.Thread(target=lambda: held.setdefault("r", post(sock, sessions["one"], hold=1500)))
    t.start()
    wait_held(stub, "one", 1)
    # While one's call awaits in its view: her second call is refused (the
    # place is counted), another user's runs at once (the loop is free).
    assert post(sock, sessions["one"]) == (429, "refused")
    start = time.monotonic()
    assert post(sock, sessions["free"]) == (200, "admitted")
    assert time.monotonic() - start < 1.0
    t.join()
    assert held["r"] == (200, "admitted")
    assert stub.wait_released() == {}


def test_a_call_waiting_for_a_place_blocks_no_other_request(asgi, stub):
    # Under ASGI the decision (and the service's wait) runs in a thread of
    # its own, not in Django's one sync thread: while one's second call
    # waits for her place, another user's call is decided and runs at once.
    sock, sessions = asgi
    stub.limits(one=1, _wait=5)
    got = {}
    first = threading.Thread(target=lambda: got.setdefault("first", post(sock, sessions["one"], hold=2000)))
    first.start()
    wait_held(stub, "one", 1)
    second = threading.Thread(target=lambda: got.setdefault("second", post(sock, sessions["one"])))
    second.start()
    deadline = time.monotonic() + 10
    while len([c for c in stub.calls() if c["user"] == "one"]) < 2:  # the second is waiting in the stub
        assert time.monotonic() < deadline
        time.sleep(0.01)
    start = time.monotonic()
    assert post(sock, sessions["free"]) == (200, "admitted")
    took = time.monotonic() - start
    first.join()
    second.join()
    assert took < 1.0, "another user's call took %.2fs while one's call waited" % took
    assert got == {"first": (200, "admitted"), "second": (200, "admitted")}
    assert stub.wait_released() == {}
