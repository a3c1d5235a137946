"""Settings of the OCL-like differential upstream of the bypass suite: the
sites' shared settings (oclapi.settings), no limiter inside.

Everything variable comes from the environment the Go test sets:
BYPASS_DIR holds the SQLite database, BYPASS_RECORD is the JSON-lines file
every heavy call is recorded to.
"""
import os

from oclapi.settings import *  # noqa: F401,F403

BASE_DIR = os.environ.get("BYPASS_DIR", "/tmp")
SECRET_KEY = "bypass-suite-not-a-secret"
ROOT_URLCONF = "oclsim.urls"
WSGI_APPLICATION = "oclsim.wsgi.application"

INSTALLED_APPS = INSTALLED_APPS + ["oclsim"]  # noqa: F405
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.path.join(BASE_DIR, "oclsim.sqlite3"),
    }
}
LOGGING = {"version": 1, "disable_existing_loggers": True}

# Token first, as OCL; then Bearer JWTs read leniently (oclsim.auth: the
# worst case of an API that accepts tokens capgate can't verify); then the
# session.
REST_FRAMEWORK = dict(REST_FRAMEWORK)  # noqa: F405
REST_FRAMEWORK["DEFAULT_AUTHENTICATION_CLASSES"] = [
    "rest_framework.authentication.TokenAuthentication",
    "oclsim.auth.LenientJWTAuthentication",
    "rest_framework.authentication.SessionAuthentication",
]
