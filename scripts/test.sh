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
bash scripts/system-deps.sh --tests
bash scripts/tests/system-deps.sh

echo "== interop tools (Python venv, node_modules)"
bash interop/setup.sh
# The interop tests skip when these tools are missing (a developer without them still runs the
# rest); here they were just installed, so a skip would hide a failure: make it one.
export AGENTNET_INTEROP_REQUIRED=1

echo "== the benchmarks fail when their requests fail (wrk's output judged, scripts/lib/wrk.sh)"
bash scripts/tests/wrk-check.sh

echo "== imports run one way: no circle between the modules of any crate"
for crate in did a2a discovery node; do bash scripts/tests/module-cycles.sh "$crate" >/dev/null; done

echo "== the house in figures: rooms, long files and functions, glob imports (fails past a limit)"
LAYOUT="$(bash scripts/layout.sh --check)" || { echo "$LAYOUT" >&2; exit 1; }
echo "$LAYOUT" | tail -1

echo "== the test graph reuses every third-party unit of the binary's build (cargo's unit graph, no build)"
bash scripts/tests/shared-build.sh

echo "== build: the agentnet binary, exactly as scripts/run.sh builds it"
cargo build --locked -p agentnet --bin agentnet

echo "== scripts/run.sh: flags go to the testnet, commands to agentnet"
bash scripts/tests/run-args.sh

echo "== docs/GUIDE.md quick start, run as written"
bash scripts/tests/guide.sh

echo "== build: tests, examples and benchmarks (only what the tests add: the binary's crates are reused)"
# A second RocksDB build means the test graph resolved a build dependency of librocksdb-sys
# differently from the binary's graph (it did: criterion 0.5 pulled itertools 0.10, which bindgen
# uses too; cargo then built bindgen's itertools with the test graph's features and profile, so
# bindgen, and RocksDB's C++ behind it, were compiled again: about 10 minutes on 2 cores). Fail then.
BUILD_LOG="$(mktemp)"
trap 'rm -f "$BUILD_LOG"' EXIT
cargo test --workspace --lib --bins --tests --examples --benches --no-run --locked 2>&1 | tee "$BUILD_LOG"
if grep -q 'Compiling librocksdb-sys' "$BUILD_LOG"; then
  echo "FAIL: the test build compiled librocksdb-sys again after the binary's build;" \
       "scripts/run.sh and scripts/test.sh no longer share one RocksDB build" >&2
  exit 1
fi

echo "== cargo test --workspace"
# agentnet-fuzz's tests are the fuzzers' short pass: every target over its corpus, its
# regressions and a fixed batch of mutations (README.md, "Fuzzing"; AFL runs are scripts/fuzz.sh).
cargo test --workspace --lib --bins --tests --examples --locked
cargo test --workspace --doc --locked

echo "== cargo test -p agentnet-did --features ssi"
cargo test -p agentnet-did --features ssi --lib --locked
