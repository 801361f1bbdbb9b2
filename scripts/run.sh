#!/usr/bin/env bash
# Build and run agentnet. With no arguments: `agentnet testnet`, a local network of nodes on
# loopback that publishes sample agents and discovers them (the newcomer's first command).
# Any arguments are passed to `agentnet` instead (e.g. `bash scripts/run.sh up`).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/agentnet/target}"
bash scripts/system-deps.sh
if [ "$#" -eq 0 ]; then set -- testnet; fi
exec cargo run --locked -q -p agentnet --bin agentnet -- "$@"
