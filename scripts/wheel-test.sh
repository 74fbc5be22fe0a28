#!/usr/bin/env bash
# Tests the wheel as a user installs it: builds it (`pip wheel .`, which runs
# `cargo build --release` through setup.py), checks its platform tag with `auditwheel show`,
# installs it with its pandas extra into a fresh virtual environment and runs
# tests/python/ with that environment's pytest, from a scratch directory, with a bare
# environment (no CUQUOTA_*, LD_*, PYTHONPATH; PATH without the checkout): `cuquota run` on
# the shim, the trace reader and the pandas frame, all from the installed package.
#
# Everything lives in target/wheel/: dist/ (the wheel), wheels-<python>/ (the pinned wheels:
# the first run downloads about 44 MB from PyPI and says so first; CUQUOTA_WHEELHOUSE=DIR
# installs from a copied wheelhouse without network), tools/ (auditwheel, kept), venv/
# (made afresh each run).
#
# CUQUOTA_WHEEL=FILE tests that wheel instead of building one (e.g. the manylinux2014 wheel
# of `scripts/build-wheel.sh --manylinux2014`); its tag is checked the same way.
set -euo pipefail
cd "$(dirname "$0")/.."

# Every package of both closures, installed with --no-deps so no resolver picks another
# version later; pip check then proves the set consistent.
BUILD_PINS=(setuptools==80.9.0)
TEST_PINS=(pandas==2.3.3 numpy==2.4.6 python-dateutil==2.9.0.post0 six==1.17.0 pytz==2025.2
  tzdata==2025.2 pytest==8.4.2 iniconfig==2.1.0 pluggy==1.6.0 packaging==25.0 pygments==2.19.2)
TOOL_PINS=(auditwheel==6.4.2 pyelftools==0.32 packaging==25.0)
# Sizes in MB (x86_64 CPython 3.11), to announce a download before it starts.
declare -A MB=([setuptools]=2 [pandas]=13 [numpy]=17 [python-dateutil]=1 [six]=1 [pytz]=1
  [tzdata]=1 [pytest]=1 [iniconfig]=1 [pluggy]=1 [packaging]=1 [pygments]=2 [auditwheel]=1
  [pyelftools]=1)

python=${PYTHON:-python3}
root=$PWD/target/wheel
fail() {
  echo "wheel-test: $*" >&2
  exit 1
}
command -v "$python" >/dev/null || fail "no $python: the wheel test needs Python 3 with venv and pip"
mkdir -p "$root"
exec 9>"$root/.lock"
flock 9
tag=$("$python" -c 'import sys; print(sys.implementation.cache_tag)')
wheels=${CUQUOTA_WHEELHOUSE:-$root/wheels-$tag}
pip_quiet=(--quiet --disable-pip-version-check)

missing=()
for pin in "${BUILD_PINS[@]}" "${TEST_PINS[@]}" "${TOOL_PINS[@]}"; do
  name=${pin%%==*}
  compgen -G "$wheels/${name//-/_}-${pin#*==}-*.whl" >/dev/null || missing+=("$pin")
done
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u | sed '/^$/d')
if [ ${#missing[@]} -gt 0 ]; then
  size=0
  for pin in "${missing[@]}"; do size=$((size + ${MB[${pin%%==*}]:?no size for $pin})); done
  echo "wheel-test: downloading ${#missing[@]} wheels from PyPI, about $size MB: ${missing[*]} into $wheels" >&2
  mkdir -p "$wheels"
  "$python" -m pip download "${pip_quiet[@]}" --no-deps --only-binary=:all: --retries 2 \
    --timeout 30 -d "$wheels" "${missing[@]}" >&2 ||
    fail "cannot download ${missing[*]}: no network to PyPI and no cached wheels in $wheels
  (copy a filled wheelhouse here and set CUQUOTA_WHEELHOUSE=that directory)"
fi

# The build: pip fetches the build backend (setuptools) into an isolated environment, here
# from the wheelhouse; setup.py runs cargo.
if [ -n "${CUQUOTA_WHEEL:-}" ]; then
  wheel=$(realpath "$CUQUOTA_WHEEL") || fail "no wheel $CUQUOTA_WHEEL"
  echo "wheel-test: testing $(basename "$wheel") (CUQUOTA_WHEEL)" >&2
else
  rm -rf "$root/dist"
  start=$(date +%s)
  "$python" -m pip wheel "${pip_quiet[@]}" --no-deps --no-index --find-links "$wheels" \
    -w "$root/dist" . >&2 || fail "pip wheel . failed"
  wheel=$(ls "$root/dist"/cuquota-*.whl)
  echo "wheel-test: built $(basename "$wheel") ($(( $(stat -c %s "$wheel") / 1024 )) KiB) in $(( $(date +%s) - start )) s" >&2
fi

tools=$root/tools
if [ "$(cat "$tools/pins.txt" 2>/dev/null)" != "$tag ${TOOL_PINS[*]}" ]; then
  rm -rf "$tools"
  "$python" -m venv "$tools"
  "$tools/bin/python" -m pip install "${pip_quiet[@]}" --no-index --no-deps --find-links "$wheels" "${TOOL_PINS[@]}" >&2
  echo "$tag ${TOOL_PINS[*]}" >"$tools/pins.txt"
fi
# The tag the wheel claims must be the one auditwheel finds its files consistent with.
claimed=$(basename "$wheel" .whl | cut -d- -f5)
shown=$("$tools/bin/auditwheel" show "$wheel")
echo "$shown" | tr '\n' ' ' | grep -q "consistent with the following platform tag: \"$claimed\"" ||
  fail "auditwheel does not confirm $claimed:
$shown"
echo "wheel-test: auditwheel show: consistent with $claimed" >&2

venv=$root/venv
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install "${pip_quiet[@]}" --no-index --no-deps --find-links "$wheels" \
  "$wheel" "${TEST_PINS[@]}" >&2
"$venv/bin/python" -m pip check >&2 || fail "the pinned set is inconsistent (pip check above)"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cp tests/python/test_*.py "$scratch/"
cd "$scratch"
env -i HOME="$scratch" PATH="$venv/bin:/usr/bin:/bin" LANG=C.UTF-8 \
  timeout 300 "$venv/bin/python" -m pytest -q -p no:cacheprovider "$scratch" ||
  fail "the installed wheel's tests failed (above)"
