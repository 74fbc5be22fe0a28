#!/usr/bin/env bash
# Runs every test: formatting, lints, unit tests, and the integration tests that start real
# processes under LD_PRELOAD against the shim (shim/, a stand-in libcuda.so.1). CI runs
# exactly this (.ci/run).
#
# Needs: the Rust toolchain, gcc, and Python 3.10+ with venv and pip. The real-client tests
# run NVIDIA's cuda-bindings, cuda.core and numba-cuda: the first run downloads ~100 MB of
# pinned wheels from PyPI into target/real-clients/ (~480 MB on disk with the venv; later
# runs reuse it, and CUQUOTA_WHEELHOUSE=DIR installs from a copied wheelhouse without
# network). The wheel test downloads ~44 MB of pinned wheels into target/wheel/ the first
# time. The first build takes several minutes; the tests themselves a few minutes.
# For a first check without root, packages or downloads: scripts/quick-test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
step() { echo "== $(date +%H:%M:%S) $*"; }
# The views' tests run real tools: tmux (the live view in a real terminal), and Debian's
# prometheus package (promtool check metrics; a Prometheus server scraping the exporter).
missing=()
command -v tmux >/dev/null || missing+=(tmux)
{ command -v promtool >/dev/null && command -v prometheus >/dev/null; } || missing+=(prometheus)
if [ ${#missing[@]} -gt 0 ]; then
    if command -v apt-get >/dev/null; then
        step "apt-get install ${missing[*]} (Debian's packages, for the cuquota top and metrics tests)"
        sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    else
        echo "!!! ============================================================================"
        echo "!!! NO apt-get: ${missing[*]} cannot be installed. The tests that need them print"
        echo "!!! SKIPPED and DO NOT RUN: cuquota top's live view under tmux, promtool check"
        echo "!!! metrics, a Prometheus server scraping cuquota metrics. Install them and rerun."
        echo "!!! ============================================================================"
        export CUQUOTA_TEST_NO_APT=1
    fi
fi
# The SPANK plugin's test runs Debian's Slurm (slurmctld, slurmd, srun) on loopback, and the
# plugin is built against libslurm-dev's spank.h version: installed with apt-get the first
# time (10 packages, ~5 MB download, ~20 MB on disk).
if ! command -v slurmd >/dev/null || ! command -v slurmctld >/dev/null ||
    ! command -v srun >/dev/null || [ ! -f /usr/include/slurm/spank.h ]; then
    step "Slurm for the SPANK plugin and its test: apt-get install slurmctld slurmd slurm-client libslurm-dev (~5 MB download)"
    if [ "$(id -u)" != 0 ]; then
        echo "test.sh: Slurm is not installed and this is not root: run" >&2
        echo "  apt-get install slurmctld slurmd slurm-client libslurm-dev iproute2" >&2
        exit 1
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        slurmctld slurmd slurm-client libslurm-dev iproute2 util-linux >/dev/null
fi
# The container test (tests/integration/containers.rs) runs `cuquota cdi`'s spec under Debian's
# podman 4.3.1 with runc, no image pulled (each container's root is an overlay of the host's):
# installed with apt-get the first time (30 packages, ~34 MB download, as root).
if ! command -v podman >/dev/null || ! command -v runc >/dev/null; then
    step "podman and runc for the CDI spec's container test: apt-get install podman runc (~34 MB download)"
    if [ "$(id -u)" != 0 ]; then
        echo "test.sh: podman is not installed and this is not root: run" >&2
        echo "  apt-get install podman runc" >&2
        exit 1
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc >/dev/null
fi
step "cargo fmt --check"
cargo fmt --all -- --check
step "cargo clippy (builds everything in check mode: minutes the first time)"
cargo clippy --workspace --all-targets -q -- -D warnings
# Build everything once (debug): the interposer libcuquota.so, the shim libcuda.so and the
# cuquota CLI land in <target>/debug, and the integration tests' harness uses them from
# there instead of building them again (tests/integration/common.rs). Cargo's own progress
# line shows while it builds.
step "cargo build --workspace --all-targets (debug)"
cargo build --workspace --all-targets
target_dir=$(cargo metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
export CUQUOTA_TEST_BUILD="$target_dir/debug"
# The policy tests' build of the library: the same code with the policy path baked in at
# <target>/policy-test/etc/cuquota.conf (a build-time knob; nothing at run time moves it), in a
# target dir of its own (the first time a minute or more: its dependencies are built again).
step "the library with the tests' policy path (cargo build -p cuquota --lib into $target_dir/policy-build)"
CUQUOTA_BUILD_POLICY_PATH="$target_dir/policy-test/etc/cuquota.conf" \
    cargo build -q -p cuquota --lib --target-dir "$target_dir/policy-build"
step "Python venv for the real-client tests (first time: ~100 MB from PyPI into target/real-clients)"
scripts/real-clients-env.sh >/dev/null
step "the census: the driver catalogue against NVIDIA's cuda.h (first time: ~3 MB wheel, or the real clients' copy)"
scripts/census.sh
step "validators for the CDI spec and the pod example (first time: ~16 MB from PyPI into target/k8s-tools)"
scripts/k8s-tools-env.sh >/dev/null
step "cargo test (unit and integration tests; the log is also in target/test.log)"
cargo test --workspace --no-fail-fast 2>&1 | tee target/test.log
# The wheel as a user installs it (pip wheel . builds in release mode: the first time a
# few minutes more; later runs reuse target/release). Its own timings are printed.
step "the wheel: build, auditwheel show, fresh venv, tests/python (first time: ~44 MB from PyPI into target/wheel)"
scripts/wheel-test.sh
# The wheel for glibc 2.17 and later (manylinux2014: RHEL/Rocky 8, Ubuntu 20.04), which the
# native wheel (this machine's glibc) cannot serve. Built with zig (the pinned ziglang and
# cargo-zigbuild from PyPI, ~100 MB the first time); build-wheel.sh fails unless `auditwheel
# show` confirms manylinux_2_17, and wheel-test.sh says it again and runs the wheel's tests in
# a fresh venv. About 3.5 minutes on 2 cores.
step "the manylinux2014 wheel: build with zig, auditwheel show, fresh venv, tests/python"
manylinux=target/wheel/dist-manylinux2014
rm -rf "$manylinux"
scripts/build-wheel.sh --manylinux2014 "$manylinux"
CUQUOTA_WHEEL=$(ls "$manylinux"/cuquota-*manylinux_2_17_*.whl) scripts/wheel-test.sh
if [ -n "${CUQUOTA_TEST_NO_APT:-}" ]; then
    echo "!!! NOT EVERYTHING RAN: without apt-get, ${missing[*]} could not be installed, and the"
    echo "!!! tests of cuquota top's live view (tmux) and of its metrics (promtool, Prometheus) were"
    echo "!!! SKIPPED. Install them (Debian: apt-get install ${missing[*]}) and rerun."
fi
step "done"
