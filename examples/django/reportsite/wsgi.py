"""WSGI entry point: gunicorn reportsite.wsgi."""
import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reportsite.settings")
application = get_wsgi_application()
