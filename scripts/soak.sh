#!/usr/bin/env bash
# A node under hours of mixed load (issue 43, item 10; docs/BENCHMARKS.md, "A node under an hour
# of mixed load"). Builds the release node and the load generator (`agentnet-sim --bin soak`),
# starts two nodes on loopback in a temporary directory, the soaked one hosting an open echo
# agent (with its MCP face) and a DID-signed one, the other its peer over libp2p, then runs the
# generator: capacity first, then MINUTES minutes at half of it, one JSON line a minute, then
# AFTER minutes of the node idle.
#
#   scripts/soak.sh [MINUTES]        # default 60; env: OUT (default ./soak-out), INTERVAL_SECS
#                                    # (60), RATE (0: half the measured capacity), MEASURE_SECS (25),
#                                    # SOAK_TMP (/dev/shm: where the data directories go), AFTER (3:
#                                    # intervals sampled once the load stopped)
#
# Writes $OUT/results.jsonl, $OUT/soak.svg and the nodes' logs ($OUT/node.err, $OUT/peer.err).
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES=${1:-60}
OUT=$(realpath -m "${OUT:-soak-out}")
INTERVAL_SECS=${INTERVAL_SECS:-60}
RATE=${RATE:-0}
MEASURE_SECS=${MEASURE_SECS:-25}
AFTER=${AFTER:-3}
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/agentnet/target}"

echo "== build (release)"
# Two builds: in one, cargo would unify agentnet-discovery's features with the generator's
# (`test-utils`) and the node measured would not be the one users build.
cargo build --release --locked -p agentnet --bin agentnet
cargo build --release --locked -p agentnet-sim --bin soak
AGENTNET="$CARGO_TARGET_DIR/release/agentnet"
SOAK="$CARGO_TARGET_DIR/release/soak"

mkdir -p "$OUT"
# The nodes' data directories on tmpfs by default (SOAK_TMP): the development machine's disk is
# shared with other builds and has run full; RocksDB writes its log without a sync per write
# either way, so the page cache takes the writes on a disk too.
DIR=$(mktemp -d -p "${SOAK_TMP:-/dev/shm}")
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$DIR"
}
trap cleanup EXIT

# The soaked node. Task quotas out of the way (every request comes from this machine), a
# retention of 0 hours so that the sweep deletes tasks as the load writes them; the nonce cache
# sized for the signed share of the load (each signature's nonce is kept 360 s).
cat > "$DIR/node.toml" <<'TOML'
[node]
http = "127.0.0.1:0"
mdns = false
local = true
listen = ["/ip4/127.0.0.1/tcp/0"]
[tasks]
retention_hours = 0
max_tasks = 100000000
max_per_owner = 100000000
max_per_source = 100000000
max_total_mib = 100000
max_per_owner_mib = 100000
max_per_source_mib = 100000
new_per_second_per_source = 0
[auth]
max_nonces = 1000000
[[agent]]
id = "echo"
kind = "echo"
policy = "open"
mcp = true
[[agent]]
id = "echo-did"
kind = "echo"
policy = "did"
TOML

wait_file() { for _ in $(seq 300); do [ -f "$1" ] && return; sleep 0.1; done; echo "no $1" >&2; exit 1; }
json_field() { sed -n "s/.*\"$2\": *\"\\([^\"]*\\)\".*/\\1/p" "$1" | head -1; }
json_list_first() { tr -d '\n ' < "$1" | sed -n "s/.*\"$2\":\\[\"\\([^\"]*\\)\".*/\\1/p"; }

# A node refuses new tasks when the disk has less than --store-min-free-mib: keep 3 GiB for
# the machine's other users.
"$AGENTNET" up --config "$DIR/node.toml" --data-dir "$DIR/node" --store-min-free-mib 3072 \
  >"$OUT/node.out" 2>"$OUT/node.err" &
NODE=$!
PIDS+=("$NODE")
wait_file "$DIR/node/node.json"
BOOT=$(json_list_first "$DIR/node/node.json" listen)
echo "node pid $NODE, $(json_field "$DIR/node/node.json" http), libp2p $BOOT"

cat > "$DIR/peer.toml" <<'TOML'
[node]
http = "127.0.0.1:0"
mdns = false
local = true
listen = ["/ip4/127.0.0.1/tcp/0"]
TOML
"$AGENTNET" up --config "$DIR/peer.toml" --data-dir "$DIR/peer" --bootstrap "$BOOT" \
  >"$OUT/peer.out" 2>"$OUT/peer.err" &
PIDS+=("$!")
wait_file "$DIR/peer/node.json"
sleep 3

echo "== soak: $MINUTES x ${INTERVAL_SECS}s, started $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
"$SOAK" --data "$DIR/node" --peer-data "$DIR/peer" --out "$OUT" --minutes "$MINUTES" \
  --interval-secs "$INTERVAL_SECS" --rate "$RATE" --measure-secs "$MEASURE_SECS" --after "$AFTER"
echo "== done $(date -u +%FT%TZ): $OUT/results.jsonl, $OUT/soak.svg"
