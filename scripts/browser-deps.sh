#!/usr/bin/env bash
# Makes sure the headless Chromium the browser tests use is installed
# (Debian's chromium package), installing it when missing. Prints where it
# is, or why the browser tests will skip.
set -euo pipefail

have_chromium() { command -v chromium >/dev/null 2>&1 || [ -n "${CAPGATE_CHROMIUM:-}" ]; }

if ! have_chromium && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
	apt-get update -qq || true
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null || true
fi
if have_chromium; then
	echo "chromium: ${CAPGATE_CHROMIUM:-$(command -v chromium)}"
else
	echo "chromium: not available; the browser tests will skip"
fi
