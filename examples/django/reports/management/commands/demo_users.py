"""python3 manage.py demo_users: creates the example's users — alice and
bob (members), sam (staff) — and prints their API tokens as JSON."""
import json

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand
from rest_framework.authtoken.models import Token


class Command(BaseCommand):
    help = "Create the example's users and print their tokens."

    def handle(self, *args, **options):
        tokens = {}
        for name, staff in (("alice", False), ("bob", False), ("sam", True)):
            user, _ = User.objects.get_or_create(username=name, defaults={"is_staff": staff})
            tokens[name] = Token.objects.get_or_create(user=user)[0].key
        self.stdout.write(json.dumps(tokens))
