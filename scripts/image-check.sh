#!/usr/bin/env bash
# Checks the config of an image scripts/image.sh built, with `podman image
# inspect` (CI builds images but may not run containers): a non-root user,
# the capgate entrypoint, a HEALTHCHECK that runs `capgate healthcheck`, and
# a size under 32 MiB (30 MiB until the jwt identity resolver's go-jose
# took the image to 30.3 MiB; the binary is most of it, SQLite's pure-Go
# driver the largest part).
#
#   scripts/image-check.sh [TAG]      default tag capgate:dev
set -euo pipefail
tag="${1:-capgate:dev}"
if ! podman info >/dev/null 2>&1; then
	export STORAGE_DRIVER=vfs # as scripts/image.sh falls back to
fi
fail=0
check() { # what, got, ok(0/1)
	if [ "$3" = 1 ]; then echo "image-check: ok   $1: $2"; else echo "image-check: FAIL $1: $2"; fail=1; fi
}
user=$(podman image inspect "$tag" --format '{{.Config.User}}')
case "$user" in "" | root | root:* | 0 | 0:*) ok=0 ;; *) ok=1 ;; esac
check "non-root user" "$user" "$ok"
entry=$(podman image inspect "$tag" --format '{{json .Config.Entrypoint}}')
[ "$entry" = '["/usr/local/bin/capgate"]' ] && ok=1 || ok=0
check "entrypoint" "$entry" "$ok"
hc=$(podman image inspect "$tag" --format '{{json .Config.Healthcheck}}')
case "$hc" in *'"/usr/local/bin/capgate","healthcheck"'*) ok=1 ;; *) ok=0 ;; esac
check "healthcheck" "$hc" "$ok"
size=$(podman image inspect "$tag" --format '{{.Size}}')
limit=$((32 * 1024 * 1024))
[ "$size" -lt "$limit" ] && ok=1 || ok=0
check "size < 32 MiB" "$size bytes" "$ok"
exit "$fail"
