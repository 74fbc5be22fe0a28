#!/usr/bin/env bash
# Builds the shim (shim/, the stand-in libcuda.so.1) and lays it out as a driver directory:
#   target/<profile>/shim/libcuda.so.1 (+ libcuda.so, and libnvidia-ml.so.1: the shim also
#   answers as NVML, and a link to the same file makes the loader map one object for both)
# Usage: scripts/shim.sh [release|debug]   — prints the directory.
set -euo pipefail
cd "$(dirname "$0")/.."
profile=${1:-release}
flag=(); [ "$profile" = release ] && flag=(--release)
cargo build -q "${flag[@]}" -p cuquota-shim >&2
dir=target/$profile/shim
mkdir -p "$dir"
cp -f "target/$profile/libcuda.so" "$dir/libcuda.so.1"
ln -sf libcuda.so.1 "$dir/libcuda.so"
ln -sf libcuda.so.1 "$dir/libnvidia-ml.so.1"
echo "$PWD/$dir"
