#!/usr/bin/env bash
# Builds the capgate container image with podman (or docker), with no
# network beyond the Go module proxy: the static binary is built here with
# the local Go, then copied into a scratch image with CA certificates and a
# non-root user (uid 10001). See Dockerfile for the ports and volume.
#
#   scripts/image.sh [TAG]        default tag capgate:dev
#
# CAPGATE_IMAGE_BINARY_ONLY=PATH builds only the static binary, to PATH;
# CAPGATE_IMAGE_BINARY=PATH builds the image around that binary instead of
# building one (.ci/run builds it early, beside other stages).
#
# CAPGATE_IMAGE_TOOL picks the builder (default: podman if installed, else
# docker). With podman it builds in the docker format, which keeps the
# HEALTHCHECK (the OCI format drops it). When podman's default overlay
# storage is unusable (a container or an overlay filesystem underneath),
# it falls back to the vfs driver.
set -euo pipefail
cd "$(dirname "$0")/.."

tag="${1:-capgate:dev}"
tool="${CAPGATE_IMAGE_TOOL:-}"
if [ -z "$tool" ]; then
	if command -v podman >/dev/null 2>&1; then tool=podman; else tool=docker; fi
fi

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT

# -buildvcs=auto: the revision goes into the binary's build info (capgate
# --version) when this is a git checkout.
static_build() { CGO_ENABLED=0 GOOS=linux go build -trimpath -buildvcs=auto -ldflags='-s -w' -o "$1" ./cmd/capgate; }
if [ -n "${CAPGATE_IMAGE_BINARY_ONLY:-}" ]; then
	static_build "$CAPGATE_IMAGE_BINARY_ONLY"
	echo "image: built the static binary $CAPGATE_IMAGE_BINARY_ONLY"
	exit 0
fi
if [ -n "${CAPGATE_IMAGE_BINARY:-}" ]; then
	cp "$CAPGATE_IMAGE_BINARY" "$ctx/capgate"
else
	static_build "$ctx/capgate"
fi
cp /etc/ssl/certs/ca-certificates.crt "$ctx/ca-certificates.crt"
printf 'root:x:0:0:root:/:/sbin/nologin\ncapgate:x:10001:10001:capgate:/var/lib/capgate:/sbin/nologin\n' >"$ctx/passwd"
printf 'root:x:0:\ncapgate:x:10001:\n' >"$ctx/group"
mkdir -p "$ctx/data"
cp Dockerfile "$ctx/Dockerfile"

args=(build --tag "$tag" --file "$ctx/Dockerfile")
if [ "$tool" = podman ]; then
	args+=(--format docker)
	if ! podman info >/dev/null 2>&1; then
		echo "image: podman's default storage is unusable here; using the vfs driver" >&2
		export STORAGE_DRIVER=vfs
	fi
fi
"$tool" "${args[@]}" "$ctx"
echo "image: built $tag with $tool"
