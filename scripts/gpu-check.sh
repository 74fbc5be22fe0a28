#!/usr/bin/env bash
# Checks cuquota on a machine with an NVIDIA GPU, with the frameworks already installed in
# its python3 (PyTorch, JAX with its CUDA plugin, CuPy); installs nothing. Builds cuquota
# (release), then runs each check in fresh processes under LD_PRELOAD with the quota:
#
#   torch-default     PyTorch's caching allocator: mem_get_info() and total_memory show the
#                     quota, 640 MiB tensors fill it, the next raises torch.OutOfMemoryError,
#                     every segment is a live allocation in the trace, empty_cache gives all back
#   torch-expandable  the same with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (cuMemCreate)
#   torch-async       the same with PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync (pools)
#   jax               default preallocation: bytes_limit is 0.75 × the quota (not of the card);
#                     an array larger than the quota fails with RESOURCE_EXHAUSTED
#   cupy-default      CuPy's default pool: memGetInfo shows the quota, arrays fill it, the next
#                     raises OutOfMemoryError, freeing the pool gives all back
#   cupy-async        the same with cupy.cuda.MemoryAsyncPool
#   bfc-growth        tests/clients/bfc_growth.c (the demo's allow_growth workload) on the real
#                     driver under 3/4 of the quota: refusals, the back-off line, success
#   arrays            tests/clients/array_sizes.c: for five large CUDA array shapes (2D, 3D,
#                     layered, cubemap, mipmapped), the driver's free-memory drop across the
#                     creation matches the memory requirements of a deferred-mapping array of
#                     the same shape (how cuquota learns an array's size), and under cuquota
#                     the trace charges each array exactly that
#   ctx-reset         the driver API through ctypes: 512 MiB cuMemAlloc + 512 MiB cuMemAllocAsync
#                     (default pool), then cuDevicePrimaryCtxReset: the driver's own free memory
#                     comes back, pool allocations included, cuquota credits both, one trace event
#   overhead          10,000 cudaMalloc/cudaFree pairs of 1 MiB (cupy.cuda.runtime) with and
#                     without cuquota; the ratio must stay under 1.5
#   vmm               ctypes on libcuda: without cuquota, memory made by cuMemCreate is freed
#                     only once released and unmapped (retain + release frees nothing mapped;
#                     what cuMemAddressFree of a mapped range does is recorded); under cuquota
#                     the samples' create-map-release pattern fits exactly quota / 512 MiB
#   footprint-torch, footprint-torch-async, footprint-cupy-async, footprint-jax
#                     under CUQUOTA_COUNT=footprint (the default; every check above pins
#                     allocations): the framework fills the quota, "frees" it into its cache,
#                     then plain cuMemAlloc fills again; nvidia-smi, sampled every 0.1 s, must
#                     never see the process hold more than the quota + 128 MiB; cuquota's own
#                     footprint figures (trace summary) are printed beside NVML's
#   nvml              NVML read by processes that never call CUDA, in a group (CUQUOTA_GROUP,
#                     CUQUOTA_STATE_DIR under the work folder) of PyTorch members holding 1 GiB
#                     each: nvidia-smi with the variables shows total = the quota and used = the
#                     one member's footprint (its trace summary; whole MiB), outside the group the
#                     quota and 0 used; pynvml (SKIPPED, never PASS, where it is not importable)
#                     with two members: total = the quota, used = both footprints; without the
#                     variables, the real figures
#   questions         scripts/gpu_check/questions/*.c, without cuquota: the real driver's own
#                     answers (cuMemGetInfo's free and NVML's figure for the process, at each
#                     step) to what cuda.h leaves open: pool memory after cuCtxDestroy, after
#                     the last cuDevicePrimaryCtxRelease; export + self-import + release; a
#                     deferred-mapping array's map + release; a DEVICE_LOCALITY_DOMAIN
#                     allocation where the driver has it; cuCtxSetLimit(MALLOC_HEAP_SIZE,
#                     256 MiB): taken at the call or at the first kernel launch (a kernel
#                     loaded from PTX, launched once); a kernel with a 64 KiB local array per
#                     thread over every SM: what the launch takes, and whether it stays.
#                     Recorded, not judged: FAIL only if a program cannot run
#
# One PASS/FAIL line per check with its numbers (SKIPPED, with why, for a part that cannot
# run here), then "N passed, M failed[, K skipped]"; with $OUT set, everything measured also
# goes to $OUT/gpu-check.json. Exit status 0 only if none fails.
#
# Usage: scripts/gpu-check.sh [--dry-run] [QUOTA]     QUOTA as CUQUOTA_LIMIT takes it (8GiB)
#   --dry-run        print what would run, run nothing
#   CUQUOTA_LIB=...  use this libcuquota.so instead of building (e.g. where cargo is missing)
#   CHECKS="a b"     run only these checks
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

dry=0
quota=8GiB
for arg in "$@"; do
  case $arg in
    --dry-run) dry=1 ;;
    -h | --help)
      sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'
      exit 0
      ;;
    *) quota=$arg ;;
  esac
done

# Budget: the whole script (the build included) must finish in 8 minutes; a check that would
# start with less than MIN_CHECK seconds left is reported as not run.
BUDGET=480
MIN_CHECK=20
declare -A LIMIT=(
  [torch-default]=90 [torch-expandable]=90 [torch-async]=90 [jax]=120
  [cupy-default]=60 [cupy-async]=60 [bfc-growth]=60 [arrays]=60 [ctx-reset]=40 [overhead]=120
  [vmm]=40 [footprint-torch]=60 [footprint-torch-async]=60 [footprint-cupy-async]=50
  [footprint-jax]=60 [nvml]=90 [questions]=60
)
read -r -a checks <<<"${CHECKS:-torch-default torch-expandable torch-async jax cupy-default cupy-async bfc-growth arrays ctx-reset overhead vmm footprint-torch footprint-torch-async footprint-cupy-async footprint-jax nvml questions}"

py=python3
work=$PWD/target/gpu-check
quota_bytes=$($py scripts/gpu_check parse-size "$quota") || exit 2
[ "$quota_bytes" -ge $((2 << 30)) ] || {
  echo "gpu-check: a quota of at least 2 GiB is needed (got $quota)" >&2
  exit 2
}

for check in "${checks[@]}"; do
  [ -n "${LIMIT[$check]:-}" ] || {
    echo "gpu-check: unknown check $check" >&2
    exit 2
  }
done

show() { printf '+ %s\n' "$*"; }

echo "== gpu-check: quota $quota ($quota_bytes bytes)"
if [ -n "${CUQUOTA_LIB:-}" ]; then
  lib=$(realpath "$CUQUOTA_LIB")
  echo "== using CUQUOTA_LIB=$lib (not building)"
else
  lib=$PWD/target/release/libcuquota.so
  show cargo build --release -p cuquota
  if [ $dry = 0 ]; then
    command -v cargo >/dev/null || {
      echo "gpu-check: no cargo here; build elsewhere and set CUQUOTA_LIB=path/to/libcuquota.so" >&2
      exit 2
    }
    cargo build --release -p cuquota || {
      echo "gpu-check: the build failed (offline without a filled cargo cache? set CUQUOTA_LIB)" >&2
      exit 2
    }
  fi
fi

[ $dry = 1 ] || rm -rf "$work"
mkdir -p "$work"

# The bfc-growth workload is compiled here, as scripts/demo.sh does.
if [[ " ${checks[*]} " == *" bfc-growth "* ]]; then
  mkdir -p "$work/bfc-growth"
  show gcc -O2 -Wall -o "$work/bfc-growth/bfc_growth" tests/clients/bfc_growth.c -ldl
  if [ $dry = 0 ] && ! gcc -O2 -Wall -o "$work/bfc-growth/bfc_growth" tests/clients/bfc_growth.c -ldl; then
    echo "gpu-check: gcc failed; bfc-growth will fail" >&2
  fi
fi

# So is the arrays workload.
if [[ " ${checks[*]} " == *" arrays "* ]]; then
  mkdir -p "$work/arrays"
  show gcc -O2 -Wall -Itests/clients -o "$work/arrays/array_sizes" tests/clients/array_sizes.c -ldl
  if [ $dry = 0 ] && ! gcc -O2 -Wall -Itests/clients -o "$work/arrays/array_sizes" tests/clients/array_sizes.c -ldl; then
    echo "gpu-check: gcc failed; arrays will fail" >&2
  fi
fi

# And the driver questions, one program each.
if [[ " ${checks[*]} " == *" questions "* ]]; then
  mkdir -p "$work/questions"
  for src in scripts/gpu_check/questions/*.c; do
    bin=$work/questions/$(basename "$src" .c)
    show gcc -O2 -Wall -Itests/clients -o "$bin" "$src" -ldl
    if [ $dry = 0 ] && ! gcc -O2 -Wall -Itests/clients -o "$bin" "$src" -ldl; then
      echo "gpu-check: gcc failed; questions will fail" >&2
    fi
  done
fi

for check in "${checks[@]}"; do
  dir=$work/$check
  mkdir -p "$dir"
  left=$((BUDGET - SECONDS))
  limit=${LIMIT[$check]}
  [ "$limit" -le "$left" ] || limit=$left
  cmd=(timeout -k 5 "$limit" "$py" scripts/gpu_check "$check" --quota "$quota_bytes"
    --lib "$lib" --work "$dir" --timeout $((limit - 5)))
  if [ $dry = 1 ]; then
    show "${cmd[@]}"
    "$py" scripts/gpu_check "$check" --quota "$quota_bytes" --lib "$lib" --work "$dir" --dry-run
    continue
  fi
  if [ "$limit" -lt $MIN_CHECK ]; then
    echo "FAIL $check: not run, the 8-minute budget is spent"
    echo "not run" >"$dir/rc"
    continue
  fi
  "${cmd[@]}"
  rc=$?
  echo "$rc" >"$dir/rc"
  # The check prints its own PASS/FAIL line; a killed one cannot.
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    echo "FAIL $check: killed after $limit s"
  fi
done
[ $dry = 1 ] && exit 0

json=()
[ -n "${OUT:-}" ] && json=(--json "$OUT/gpu-check.json")
$py scripts/gpu_check summary --work "$work" --quota "$quota_bytes" "${json[@]}" "${checks[@]}"
