#!/usr/bin/env bash
# Builds the wheel (`pip wheel .`; setup.py runs cargo) into DIR (default target/wheel/dist).
#
#   scripts/build-wheel.sh [--manylinux2014] [DIR]
#
# Without an option the wheel links against this machine's glibc: its platform tag, and the
# oldest glibc it loads on, is this machine's (manylinux_2_34 on Debian 12). That is the
# wheel scripts/wheel-test.sh (and so scripts/test.sh and CI) builds and tests.
#
# --manylinux2014: a wheel for glibc 2.17 and later (manylinux_2_17 = manylinux2014: RHEL 7
# and 8, Ubuntu 18.04 and 20.04 containers), with no container: zig links against glibc
# 2.17's symbol versions. The first run installs the pinned ziglang and cargo-zigbuild wheels
# from PyPI (about 100 MB; 450 MB installed) and auditwheel into target/zig/venv, and builds everything again
# for the target x86_64-unknown-linux-gnu.2.17 (minutes on 2 cores; later runs reuse
# target/x86_64-unknown-linux-gnu/). `auditwheel show` must then confirm manylinux_2_17.
set -euo pipefail
cd "$(dirname "$0")/.."
ZIG_PINS=(ziglang==0.17.0 cargo-zigbuild==0.24.0 auditwheel==6.4.2 pyelftools==0.32 packaging==25.0)
python=${PYTHON:-python3}
fail() {
  echo "build-wheel: $*" >&2
  exit 1
}
manylinux2014=
case "${1:-}" in
--manylinux2014) manylinux2014=1; shift ;;
-*) fail "unknown option $1 (usage: scripts/build-wheel.sh [--manylinux2014] [DIR])" ;;
esac
out=${1:-$PWD/target/wheel/dist}
mkdir -p "$out"
out=$(cd "$out" && pwd)
start=$(date +%s)
if [ -z "$manylinux2014" ]; then
  "$python" -m pip wheel --quiet --disable-pip-version-check --no-deps -w "$out" . >&2 ||
    fail "pip wheel . failed"
else
  venv=$PWD/target/zig/venv
  if [ "$(cat "$venv/pins.txt" 2>/dev/null)" != "${ZIG_PINS[*]}" ]; then
    echo "build-wheel: installing ${ZIG_PINS[*]} from PyPI into $venv (about 100 MB)" >&2
    rm -rf "$venv"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${ZIG_PINS[@]}" >&2 ||
      fail "cannot install ${ZIG_PINS[*]} (PyPI unreachable?)"
    echo "${ZIG_PINS[*]}" >"$venv/pins.txt"
  fi
  # pip builds in an isolated environment whose python lacks ziglang: cargo-zigbuild finds
  # zig on PATH instead (the binary inside the ziglang package).
  zig_dir=$("$venv/bin/python" -c 'import os, ziglang; print(os.path.dirname(ziglang.__file__))')
  PATH="$venv/bin:$zig_dir:$PATH" CUQUOTA_GLIBC=2.17 "$venv/bin/python" -m pip wheel --quiet \
    --disable-pip-version-check --no-deps -w "$out" . >&2 || fail "pip wheel . (zig, glibc 2.17) failed"
  wheel=$(ls "$out"/cuquota-*manylinux_2_17_*.whl 2>/dev/null) ||
    fail "the build made no manylinux_2_17 wheel (a symbol newer than glibc 2.17?): $(ls "$out")"
  shown=$("$venv/bin/auditwheel" show "$wheel")
  echo "$shown" | tr '\n' ' ' | grep -q 'consistent with the following platform tag: "manylinux_2_17_' ||
    fail "auditwheel does not confirm manylinux_2_17:
$shown"
  echo "build-wheel: auditwheel show: consistent with manylinux_2_17" >&2
fi
echo "build-wheel: $(ls "$out"/cuquota-*.whl | tr '\n' ' ')in $(($(date +%s) - start)) s" >&2
