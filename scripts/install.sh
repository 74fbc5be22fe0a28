#!/usr/bin/env bash
# Installs cuquota into PREFIX:
#   PREFIX/bin/cuquota                           the CLI (`cuquota run` finds the library in ../lib)
#   PREFIX/lib/libcuquota.so                     the interposer
#   PREFIX/lib/libcuquota_audit.so               the rtld-audit module `cuquota run` sets as
#                                                LD_AUDIT (covers RTLD_DEEPBIND plugins)
#   PREFIX/lib/libcuquota_spank.so               the Slurm SPANK plugin (--gpu-mem; see the README's
#                                                Slurm section for plugstack.conf)
#   PREFIX/share/cuquota/shim/libcuda.so.1       the stand-in driver, to try cuquota without a GPU
#                                                (only used when named: LD_LIBRARY_PATH=PREFIX/share/cuquota/shim)
# Usage: scripts/install.sh PREFIX
# Builds in release mode first (a few minutes the first time); CUQUOTA_INSTALL_FROM=DIR installs
# what is already built in DIR (a target/<profile> directory) instead.
set -euo pipefail
if [ $# -ne 1 ] || [ -z "$1" ]; then
    echo "usage: $0 PREFIX   (e.g. $0 \$HOME/.local)" >&2
    exit 2
fi
prefix=$1
cd "$(dirname "$0")/.."
built=${CUQUOTA_INSTALL_FROM:-}
if [ -z "$built" ]; then
    echo "== building cuquota, its CLI and the stand-in driver (cargo build --release; minutes the first time)" >&2
    cargo build --release --workspace
    target_dir=$(cargo metadata --format-version 1 --no-deps |
        sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
    built=$target_dir/release
fi
for f in cuquota libcuquota.so libcuquota_audit.so libcuquota_spank.so libcuda.so; do
    [ -f "$built/$f" ] || { echo "install.sh: $built/$f is not built" >&2; exit 1; }
done
echo "== installing into $prefix" >&2
mkdir -p "$prefix/bin" "$prefix/lib" "$prefix/share/cuquota/shim"
install -m 755 "$built/cuquota" "$prefix/bin/cuquota"
install -m 755 "$built/libcuquota.so" "$prefix/lib/libcuquota.so"
install -m 755 "$built/libcuquota_audit.so" "$prefix/lib/libcuquota_audit.so"
install -m 755 "$built/libcuquota_spank.so" "$prefix/lib/libcuquota_spank.so"
install -m 755 "$built/libcuda.so" "$prefix/share/cuquota/shim/libcuda.so.1"
ln -sf libcuda.so.1 "$prefix/share/cuquota/shim/libcuda.so"
# The stand-in also answers as NVML: the same file, so the loader maps one object for both.
ln -sf libcuda.so.1 "$prefix/share/cuquota/shim/libnvidia-ml.so.1"
cat >&2 <<EOT
   $prefix/bin/cuquota
   $prefix/lib/libcuquota.so
   $prefix/lib/libcuquota_audit.so
   $prefix/lib/libcuquota_spank.so   (the Slurm SPANK plugin, for the Slurm release it was built against)
   $prefix/share/cuquota/shim/libcuda.so.1   (the stand-in driver)
   $prefix/share/cuquota/shim/libnvidia-ml.so.1 -> libcuda.so.1   (its NVML)
Try it on a simulated 8 GiB GPU:
   LD_LIBRARY_PATH=$prefix/share/cuquota/shim CUDA_SHIM_MEMORY=8GiB \\
     $prefix/bin/cuquota run --limit 6GiB YOUR-PROGRAM
EOT
