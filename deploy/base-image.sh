#!/usr/bin/env bash
# The Dockerfile's base image, debian:bookworm-slim, when docker has no such tag: pulled where a
# registry answers, else made here as a local stand-in, a Debian bookworm rootfs written by
# mmdebstrap (the minbase variant: what the slim image holds) and tagged with `docker import`.
# The Dockerfile stays on the real image that users pull; only the machines without a registry
# build on the stand-in. The rootfs is kept in the cache directory: the next run imports it again
# in seconds instead of writing it.
#
#   deploy/base-image.sh                 BASE_IMAGE (debian:bookworm-slim), BASE_SOURCE=auto|pull|mmdebstrap
#                                        GATEWAY_BUILD_CACHE (~/.cache/completions-gateway)
set -euo pipefail

BASE_IMAGE="${BASE_IMAGE:-debian:bookworm-slim}"
BASE_SOURCE="${BASE_SOURCE:-auto}"
CACHE="${GATEWAY_BUILD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/completions-gateway}"
ROOTFS="$CACHE/bookworm-minbase.tar"

if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
  exit 0
fi
if [[ "$BASE_SOURCE" != mmdebstrap ]] && docker pull -q "$BASE_IMAGE" >/dev/null 2>&1; then
  echo "base image: pulled $BASE_IMAGE"
  exit 0
fi
if [[ "$BASE_SOURCE" == pull ]]; then
  echo "base image: cannot pull $BASE_IMAGE (BASE_SOURCE=pull)" >&2
  exit 1
fi
if [[ ! -s "$ROOTFS" ]]; then
  command -v mmdebstrap >/dev/null || { echo "base image: no registry and no mmdebstrap (apt-get install mmdebstrap)" >&2; exit 1; }
  mkdir -p "$CACHE"
  # As the slim image is made (debuerreotype): merged /usr without the usrmerge package (which
  # pulls in perl), no documentation, manual pages or translations (dpkg's path-excludes, kept in
  # the image so that what the Dockerfile installs goes without them too), no apt lists, and its
  # apt source, deb.debian.org, so that the Dockerfile's apt-get runs as on the real image.
  mmdebstrap --quiet --format=tar --variant=minbase --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/locale/locale.alias' \
    --aptopt='Acquire::Languages "none"' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin "$1"/var/log/*.log' \
    bookworm "$ROOTFS.part" http://deb.debian.org/debian >"$CACHE/mmdebstrap.log" 2>&1 \
    || { cat "$CACHE/mmdebstrap.log" >&2; exit 1; }
  mv "$ROOTFS.part" "$ROOTFS"
fi
docker import --change 'CMD ["bash"]' "$ROOTFS" "$BASE_IMAGE" >/dev/null
echo "base image: $BASE_IMAGE is the local stand-in made from $ROOTFS"
