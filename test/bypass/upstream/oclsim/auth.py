"""Bearer JWTs as a lenient API reads them.

capgate's jwt identity refuses a token it can't verify (expired, signed by a
key its JWKS file lacks, for another audience or issuer, alg none, ...), but
many APIs accept some of those: clock leeway, keys fetched fresher than
capgate's file, no audience check. This upstream is the worst case of all of
them at once: it reads the payload's "sub" and checks nothing else. So a
token capgate could not verify that capgate passed ungated would run here,
and the suite's invariants would see it.
"""
import base64
import json

from django.contrib.auth import get_user_model
from rest_framework.authentication import BaseAuthentication


class LenientJWTAuthentication(BaseAuthentication):
    """Authorization: Bearer <header>.<payload>.<signature>; the user is
    the payload's "sub". Anything else is left to the next authenticator."""

    def authenticate(self, request):
        parts = request.META.get("HTTP_AUTHORIZATION", "").split()
        if len(parts) != 2 or parts[0].lower() != "bearer":
            return None
        segments = parts[1].split(".")
        if len(segments) != 3:
            return None
        try:
            raw = base64.urlsafe_b64decode(segments[1] + "=" * (-len(segments[1]) % 4))
            sub = json.loads(raw).get("sub")
        except (ValueError, AttributeError):
            return None
        if not isinstance(sub, str):
            return None
        try:
            return (get_user_model().objects.get(username=sub), None)
        except get_user_model().DoesNotExist:
            return None

    def authenticate_header(self, request):
        return "Bearer"
