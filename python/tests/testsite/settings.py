"""The unit tests' Django site: each kind of view (DRF APIView, generic view,
ViewSet, DRF function view, plain Django view, function view, async view)
gated by the middleware under /mw/ and by the per-view way under /pv/, and
OCL's $match under /concepts/ for the OCL classifier. CAPGATE["URL"] is the
decision stub the tests start (tests/decidestub.py)."""
import os

SECRET_KEY = "capgate-unit-tests-not-a-secret"
DEBUG = False
ALLOWED_HOSTS = ["*"]
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
ROOT_URLCONF = "testsite.urls"
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "rest_framework",
    "rest_framework.authtoken",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "capgate.django.CapacityMiddleware",
]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ.get("CAPGATE_TEST_DB", ":memory:")}}
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "UNAUTHENTICATED_USER": None,
    "DEFAULT_THROTTLE_RATES": {"user": "3/min"},
}
CAPGATE = {
    "URL": os.environ.get("CAPGATE_TEST_STUB", "unix:/nonexistent/capgate-stub.sock"),
    "CLASSIFY": "testsite.views.classify",
    "TIMEOUT": 0.5,
}
