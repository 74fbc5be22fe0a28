#!/usr/bin/env bash
# A first check, not CI's: the unit tests and the integration tests that need nothing but the
# Rust toolchain, gcc and the shim. Nothing installed (no apt-get, no sudo), nothing
# downloaded beyond cargo's crates, no container runtime, Slurm, Python venv or second build
# of the library; a normal user will do. What it leaves out is listed below and runs in
# scripts/test.sh, which CI runs.
#
#   scripts/quick-test.sh [FILTER…]     FILTER: only integration tests whose names contain it
set -euo pipefail
cd "$(dirname "$0")/.."
step() { echo "== $(date +%H:%M:%S) $*"; }
# Left out, with what each needs:
skip=(
    containers::                 # podman and runc, as root
    slurm::                      # Debian's Slurm, as root
    policy::                     # a second build of the library, and root for a mount namespace
    groups::trust::              # root, to run two other users
    hostile_state::              # root, to run two other users
    privileged::                 # root: a setuid client under /etc/ld.so.preload
    the_install_script_makes_a_root_state_directory   # root
    unannounced_growth::in_another_pid_namespace      # unshare --pid (root)
    top::namespaces::            # unshare --pid (root)
    top::promtool_passes_the_exposition              # Debian's prometheus package
    top::the_live_view_runs_in_a_real_terminal       # tmux
    top::a_real_prometheus_scrapes_the_exporter      # Debian's prometheus package
    top::living::prometheus_sees_a_storm_of_kills    # Debian's prometheus package
    real_clients::               # ~100 MB of NVIDIA's Python packages from PyPI
    nvml_clients::               # the same venv (pynvml, nvitop, gpustat)
    stacks::cuda_bindings_allocations_are_placed_in_the_binding   # the same venv
    kubernetes::                 # ~16 MB of validators from PyPI
    crash_hunt::                 # many runs of one client
    reliability_soak::           # runs for seconds per path
)
args=()
for s in "${skip[@]}"; do args+=(--skip "$s"); done
start=$(date +%s)
step "cargo build --workspace (debug: libcuquota.so, the shim, cuquota)"
cargo build --workspace
target_dir=$(cargo metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
export CUQUOTA_TEST_BUILD="$target_dir/debug"
step "unit tests (cargo test --workspace --lib --bins)"
cargo test --workspace --lib --bins -q
step "integration tests, less ${#skip[@]} groups that need root, packages or downloads"
cargo test -q -p cuquota --test integration -- "${args[@]}" "$@"
step "done in $(($(date +%s) - start)) s (scripts/test.sh runs everything, as CI does)"
