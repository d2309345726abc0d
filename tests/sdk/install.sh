#!/usr/bin/env bash
# Installs, idempotently, OpenViking's Python SDK for tests/sdk/conformance.py
# into .skald/sdk/venv (git-ignored) from the exact pins of
# tests/sdk/requirements.lock. Only PyPI is contacted; a venv whose lockfile
# has not changed since its install is kept.
#
# Usage: tests/sdk/install.sh     (SKALD_SDK_TOOLS=DIR installs elsewhere);
# prints the venv's python on its last line.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
dest=${SKALD_SDK_TOOLS:-$repo/.skald/sdk}
want=$(sha256sum "$here/requirements.lock" | cut -d' ' -f1)
have=$(cat "$dest/.installed" 2>/dev/null || true)
if [ "$want" != "$have" ] || [ ! -x "$dest/venv/bin/python" ]; then
  echo "[sdk-install] installing openviking-sdk into $dest/venv" >&2
  rm -rf "$dest/venv"
  mkdir -p "$dest"
  python3 -m venv "$dest/venv"
  "$dest/venv/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "$here/requirements.lock"
  echo "$want" >"$dest/.installed"
fi
echo "$dest/venv/bin/python"
