"""Fixtures of the package's unit tests: the decision stub (decidestub.py,
in a process of its own), its limits and what it counted, the test site's
users (token and session) and its record of heavy runs."""
import json
import os
import subprocess
import sys
import tempfile
import time

import pytest

from capgate.client import _UnixConnection

HERE = os.path.dirname(os.path.abspath(__file__))


class StubService:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="capgate-stub-")
        self.path = os.path.join(self.dir, "decide.sock")
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "decidestub.py"), self.path],
                                     stdout=subprocess.PIPE)
        assert self.proc.stdout.readline().strip() == b"ready"
        self.url = "unix:" + self.path

    def _ask(self, method, path, body=None):
        c = _UnixConnection(self.path, 5)
        try:
            c.request(method, path, body=json.dumps(body).encode() if body is not None else None)
            return json.loads(c.getresponse().read())
        finally:
            c.close()

    def limits(self, **limits):
        self._ask("PUT", "/limits", limits)
        self._ask("DELETE", "/stats")

    def stats(self):
        return self._ask("GET", "/stats")

    def calls(self):
        return self.stats()["calls"]

    def wait_released(self, timeout=5.0):
        """Waits until the stub holds nothing (a close reaches it through
        its own thread)."""
        deadline = time.monotonic() + timeout
        while True:
            held = {u: n for u, n in self.stats()["held"].items() if n}
            if not held or time.monotonic() > deadline:
                return held
            time.sleep(0.01)

    def stop(self):
        self.proc.kill()
        self.proc.wait()


@pytest.fixture(scope="session")
def stub():
    s = StubService()
    yield s
    s.stop()


@pytest.fixture(autouse=True)
def _site(request, settings):
    """Points the site at the stub with no limits, and clears the record of
    runs and the throttles' cache."""
    from django.core.cache import cache

    from testsite import views

    del views.RUNS[:]
    cache.clear()
    if "stub" in request.fixturenames:
        s = request.getfixturevalue("stub")
        s.limits()
        settings.CAPGATE = dict(settings.CAPGATE, URL=s.url)
    yield


@pytest.fixture
def users(db):
    """Users by name, each with a DRF token (users[name].token)."""
    from django.contrib.auth.models import User
    from rest_framework.authtoken.models import Token

    made = {}
    for name in ("paused", "one", "free"):
        u = User.objects.create_user(name, password="pw-" + name)
        u.token = Token.objects.create(user=u).key
        made[name] = u
    return made
