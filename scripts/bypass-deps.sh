#!/usr/bin/env bash
# Makes sure the differential upstream of the bypass suite (test/bypass) can
# run: Debian's Django, Django REST framework and gunicorn, installed with
# apt when missing. Prints what it found, or why the bypass suite will skip.
set -euo pipefail

PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

have_deps() {
	command -v gunicorn >/dev/null 2>&1 &&
		"$PY" -c 'import django, rest_framework' >/dev/null 2>&1
}

if ! have_deps && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
	apt-get update -qq || true
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
		python3-django python3-djangorestframework gunicorn >/dev/null || true
fi
if have_deps; then
	echo "bypass upstream: django $("$PY" -c 'import django; print(django.get_version())'), DRF $("$PY" -c 'import rest_framework; print(rest_framework.VERSION)'), $(gunicorn --version 2>&1)"
else
	echo "bypass upstream: Django, DRF or gunicorn not available; the bypass suite will skip"
fi
