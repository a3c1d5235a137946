"""Settings of the decision suite's API host: a DRF app gated from inside by
capgate.django.CapacityMiddleware.

From the environment the Go test sets: DECIDE_DIR holds the SQLite
database (shared by both hosts), DECIDE_RECORD is the JSON-lines file every
heavy run is recorded to, DECIDE_HOST names the host, CAPGATE_URL is the
host's own decision service.
"""
import os

BASE_DIR = os.environ.get("DECIDE_DIR", "/tmp")
SECRET_KEY = "decide-suite-not-a-secret"
DEBUG = False
ALLOWED_HOSTS = ["*"]
USE_TZ = True
ROOT_URLCONF = "decidesite.urls"
WSGI_APPLICATION = "decidesite.wsgi.application"
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "rest_framework",
    "rest_framework.authtoken",
]
MIDDLEWARE = [
    "django.middleware.common.CommonMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "decidesite.timing.Timing",  # the limiter's delay, for the record
    "capgate.django.CapacityMiddleware",
]
if os.environ.get("DECIDE_NO_LIMITER"):
    # The same app with no limiter, for bench/decide.sh's baseline.
    MIDDLEWARE.remove("capgate.django.CapacityMiddleware")
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.path.join(BASE_DIR, "app.sqlite3"),
        "OPTIONS": {"timeout": 20},
    }
}
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "UNAUTHENTICATED_USER": None,
}
CAPGATE = {
    "URL": os.environ.get("CAPGATE_URL", ""),
    "TOKEN": os.environ.get("CAPGATE_TOKEN") or None,
    "CLASSIFY": "capgate.django.ocl.classify",
    "TIMEOUT": float(os.environ.get("CAPGATE_TIMEOUT", "0.25")),
}
LOGGING = {
    "version": 1,
    "disable_existing_loggers": True,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "loggers": {"capgate": {"handlers": ["stderr"], "level": "WARNING"}},
}
