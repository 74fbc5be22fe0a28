#!/usr/bin/env bash
# The main job on the shim: a TensorFlow-allow_growth-style allocator (regions
# doubling from 2 MiB, ×0.9 back-off on CUDA_ERROR_OUT_OF_MEMORY) on a simulated 8 GiB GPU,
# capped by cuquota at 6 GiB. Shows the refusal lines, the back-off explanation and the exit
# summary, then the report and the chart made from the process's own trace. Every command
# it shows with `$` can be pasted as it is (from the repository's root).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== building cuquota, its CLI and the shim (cargo build --release: a few minutes the first time)"
cargo build --release --workspace
driver_dir=$(scripts/shim.sh release)
out=target/demo
mkdir -p "$out"
rm -f "$out"/trace-*.jsonl* "$out/memory.svg" "$out/perfetto.json"
echo "== compiling the workload (gcc tests/clients/bfc_growth.c)"
gcc -O2 -Wall -o "$out/bfc_growth" tests/clients/bfc_growth.c -ldl
cuquota=target/release/cuquota

# Shows a command as it can be pasted, then runs exactly it.
show_and_run() {
    printf '   $'
    printf ' %q' "$@"
    printf '\n\n'
    "$@"
}

echo
echo "== running the workload on a simulated 8 GiB GPU (the shim: LD_LIBRARY_PATH, CUDA_SHIM_MEMORY), capped at 6 GiB"
show_and_run env LD_LIBRARY_PATH="$driver_dir" CUDA_SHIM_MEMORY=8GiB \
  "$cuquota" run --limit 6GiB --trace "$out/trace-%p.jsonl" "$out/bfc_growth"
trace=$(ls "$out"/trace-*.jsonl)

echo
echo "== what the trace says"
show_and_run "$cuquota" report "$trace"

echo
echo "== charts"
show_and_run "$cuquota" plot "$trace" -o "$out/memory.svg"
show_and_run "$cuquota" export --format chrome "$trace" -o "$out/perfetto.json"
echo "   $out/memory.svg     in-use memory over time, quota line, refusals marked"
echo "   $out/perfetto.json  open in https://ui.perfetto.dev (counter tracks per GPU)"

echo
echo "== live: cuquota top while the workload holds its pool (the same run in the background,"
echo "   keeping its pool 4 s; its own state directory, so that only it is shown)"
state="$out/state"
rm -rf "$state" "$out/held.log"
env LD_LIBRARY_PATH="$driver_dir" CUDA_SHIM_MEMORY=8GiB CUQUOTA_STATE_DIR="$state" BFC_HOLD_MS=4000 \
  "$cuquota" run --limit 6GiB --log off "$out/bfc_growth" >"$out/held.log" 2>&1 &
workload=$!
trap 'kill "$workload" 2>/dev/null || true' EXIT
# Until it has grown its pool and registered (at most 30 s).
for _ in $(seq 300); do
  grep -q "bfc: holding the pool" "$out/held.log" 2>/dev/null && break
  kill -0 "$workload" 2>/dev/null || break
  sleep 0.1
done
if ! grep -q "bfc: holding the pool" "$out/held.log"; then
  echo "the workload did not reach its pool in 30 s:" >&2
  cat "$out/held.log" >&2
  exit 1
fi
show_and_run "$cuquota" top --once --state-dir "$state"
wait "$workload"
trap - EXIT
echo "   live: $cuquota top --state-dir $state (q quits; without --state-dir: every governed process on the machine)"
