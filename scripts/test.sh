#!/usr/bin/env bash
# Runs every test: formatting, lints, unit tests, and the integration tests that start real
# processes under LD_PRELOAD against the stand-in driver. Needs only the Rust toolchain and gcc.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets -q -- -D warnings
echo "== cargo test"
cargo build --workspace --all-targets -q
cargo test --workspace --no-fail-fast 2>&1 | tee target/test.log
