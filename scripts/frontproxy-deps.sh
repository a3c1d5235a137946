#!/usr/bin/env bash
# Makes sure nginx and HAProxy are installed (Debian's nginx and haproxy
# packages), installing them when missing: the front-proxy test
# (frontproxy) checks the routing `capgate policy routes` writes with
# `nginx -t` and `haproxy -c`, and sends calls through both. Prints what it
# found, or why that test skips.
set -euo pipefail

have() { command -v nginx >/dev/null 2>&1 && command -v haproxy >/dev/null 2>&1; }

if ! have && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
	apt-get update -qq || true
	# The tests start their own processes on loopback ports; they need no
	# service of the packages' own.
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nginx haproxy >/dev/null || true
fi
if have; then
	echo "nginx: $(command -v nginx), haproxy: $(command -v haproxy)"
else
	echo "nginx, haproxy: not available; the front-proxy test will skip"
fi
