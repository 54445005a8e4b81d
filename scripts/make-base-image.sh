#!/usr/bin/env bash
# Makes the Dockerfile's base image, debian:bookworm-slim, locally when the daemon lacks it, for
# machines that reach no image registry (this one reaches Debian's package mirror only):
# debootstrap a minbase bookworm, drop what the slim image drops (docs, man pages, locales,
# apt's lists and downloaded packages), and `docker import` it under that name. Where a
# registry is reachable, `docker pull debian:bookworm-slim` gives the real one instead.
#
# Usage: scripts/make-base-image.sh [IMAGE]   (default debian:bookworm-slim)
# Idempotent: does nothing when the image exists. Needs root (debootstrap) and a running daemon.
set -euo pipefail

image=${1:-debian:bookworm-slim}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

if docker image inspect "$image" >/dev/null 2>&1; then
  echo "make-base-image.sh: $image is there" >&2
  exit 0
fi
if ! command -v debootstrap >/dev/null; then
  (apt-get install -y debootstrap || (apt-get update && apt-get install -y debootstrap)) >&2
fi

rootfs=$(mktemp -d)
trap 'rm -rf "$rootfs"' EXIT
echo "make-base-image.sh: debootstrap --variant=minbase bookworm from $mirror" >&2
start=$SECONDS
if ! debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$rootfs.log" 2>&1; then
  tail -n 20 "$rootfs.log" >&2
  rm -f "$rootfs.log"
  echo "make-base-image.sh: debootstrap failed" >&2
  exit 1
fi
rm -f "$rootfs.log"
rm -rf "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* \
  "$rootfs"/usr/share/locale/* "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
tar -C "$rootfs" -c . | docker import --change 'CMD ["bash"]' - "$image" >/dev/null
echo "make-base-image.sh: imported $image ($(docker image inspect -f '{{.Size}}' "$image") bytes) in $((SECONDS - start)) s" >&2
