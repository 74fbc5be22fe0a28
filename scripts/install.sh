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
# Usage: scripts/install.sh PREFIX [--state-dir DIR]
#   --state-dir DIR   as root, also makes the shared state directory DIR and its groups/ and
#                     processes/ (root's, mode 1777) before any user can: the deployment the
#                     README's security model calls safe on a shared node (a directory another
#                     user made first is refused by every other user's processes). Where
#                     /etc/tmpfiles.d exists it writes /etc/tmpfiles.d/cuquota.conf, so that
#                     systemd-tmpfiles makes them again at boot (/dev/shm is emptied). Name DIR
#                     in /etc/cuquota.conf (state_dir = DIR) so that no variable moves it.
# Builds in release mode first (a few minutes the first time); CUQUOTA_INSTALL_FROM=DIR installs
# what is already built in DIR (a target/<profile> directory) instead.
set -euo pipefail
usage() {
    echo "usage: $0 PREFIX [--state-dir DIR]   (e.g. $0 \$HOME/.local)" >&2
    exit 2
}
prefix=""
state_dir=""
while [ $# -gt 0 ]; do
    case $1 in
        --state-dir)
            [ $# -ge 2 ] && [ -n "$2" ] || usage
            state_dir=$2
            shift 2
            ;;
        -*) usage ;;
        *)
            [ -z "$prefix" ] && [ -n "$1" ] || usage
            prefix=$1
            shift
            ;;
    esac
done
[ -n "$prefix" ] || usage
if [ -n "$state_dir" ]; then
    case $state_dir in
        /proc | /proc/* | /sys | /sys/*) echo "install.sh: $state_dir cannot be a state directory" >&2; exit 2 ;;
        /*) ;;
        *) echo "install.sh: --state-dir needs an absolute path, not $state_dir" >&2; exit 2 ;;
    esac
    if [ "$(id -u)" != 0 ]; then
        echo "install.sh: --state-dir makes a directory for every user's processes: run it as root" >&2
        exit 1
    fi
fi
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
if [ -n "$state_dir" ]; then
    # Each must be a real directory of root's: one another user made first (or a link) is
    # refused by every other user's processes, so it is not taken over silently either.
    for d in "$state_dir" "$state_dir/groups" "$state_dir/processes"; do
        if [ -L "$d" ] || { [ -e "$d" ] && { [ ! -d "$d" ] || [ "$(stat -c %u "$d")" != 0 ]; }; }; then
            echo "install.sh: $d exists and is not a directory of root's ($(stat -c 'owner uid %u, mode %a, %F' "$d")): remove it, then run this again" >&2
            exit 1
        fi
        mkdir -p "$d"
        chown 0:0 "$d"
        chmod 1777 "$d"
    done
    if [ -d /etc/tmpfiles.d ]; then
        cat >/etc/tmpfiles.d/cuquota.conf <<EOT
# cuquota's shared state directory, made by root at boot (scripts/install.sh --state-dir)
d $state_dir 1777 root root -
d $state_dir/groups 1777 root root -
d $state_dir/processes 1777 root root -
EOT
        echo "== state directory $state_dir (and groups/, processes/): root's, mode 1777; made again at boot by /etc/tmpfiles.d/cuquota.conf" >&2
    else
        echo "== state directory $state_dir (and groups/, processes/): root's, mode 1777; /etc/tmpfiles.d is missing, so make them again after a reboot (run this again)" >&2
    fi
fi
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
