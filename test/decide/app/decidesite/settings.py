"""Settings of the decision suite's API host: the sites' shared settings
(oclapi.settings), gated from inside by capgate.django.CapacityMiddleware.

From the environment the Go test sets: DECIDE_DIR holds the SQLite
database (shared by both hosts), DECIDE_RECORD is the JSON-lines file every
heavy run is recorded to, DECIDE_HOST names the host, CAPGATE_URL is the
host's own decision service.
"""
import os

from oclapi.settings import *  # noqa: F401,F403

BASE_DIR = os.environ.get("DECIDE_DIR", "/tmp")
SECRET_KEY = "decide-suite-not-a-secret"
ROOT_URLCONF = "decidesite.urls"
WSGI_APPLICATION = "decidesite.wsgi.application"

MIDDLEWARE = MIDDLEWARE + [  # noqa: F405
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
