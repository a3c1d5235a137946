#!/usr/bin/env bash
# Makes sure Prometheus and promtool are installed (Debian's prometheus
# package), installing them when missing. CI then checks the rules in
# deploy/prometheus and runs the test that scrapes a gateway with a real
# Prometheus on loopback. Prints what it found, or why those tests skip.
set -euo pipefail

have_prometheus() { command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; }

if ! have_prometheus && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
	apt-get update -qq || true
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null || true
fi
if have_prometheus; then
	echo "prometheus: $(command -v prometheus), promtool: $(command -v promtool)"
else
	echo "prometheus: not available; the Prometheus tests will skip"
fi
