#!/usr/bin/env bash
# Load benchmark: JSON-RPC SendMessage to a hosted `echo` agent (policy open) of a real node,
# tasks persisted in its RocksDB, with wrk at 16 connections.
#   scripts/bench_a2a.sh [AGENTNET_BINARY] [SECONDS]
# Prints wrk's summary and the node's resident memory idle and after the load.
# scripts/bench_a2a_compare.sh runs the same load against the baselines and DID-signed requests.
set -euo pipefail
. "$(dirname "$0")/lib/wrk.sh"
BIN=${1:-target/release/agentnet}
SECS=${2:-10}
command -v wrk >/dev/null || { echo "wrk is needed (apt-get install wrk)" >&2; exit 2; }
DIR=$(mktemp -d)
trap 'kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; rm -rf "$DIR"' EXIT
cat > "$DIR/node.toml" <<'TOML'
[node]
http = "127.0.0.1:0"
mdns = false
listen = ["/ip4/127.0.0.1/tcp/0"]
[tasks]
max_per_owner = 100000000
max_tasks = 100000000
max_per_source = 100000000
max_total_mib = 100000
max_per_owner_mib = 100000
max_per_source_mib = 100000
new_per_second_per_source = 0
[[agent]]
id = "echo"
kind = "echo"
policy = "open"
publish = false
TOML
"$BIN" up --config "$DIR/node.toml" --data-dir "$DIR/data" >"$DIR/up.out" 2>"$DIR/up.err" &
PID=$!
for _ in $(seq 300); do [ -f "$DIR/data/node.json" ] && break; sleep 0.1; done
HTTP=$(python3 -c "import json,sys;print(json.load(open(sys.argv[1]))['http'])" "$DIR/data/node.json")
URL="http://$HTTP/a2a/echo"
echo "idle RSS: $(grep VmRSS /proc/$PID/status)"
wrk_checked "$DIR/wrk.out" -- -t2 -c16 -d"${SECS}s" --latency -s "$(dirname "$0")/wrk_send_message.lua" "$URL"
cat "$DIR/wrk.out"
echo "after-load RSS: $(grep VmRSS /proc/$PID/status)"
# One response, to show a completed task with its artifact.
curl -s -H 'Content-Type: application/a2a+json' -H 'A2A-Version: 1.0' \
  -d '{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"role":"ROLE_USER","parts":[{"text":"check"}],"messageId":"check-1"}}}' "$URL" | head -c 300; echo
