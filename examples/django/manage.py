#!/usr/bin/env python3
"""The example's manage.py: python3 manage.py migrate, demo_users, runserver."""
import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reportsite.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
