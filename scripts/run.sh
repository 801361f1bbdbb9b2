#!/usr/bin/env bash
# Build and run agentnet. With no arguments: `agentnet testnet`, a local network of nodes on
# loopback that publishes sample agents and discovers them (the newcomer's first command).
# Flags alone go to the testnet (`bash scripts/run.sh --keep`); a command goes to `agentnet`
# instead (e.g. `bash scripts/run.sh up`), as do `--help` and `--version`.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/agentnet/target}"
bash scripts/system-deps.sh
case "${1:-}" in
  "") set -- testnet ;;
  -h | --help | -V | --version) ;;
  -*) set -- testnet "$@" ;;
esac
BIN="$CARGO_TARGET_DIR/debug/agentnet"
if [ ! -x "$BIN" ]; then
  echo "scripts/run.sh: the first build compiles RocksDB's C++ and the libp2p stack: 12 to 30" \
       "minutes on 2 cores, with cargo's progress below; later runs start in seconds" >&2
fi
# The same build as scripts/test.sh's, so that the tests reuse it; cargo shows its progress.
cargo build --locked -p agentnet --bin agentnet
exec "$BIN" "$@"
