#!/usr/bin/env bash
# The main job on the stand-in driver: a TensorFlow-allow_growth-style allocator (regions
# doubling from 2 MiB, ×0.9 back-off on CUDA_ERROR_OUT_OF_MEMORY) on a simulated 8 GiB GPU,
# capped by cuquota at 6 GiB. Shows the refusal lines, the back-off explanation, the exit
# summary, then the report and chart made from the process's own trace.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== building cuquota, its CLI and the stand-in driver (release)"
cargo build -q --release --workspace
driver_dir=$(scripts/stand-in.sh release)
out=target/demo
mkdir -p "$out"
gcc -O2 -Wall -o "$out/bfc_growth" tests/clients/bfc_growth.c -ldl

echo
echo "== running the workload on a simulated 8 GiB GPU with CUQUOTA_LIMIT=6GiB"
echo "   LD_PRELOAD=target/release/libcuquota.so CUQUOTA_LIMIT=6GiB $out/bfc_growth"
echo
LD_LIBRARY_PATH="$driver_dir" CUDA_SHIM_MEMORY=8GiB \
  LD_PRELOAD="$PWD/target/release/libcuquota.so" CUQUOTA_LIMIT=6GiB \
  "$out/bfc_growth"
