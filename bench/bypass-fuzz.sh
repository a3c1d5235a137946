#!/usr/bin/env bash
# bench/bypass-fuzz.sh: the bypass suite's differential fuzzer
# (test/bypass, TestDifferentialFuzz) run longer than CI's fixed 20 s, with
# a seed of its own. It mutates heavy requests, sends them through capgate
# to the real Django/DRF/gunicorn upstream on 127.0.0.1 and fails if the
# upstream ran any heavy call capgate did not count.
#
#   DURATION=5m SEED=42 bench/bypass-fuzz.sh
#
# DURATION is per run: the fuzzer runs with the wait off, then on (DRF
# tokens and sessions through the upstream, tokens and header gateways),
# then on the JWT path (the --identity jwt gateway, JWTs good and
# unverifiable, which the upstream accepts); SEED defaults to the time. A failure prints the seed and the cases
# (X-Test-Case "fuzz <seed>/<worker>/<n>") to replay. Needs Debian's
# python3-django, python3-djangorestframework and gunicorn
# (scripts/bypass-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-2m}
SEED=${SEED:-$(date +%s)}
scripts/bypass-deps.sh
echo "bypass fuzz: seed $SEED, $DURATION per run (wait on, wait off, jwt); $(uptime)"
CAPGATE_REQUIRE_BYPASS=1 go test -count=1 -v -timeout 0 -run 'TestDifferentialFuzz' ./test/bypass \
	-args -bypass.fuzz="$DURATION" -bypass.seed="$SEED" 2>&1 | grep -v '^=== '
