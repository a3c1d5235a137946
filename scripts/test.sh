#!/usr/bin/env bash
# The test suite with progress: `go test -race ./...` (or the packages and
# flags given) through tools/testprogress, which prints each package's
# result as it ends and, whenever nothing was printed for 30 s, what is
# still building or running. Plain `go test` prints nothing while a long
# package runs (minutes for cmd/capgate, redis and the Django suites).
# The exit code is go test's.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
echo "scripts/test.sh: building tools/testprogress, then go test -race -json $* (a line at least every 30 s)"
go build -o "$bin/testprogress" ./tools/testprogress
args=("$@")
if [ ${#args[@]} -eq 0 ]; then
	args=(./...)
fi
# -race unless the caller passed -race=false or another -race.
race=(-race)
for a in "${args[@]}"; do
	case "$a" in -race*) race=() ;; esac
done
set +e
go test "${race[@]}" -json "${args[@]}" 2>&1 | "$bin/testprogress"
rc=("${PIPESTATUS[@]}")
set -e
if [ "${rc[0]}" -ne 0 ]; then exit "${rc[0]}"; fi
exit "${rc[1]}"
