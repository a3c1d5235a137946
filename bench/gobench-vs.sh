#!/usr/bin/env bash
# bench/gobench-vs.sh: Go benchmarks of two revisions side by side, in one
# run, so the machine's load weighs on both alike.
#
#   BEFORE=<git revision> bench/gobench-vs.sh [PKG:REGEX ...]
#
# Builds each package's test binary at BEFORE (in a scratch worktree) and
# from this checkout, then runs ROUNDS rounds, each running before then
# after (after then before in the next round) with -benchmem, and prints
# per benchmark the median ns/op, B/op and allocs/op of each and the ratio
# after/before. Defaults: the gated call's own benchmarks (the root's
# Admit/Release, headers, log line) and the gateway's over memory and
# Redis lanes. Benchmarks on Redis need CAPGATE_TEST_REDIS_URL (else they
# skip and print nothing).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
: "${BEFORE:?set BEFORE to the git revision to compare against}"
ROUNDS=${ROUNDS:-5}
BENCHTIME=${BENCHTIME:-1s}
SPECS=("$@")
if [ ${#SPECS[@]} -eq 0 ]; then
	SPECS=(
		".:^Benchmark(GateAdmitRelease|GateAdmitReleaseLocalLanes|GateAdmitReleaseEnforceWait|GateAdmitReleaseParallel|AdmissionSetHeaders|AdmissionLogLine)$"
		"./http:^BenchmarkGateway(Ungated|GatedMemory|GatedRedis)$"
	)
fi

WORK=$(mktemp -d)
cleanup() {
	git -C "$ROOT" worktree remove --force "$WORK/before-src" >/dev/null 2>&1 || true
	rm -rf "$WORK"
}
trap cleanup EXIT
git -C "$ROOT" worktree add -q --detach "$WORK/before-src" "$BEFORE"

n=0
for spec in "${SPECS[@]}"; do
	pkg=${spec%%:*}
	(cd "$WORK/before-src" && go test -c -o "$WORK/b$n.test" "$pkg")
	(cd "$ROOT" && go test -c -o "$WORK/a$n.test" "$pkg")
	n=$((n + 1))
done

# run SIDE N REGEX PKG: one run of SIDE's test binary N, in PKG's directory
# (tests read testdata relative to it), lines tagged with the side.
run() {
	(cd "$ROOT/$4" && "$WORK/$1$2.test" -test.run '^$' -test.bench "$3" -test.benchmem \
		-test.count 1 -test.benchtime "$BENCHTIME" 2>/dev/null) |
		awk -v side="$1" '/^Benchmark/ { print side, $0 }' >>"$WORK/out"
}
for ((r = 0; r < ROUNDS; r++)); do
	i=0
	for spec in "${SPECS[@]}"; do
		pkg=${spec%%:*} re=${spec#*:}
		if ((r % 2 == 0)); then
			run b "$i" "$re" "$pkg"
			run a "$i" "$re" "$pkg"
		else
			run a "$i" "$re" "$pkg"
			run b "$i" "$re" "$pkg"
		fi
		i=$((i + 1))
	done
	echo "round $((r + 1)) of $ROUNDS done" >&2
done

echo "before: $(git -C "$ROOT" rev-parse --short "$BEFORE"), after: $(git -C "$ROOT" rev-parse --short HEAD) (+ uncommitted), $ROUNDS rounds, medians, load $(cut -d' ' -f1-3 /proc/loadavg)"
awk '
function median(s,   a, n, i, j, t) {
	n = split(s, a, " ")
	for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
	return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
}
{
	side = $1; name = $2; sub(/-[0-9]+$/, "", name)
	for (k = 3; k <= NF; k++) {
		if ($(k+1) == "ns/op") ns[side, name] = ns[side, name] " " $k
		if ($(k+1) == "B/op") bop[side, name] = bop[side, name] " " $k
		if ($(k+1) == "allocs/op") al[side, name] = al[side, name] " " $k
	}
	if (!(name in seen)) { seen[name] = 1; order[++m] = name }
}
END {
	printf "%-40s %12s %12s %7s %10s %10s %9s %9s\n", "benchmark", "ns/op before", "ns/op after", "ratio", "B before", "B after", "allocs b", "allocs a"
	for (i = 1; i <= m; i++) {
		n = order[i]
		if (!(("b", n) in ns) || !(("a", n) in ns)) continue
		nb = median(ns["b", n]); na = median(ns["a", n])
		printf "%-40s %12.0f %12.0f %7.2f %10.0f %10.0f %9.0f %9.0f\n", n, nb, na, na / nb, median(bop["b", n]), median(bop["a", n]), median(al["b", n]), median(al["a", n])
	}
}' "$WORK/out"
