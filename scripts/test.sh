#!/usr/bin/env bash
# Run every agentnet test: unit, integration, interop against the official SDKs (PyPI a2a-sdk and
# anp, npm @a2a-js/sdk and @digitalbazaar/did-method-key), and the `ssi` feature.
# Installs what the interop tests need (a Python venv, node_modules) on first use.
set -euo pipefail
cd "$(dirname "$0")/.."

# One build cache for all checkouts of this repository on the machine (CI clones afresh).
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/agentnet/target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

echo "== system packages"
bash scripts/system-deps.sh
bash scripts/tests/system-deps.sh

echo "== interop tools (Python venv, node_modules)"
bash interop/setup.sh

echo "== cargo test --workspace"
cargo test --workspace --lib --bins --tests --examples --locked
cargo test --workspace --doc --locked

echo "== benchmarks compile (run them with cargo bench; figures in docs/BENCHMARKS.md)"
# Built as test executables, not run: the same build graph as above, so nothing (RocksDB!) is
# compiled twice, as `cargo check` would.
cargo test --workspace --benches --no-run --locked

echo "== cargo test -p agentnet-did --features ssi"
cargo test -p agentnet-did --features ssi --lib --locked
