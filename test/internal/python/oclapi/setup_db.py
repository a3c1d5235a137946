"""Creates the database and the users of the site DJANGO_SETTINGS_MODULE
names; prints their credentials as JSON: {"tokens": {user: key},
"sessions": {user: key}, "csrf": token}."""
import json

import django

django.setup()

from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY  # noqa: E402
from django.contrib.auth.models import Group, User  # noqa: E402
from django.contrib.sessions.backends.db import SessionStore  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.middleware.csrf import _get_new_csrf_token  # noqa: E402
from rest_framework.authtoken.models import Token  # noqa: E402

call_command("migrate", verbosity=0, interactive=False)

# pam and pat: preview (per-user limit 0 in the suites); cora: core (limit
# 1); stan: staff.
USERS = {"pam": ([], False), "pat": ([], False), "cora": (["core_user"], False), "stan": ([], True)}
out = {"tokens": {}, "sessions": {}}
for name, (groups, staff) in USERS.items():
    u = User.objects.create_user(name, password="x", is_staff=staff)
    for g in groups:
        u.groups.add(Group.objects.get_or_create(name=g)[0])
    out["tokens"][name] = Token.objects.create(user=u, key=(name + "-" + "0" * 40)[:40]).key
    s = SessionStore()
    s[SESSION_KEY] = str(u.pk)
    s[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    s[HASH_SESSION_KEY] = u.get_session_auth_hash()
    s.save()
    out["sessions"][name] = s.session_key
out["csrf"] = _get_new_csrf_token()
print(json.dumps(out))
