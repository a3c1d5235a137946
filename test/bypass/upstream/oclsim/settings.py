"""Settings of the OCL-like differential upstream of the bypass suite.

Everything variable comes from the environment the Go test sets:
BYPASS_DIR holds the SQLite database, BYPASS_RECORD is the JSON-lines file
every heavy call is recorded to.
"""
import os

BASE_DIR = os.environ.get("BYPASS_DIR", "/tmp")
SECRET_KEY = "bypass-suite-not-a-secret"
DEBUG = False
ALLOWED_HOSTS = ["*"]
USE_TZ = True
ROOT_URLCONF = "oclsim.urls"
WSGI_APPLICATION = "oclsim.wsgi.application"
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "rest_framework",
    "rest_framework.authtoken",
    "oclsim",
]
MIDDLEWARE = [
    "django.middleware.common.CommonMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.path.join(BASE_DIR, "oclsim.sqlite3"),
    }
}
# OCL authenticates by token first, then by session (the web client).
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "UNAUTHENTICATED_USER": None,
}
LOGGING = {"version": 1, "disable_existing_loggers": True}
