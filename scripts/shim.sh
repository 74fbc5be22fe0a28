#!/usr/bin/env bash
# Builds the stand-in driver (shim/) and lays it out as a driver directory:
#   target/<profile>/stand-in/libcuda.so.1 (+ libcuda.so)
# Usage: scripts/stand-in.sh [release|debug]   — prints the directory.
set -euo pipefail
cd "$(dirname "$0")/.."
profile=${1:-release}
flag=(); [ "$profile" = release ] && flag=(--release)
cargo build -q "${flag[@]}" -p cuquota-shim >&2
dir=target/$profile/stand-in
mkdir -p "$dir"
cp -f "target/$profile/libcuda.so" "$dir/libcuda.so.1"
ln -sf libcuda.so.1 "$dir/libcuda.so"
echo "$PWD/$dir"
