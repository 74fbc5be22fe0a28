#!/usr/bin/env bash
# Creates (or reuses) the Python virtual environment the real-client tests run in:
# NVIDIA's cuda-bindings, cuda.core and numba-cuda, pinned with everything they pull in,
# plus the libcudart wheel that numba-cuda insists on finding (it is loaded, never
# initialised), and tinygrad (pure Python, no dependencies; numpy for its tensors).
# Nothing is installed outside target/real-clients/.
#
# Usage: scripts/real-clients-env.sh   — prints the venv's python on stdout.
#
# Wheels are downloaded into a wheelhouse first and installed from there with --no-index,
# so a machine without network can be prepared by copying a wheelhouse filled elsewhere
# (CUQUOTA_WHEELHOUSE=dir). With neither the venv, nor the wheels, nor the network, this
# fails and says so: the tests must never pass by skipping.
set -euo pipefail
cd "$(dirname "$0")/.."

# CUDA 13 throughout (the GPU machine's frameworks are CUDA 13 too); the shim
# is run with CUDA_SHIM_DRIVER_VERSION=13000 to match. Every package of the closure is
# pinned and installed with --no-deps, so no resolver picks a newer version on a later run.
PINS=(
  cuda-bindings==13.5.0
  cuda-core==1.2.2
  cuda-pathfinder==1.9.1
  numba-cuda==0.30.4
  numba==0.68.1
  llvmlite==0.50.0
  numpy==2.4.6
  packaging==26.4
  nvidia-cuda-runtime==13.5.37
  tinygrad==0.14.0
)
# Each pin's wheel size in MB (the x86_64 CPython 3.11 wheels; other interpreters' differ a
# little), to announce a download before it starts.
declare -A MB=(
  [cuda-bindings]=8 [cuda-core]=7 [cuda-pathfinder]=1 [numba-cuda]=2 [numba]=4
  [llvmlite]=60 [numpy]=17 [packaging]=1 [nvidia-cuda-runtime]=3 [tinygrad]=3
)

python=${PYTHON:-python3}
root=target/real-clients
venv=$root/venv
stamp=$venv/cuquota-pins.txt

fail() {
  echo "real-clients-env: $*" >&2
  exit 1
}

command -v "$python" >/dev/null || fail "no $python: the real-client tests need Python 3 (3.10 or later)"
mkdir -p "$root"
# One installer at a time (parallel test binaries, or a person running it by hand).
exec 9>"$root/.lock"
flock 9

tag=$("$python" -c 'import sys; print(sys.implementation.cache_tag)')
# Binary wheels are per interpreter, hence a wheelhouse per interpreter.
wheels=${CUQUOTA_WHEELHOUSE:-$root/wheels-$tag}
want="$tag ${PINS[*]}"
if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  echo "$PWD/$venv/bin/python"
  exit 0
fi

# Which pins have no wheel in the wheelhouse yet ("numba-cuda==0.30.4" → numba_cuda-0.30.4-*.whl).
missing=()
for pin in "${PINS[@]}"; do
  name=${pin%%==*}
  version=${pin#*==}
  compgen -G "$wheels/${name//-/_}-$version-*.whl" >/dev/null || missing+=("$pin")
done
if [ ${#missing[@]} -gt 0 ]; then
  size=0
  for pin in "${missing[@]}"; do size=$((size + ${MB[${pin%%==*}]:?no size for $pin})); done
  echo "real-clients-env: downloading ${#missing[@]} wheels from PyPI, about $size MB:" \
    "${missing[*]} into $wheels" >&2
  mkdir -p "$wheels"
  if ! "$python" -m pip download --quiet --disable-pip-version-check --no-deps \
      --only-binary=:all: --retries 2 --timeout 30 -d "$wheels" "${missing[@]}" >&2; then
    fail "cannot download ${missing[*]}: no network to PyPI and no cached wheels in $wheels.
  The real-client tests need them. Run this script once on a machine with network access
  (or copy a filled wheelhouse here and set CUQUOTA_WHEELHOUSE=that directory)."
  fi
fi

echo "real-clients-env: creating $venv" >&2
rm -rf "$venv"
"$python" -m venv "$venv" || fail "'$python -m venv' failed (on Debian: apt-get install python3-venv)"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-index --no-deps \
  --find-links "$wheels" "${PINS[@]}" >&2 || fail "installing from $wheels failed"
"$venv/bin/python" -m pip check >&2 || fail "the pinned set is inconsistent (pip check above)"
echo "$want" >"$stamp"
echo "$PWD/$venv/bin/python"
