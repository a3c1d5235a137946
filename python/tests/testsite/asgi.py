"""The test site as an ASGI application (tests/test_asgi.py serves it with
uvicorn)."""
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testsite.settings")
application = get_asgi_application()
