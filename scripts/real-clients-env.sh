#!/usr/bin/env bash
# Creates (or reuses) the Python virtual environment the real-client tests run in:
# NVIDIA's cuda-bindings, cuda.core and numba-cuda, pinned with everything they pull in,
# plus the libcudart wheel that numba-cuda insists on finding (it is loaded, never
# initialised), tinygrad (pure Python, no dependencies; numpy for its tensors), and the NVML
# clients: nvidia-ml-py (pynvml), nvitop and gpustat (an sdist, built into a wheel here once).
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

# The runtime wheel's version is pinned once, for the census too.
. scripts/cuda-runtime-pin.sh
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
  "nvidia-cuda-runtime==$CUDA_RUNTIME_VERSION"
  tinygrad==0.14.0
  nvidia-ml-py==13.615.71
  nvitop==1.7.2
  psutil==7.1.3
  gpustat==1.1.1
  blessed==1.25.0
  wcwidth==0.2.14
)
# Published as source only: built into a wheel in the wheelhouse, with BUILD_PINS (what its
# pyproject.toml asks to build with; tomli only for Python < 3.11).
SDISTS=(gpustat==1.1.1)
BUILD_PINS=(setuptools==80.9.0 setuptools-scm==9.2.2 wheel==0.45.1 tomli==2.2.1)
# Each pin's wheel size in MB (the x86_64 CPython 3.11 wheels; other interpreters' differ a
# little), to announce a download before it starts.
declare -A MB=(
  [cuda-bindings]=8 [cuda-core]=7 [cuda-pathfinder]=1 [numba-cuda]=2 [numba]=4
  [llvmlite]=60 [numpy]=17 [packaging]=1 [nvidia-cuda-runtime]=3 [tinygrad]=3
  [nvidia-ml-py]=1 [nvitop]=1 [psutil]=1 [gpustat]=1 [blessed]=1 [wcwidth]=1
  [setuptools]=2 [setuptools-scm]=1 [wheel]=1 [tomli]=1
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
has_wheel() {
  local name=${1%%==*} version=${1#*==}
  compgen -G "$wheels/${name//-/_}-$version-*.whl" >/dev/null
}
missing=()
sdists_missing=()
for pin in "${PINS[@]}"; do
  if [[ " ${SDISTS[*]} " == *" $pin "* ]]; then
    has_wheel "$pin" || sdists_missing+=("$pin")
  else
    has_wheel "$pin" || missing+=("$pin")
  fi
done
if [ ${#sdists_missing[@]} -gt 0 ]; then
  for pin in "${BUILD_PINS[@]}"; do has_wheel "$pin" || missing+=("$pin"); done
fi
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

for pin in "${sdists_missing[@]}"; do
  echo "real-clients-env: downloading the source of $pin from PyPI (<1 MB) and building its wheel" >&2
  src=$root/sdist
  mkdir -p "$src"
  "$python" -m pip download --quiet --disable-pip-version-check --no-deps --no-binary=:all: \
    --retries 2 --timeout 30 -d "$src" "$pin" >&2 ||
    fail "cannot download the source of $pin: no network to PyPI (see above)"
  # Built in isolation from the pinned build wheels only (no index).
  "$python" -m pip wheel --quiet --disable-pip-version-check --no-deps --no-index \
    --find-links "$wheels" -w "$wheels" "$src/${pin%%==*}-${pin#*==}.tar.gz" >&2 ||
    fail "building the wheel of $pin failed"
done

echo "real-clients-env: creating $venv" >&2
rm -rf "$venv"
"$python" -m venv "$venv" || fail "'$python -m venv' failed (on Debian: apt-get install python3-venv)"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-index --no-deps \
  --find-links "$wheels" "${PINS[@]}" >&2 || fail "installing from $wheels failed"
"$venv/bin/python" -m pip check >&2 || fail "the pinned set is inconsistent (pip check above)"
echo "$want" >"$stamp"
echo "$PWD/$venv/bin/python"
