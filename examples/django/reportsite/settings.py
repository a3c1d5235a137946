"""Settings of the example: a DRF API whose one heavy view, POST /report/,
is gated by capgate's Django middleware, asking the decision service
`capgate decide` on a unix socket.

From the environment: REPORTS_DB (the SQLite file, default db.sqlite3
here), CAPGATE_URL (the service, default unix:/run/capgate/decide.sock),
CAPGATE_TIMEOUT (seconds), REPORTS_RECORD (a file every report run is
appended to, for the end-to-end test; none by default).
"""
import os

BASE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECRET_KEY = os.environ.get("REPORTS_SECRET_KEY", "example-not-a-secret")
DEBUG = False
ALLOWED_HOSTS = ["*"]
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
ROOT_URLCONF = "reportsite.urls"
WSGI_APPLICATION = "reportsite.wsgi.application"

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "rest_framework",
    "rest_framework.authtoken",
    "reports",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # After authentication: the classifier reads who calls.
    "capgate.django.CapacityMiddleware",
]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("REPORTS_DB", os.path.join(BASE_DIR, "db.sqlite3")),
        "OPTIONS": {"timeout": 20},
    }
}
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["rest_framework.authentication.TokenAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
}

# The decision service (capgate decide --policy policy.yaml), and the
# classifier that names this app's heavy calls by the policy's route.
CAPGATE = {
    "URL": os.environ.get("CAPGATE_URL", "unix:/run/capgate/decide.sock"),
    "CLASSIFY": "reports.capacity.classify",
    "TIMEOUT": float(os.environ.get("CAPGATE_TIMEOUT", "0.25")),
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "loggers": {"capgate": {"handlers": ["stderr"], "level": "WARNING"}},
}
