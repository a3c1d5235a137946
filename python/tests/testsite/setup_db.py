"""Creates the test site's database (CAPGATE_TEST_DB) and the users paused,
one and free with a session each; prints {user: session key} as JSON."""
import json

import django

django.setup()

from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY  # noqa: E402
from django.contrib.auth.models import User  # noqa: E402
from django.contrib.sessions.backends.db import SessionStore  # noqa: E402
from django.core.management import call_command  # noqa: E402

call_command("migrate", verbosity=0, interactive=False)
out = {}
for name in ("paused", "one", "free"):
    u = User.objects.create_user(name, password="pw-" + name)
    s = SessionStore()
    s[SESSION_KEY] = str(u.pk)
    s[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    s[HASH_SESSION_KEY] = u.get_session_auth_hash()
    s.save()
    out[name] = s.session_key
print(json.dumps(out))
