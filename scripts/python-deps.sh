#!/usr/bin/env bash
# Makes sure the Python package's own checks can run: Debian's pytest,
# pytest-django, setuptools and build (a PEP 517 build offline with
# --no-isolation), venv, mypy, uvicorn and Starlette (the ASGI tests and the
# in-app inference example; Debian's FastAPI can't be installed beside the
# security-updated Starlette, which Breaks it) and prometheus_client (the
# client's metrics), installed with apt when missing. Django and DRF come from scripts/bypass-deps.sh. Prints
# what it found, or why the Python suite will not run.
set -euo pipefail

PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

have_deps() {
	"$PY" -c 'import pytest, pytest_django, setuptools, build, mypy, uvicorn, starlette, prometheus_client' >/dev/null 2>&1
}

if ! have_deps && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
	apt-get update -qq || true
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
		python3-pytest python3-pytest-django python3-setuptools python3-build python3-venv python3-mypy python3-uvicorn \
		python3-starlette python3-prometheus-client >/dev/null || true
fi
if have_deps; then
	echo "python suite: pytest $("$PY" -c 'import pytest; print(pytest.__version__)'), setuptools $("$PY" -c 'import setuptools; print(setuptools.__version__)'), $("$PY" -m mypy --version)"
else
	echo "python suite: pytest, pytest-django, setuptools, build, mypy, uvicorn, starlette or prometheus_client not available"
fi
