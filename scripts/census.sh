#!/usr/bin/env bash
# The census: holds the driver catalogue (crates/driver) to NVIDIA's cuda.h, from the
# nvidia-cuda-runtime wheel, and prints one line: how many of the header's functions are
# hooked, pass through, or are not governed. Fails on a function of the header the catalogue
# does not classify, on a newest variant of a hooked function that is not hooked, and on a
# CUresult value the error-name table (crates/driver/src/results.rs) lacks or names differently.
#
# Usage: scripts/census.sh [VERSION]
#   without VERSION: the pinned wheel (scripts/cuda-runtime-pin.sh), as scripts/test.sh runs it;
#   with a newer VERSION: the same census against that wheel, listing what is new (each new
#   function as a catalogue row to add, its class to choose) — bumping CUDA starts here.
#
# The wheel (~3 MB) is taken from the real-client tests' wheelhouse when it is there, else
# downloaded once with pip into target/census/wheels. With neither network nor a cached wheel
# this fails and says so: the census never passes by skipping.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/cuda-runtime-pin.sh
version=${1:-$CUDA_RUNTIME_VERSION}
python=${PYTHON:-python3}
fail() {
  echo "census: $*" >&2
  exit 1
}
command -v "$python" >/dev/null || fail "no $python: the census needs Python 3 and pip to fetch the wheel"
name="nvidia_cuda_runtime-$version-"
wheel=""
for dir in ${CUQUOTA_WHEELHOUSE:+"$CUQUOTA_WHEELHOUSE"} target/real-clients/wheels-* target/census/wheels; do
  for w in "$dir/$name"*.whl; do
    [ -f "$w" ] && { wheel=$w; break 2; }
  done
done
if [ -z "$wheel" ]; then
  echo "census: downloading nvidia-cuda-runtime==$version from PyPI (about 3 MB) into target/census/wheels" >&2
  mkdir -p target/census/wheels
  "$python" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
      --platform manylinux2014_x86_64 --retries 2 --timeout 30 -d target/census/wheels \
      "nvidia-cuda-runtime==$version" >&2 ||
    fail "cannot download nvidia-cuda-runtime==$version (pip's reason above: no network to PyPI,
  or no such version), and there is no cached wheel
  (looked in \$CUQUOTA_WHEELHOUSE, target/real-clients/wheels-*, target/census/wheels).
  The census needs NVIDIA's cuda.h from it. Run this once with network access, or put the
  wheel (pip download --no-deps nvidia-cuda-runtime==$version) in one of those directories."
  for w in target/census/wheels/"$name"*.whl; do [ -f "$w" ] && wheel=$w; done
  [ -n "$wheel" ] || fail "pip reported success but no $name*.whl is in target/census/wheels"
fi
headers=target/census/$version
mkdir -p "$headers"
"$python" - "$wheel" "$headers" <<'PY' || fail "cannot read cuda.h and cudaTypedefs.h from $wheel"
import sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    for want in ("cuda.h", "cudaTypedefs.h"):
        [member] = [n for n in z.namelist() if n.endswith("/include/" + want)]
        with open(f"{out}/{want}", "wb") as f:
            f.write(z.read(member))
PY
cargo build -q -p cuquota-driver --bin cuquota-census
target_dir=$(cargo metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
echo "census: nvidia-cuda-runtime $version ($wheel)"
"$target_dir/debug/cuquota-census" "$headers/cuda.h" "$headers/cudaTypedefs.h"
