#!/usr/bin/env bash
# Runs every test: formatting, lints, unit tests, and the integration tests that start real
# processes under LD_PRELOAD against the shim (shim/, a stand-in libcuda.so.1). Needs only the
# Rust toolchain and gcc. CI runs exactly this (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets -q -- -D warnings
echo "== cargo test"
# Build everything once (debug): the interposer libcuquota.so, the shim libcuda.so and the
# cuquota CLI land in <target>/debug, and the integration tests' harness uses them from
# there instead of building them again (tests/integration/common.rs).
cargo build --workspace --all-targets -q
target_dir=$(cargo metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
export CUQUOTA_TEST_BUILD="$target_dir/debug"
cargo test --workspace --no-fail-fast 2>&1 | tee target/test.log
