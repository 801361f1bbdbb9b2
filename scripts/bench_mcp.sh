#!/usr/bin/env bash
# MCP load benchmark (docs/BENCHMARKS.md, section "MCP"): wrk, 2 threads, 16 connections,
# stateless 2026-07-28 `tools/call` requests (one self-contained POST each: the
# `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` headers and the `_meta` envelope) against
#   1. bench/rmcp-echo: a bare rmcp 3.11 Streamable HTTP server, one `echo` tool;
#   2. bench/python_mcp_echo.py: the Python `mcp` 2.x SDK's server, one `echo` tool;
#   3. our node's `/mcp`: `discover_agents` with one tag on an index of $AGENTS agents, imported
#      through the admin API (`sim` bin `adverts` signs them, bench/import_adverts.py posts them);
# then the latency of sequential `tools/call discover_agents` over stdio through `agentnet mcp`
# beside that node (bench/mcp_stdio_latency.py).
#
#   3b. bench/rmcp-echo's `discover_agents`: bare rmcp serving the node's own answer (the bytes
#      3 returned), alternated with 3 ROUNDS times: the floor a discover is measured against;
#
#   scripts/bench_mcp.sh            # env: SECS=10 AGENTS=10000 STDIO_N=2000 ROUNDS=1
#                                   # AGENTNET=BIN (its adverts beside it) RMCP_ECHO=BIN PERF=1
#
# Builds with --release: the workspace in ~/.cache/agentnet/target-release, bench/rmcp-echo (its
# own workspace) in ~/.cache/agentnet/target-bench. Needs wrk and the interop venv
# (bash interop/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/wrk.sh
SECS=${SECS:-10}
AGENTS=${AGENTS:-10000}
STDIO_N=${STDIO_N:-2000}
TAG=${TAG:-bench-7}
REL=${AGENTNET_RELEASE_TARGET:-$HOME/.cache/agentnet/target-release}
BENCH_TARGET=${AGENTNET_BENCH_TARGET:-$HOME/.cache/agentnet/target-bench}
PY=${AGENTNET_VENV:-$HOME/.cache/agentnet/venv}/bin/python
command -v wrk >/dev/null || { echo "wrk is needed (apt-get install wrk)" >&2; exit 2; }
[ -x "$PY" ] || { echo "no interop venv; run bash interop/setup.sh" >&2; exit 2; }

if [ -z "${AGENTNET:-}" ]; then
  echo "== build (release)"
  CARGO_TARGET_DIR="$REL" cargo build --offline --release --locked -p agentnet --bin agentnet \
    -p agentnet-sim --bin adverts
  (cd bench/rmcp-echo && CARGO_TARGET_DIR="$BENCH_TARGET" cargo build --offline --release --locked)
fi
# AGENTNET, ADVERTS, RMCP_ECHO: binaries built elsewhere (another commit's, to compare); then
# nothing is built.
AGENTNET=${AGENTNET:-$REL/release/agentnet}
ADVERTS=${ADVERTS:-$(dirname "$AGENTNET")/adverts}
RMCP_ECHO=${RMCP_ECHO:-$BENCH_TARGET/release/rmcp-echo}

DIR=$(mktemp -d)
PIDS=()
AUTH= # the Authorization header's value, for agentnet's /mcp only
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$DIR"
}
trap cleanup EXIT

# Start "$@" in the background; wait for its `READY <url>` line; set URL (and LAST_PID).
start_ready() {
  local name=$1; shift
  "$@" >"$DIR/$name.out" 2>"$DIR/$name.err" &
  LAST_PID=$!
  PIDS+=("$LAST_PID")
  for _ in $(seq 300); do
    if grep -q '^READY ' "$DIR/$name.out" 2>/dev/null; then
      URL=$(sed -n 's/^READY //p' "$DIR/$name.out" | head -1)
      return
    fi
    sleep 0.1
  done
  echo "$name did not start: $(cat "$DIR/$name.err")" >&2
  exit 1
}

# The stateless request, as the Python SDK client sends it (see docs/BENCHMARKS.md).
META='"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"wrk","version":"0"},"io.modelcontextprotocol/clientCapabilities":{}}'
body_of() { # TOOL ARGS_JSON
  printf '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"%s","arguments":%s,%s}}' "$1" "$2" "$META"
}
lua_of() { # TOOL ARGS_JSON -> a wrk script posting that request
  local body auth=
  body=$(body_of "$1" "$2" | sed 's/\\/\\\\/g; s/"/\\"/g')
  # Built outside the heredoc: inside one, ${AUTH:+...} drops the quotes of its word, and wrk's
  # Lua then failed on this line while wrk sent its requests without the header.
  if [ -n "$AUTH" ]; then auth="wrk.headers[\"Authorization\"] = \"$AUTH\""; fi
  cat <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
wrk.headers["MCP-Protocol-Version"] = "2026-07-28"
wrk.headers["Mcp-Method"] = "tools/call"
wrk.headers["Mcp-Name"] = "$1"
$auth
wrk.body = "$body"
local threads = {}
function setup(thread) table.insert(threads, thread) end
-- A tool error comes back as HTTP 200: count what is not a successful tool result.
failed = 0
function response(status, headers, body)
  if status ~= 200 or not string.find(body, '"isError":false', 1, true) then failed = failed + 1 end
end
function done(summary, latency, requests)
  local n = 0
  for _, t in ipairs(threads) do n = n + (t:get("failed") or 0) end
  io.write(string.format("answers failed: %d\\n", n))
end
LUA
}
# One request with curl first: it must be a successful tool result, not an error.
check() { # URL TOOL ARGS_JSON
  local out
  out=$(curl -s -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
    -H 'MCP-Protocol-Version: 2026-07-28' -H 'Mcp-Method: tools/call' -H "Mcp-Name: $2" \
    ${AUTH:+-H "Authorization: $AUTH"} --data "$(body_of "$2" "$3")" "$1")
  echo "   one response: ${out:0:400}"
  case "$out" in *'"structuredContent"'*'"isError":false'*|*'"isError":false'*'"structuredContent"'*) ;;
    *) echo "not a successful tool result" >&2; exit 1 ;; esac
}
# User + system CPU of process $1 so far, in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
run_wrk() { # NAME URL TOOL ARGS_JSON [SERVER_PID]
  local pid=${5:-} before=0 perf=
  lua_of "$3" "$4" >"$DIR/$1.lua"
  check "$2" "$3" "$4"
  if [ -n "$pid" ]; then
    before=$(cpu_ticks "$pid")
    if [ -n "${PERF:-}" ]; then
      perf record -q -F 499 --call-graph "${PERF_CALL_GRAPH:-dwarf}" -p "$pid" \
        -o "${OUT_DIR:-$DIR}/$1.perf" -- sleep "$SECS" 2>/dev/null &
      perf=$!
    fi
  fi
  wrk_checked "$DIR/$1.wrk" -- -t2 -c16 -d"${SECS}s" --latency -s "$DIR/$1.lua" "$2"
  if [ -n "$perf" ]; then wait "$perf" || true; fi
  cat "$DIR/$1.wrk"
  if [ -n "$pid" ]; then
    awk -v t="$(( $(cpu_ticks "$pid") - before ))" -v hz="$(getconf CLK_TCK)" \
      -v n="$(awk '/ requests in / {print $1}' "$DIR/$1.wrk")" \
      'BEGIN {printf "   server CPU per request: %.0f µs\n", t / hz / n * 1e6}' | tee "$DIR/$1.cpu"
  fi
}

echo "== 1. bare rmcp echo"
start_ready rmcp "$RMCP_ECHO" 127.0.0.1:0
run_wrk rmcp "$URL" echo '{"text":"hello"}'
kill "$LAST_PID"; wait "$LAST_PID" 2>/dev/null || true

echo "== 2. Python mcp echo"
start_ready python "$PY" bench/python_mcp_echo.py http
run_wrk python "$URL" echo '{"text":"hello"}'
kill "$LAST_PID"; wait "$LAST_PID" 2>/dev/null || true

echo "== 3. agentnet /mcp discover_agents, one tag, $AGENTS agents"
DATA="$DIR/node"
"$AGENTNET" up --data-dir "$DATA" --http 127.0.0.1:0 --listen /ip4/127.0.0.1/tcp/0 --no-mdns \
  >"$DIR/up.out" 2>"$DIR/up.err" &
NODE_PID=$!
PIDS+=("$NODE_PID")
for _ in $(seq 300); do [ -f "$DATA/node.json" ] && break; sleep 0.1; done
field() { python3 -c "import json,sys;print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$DATA/node.json" "$1"; }
ADMIN=$(field admin)
PEER=$(field peer_id)
T0=$(date +%s.%N)
"$ADVERTS" --count "$AGENTS" --peer-id "$PEER" >"$DIR/adverts.jsonl"
T1=$(date +%s.%N)
N=$("$PY" bench/import_adverts.py "$ADMIN" "$DATA/admin.token" <"$DIR/adverts.jsonl")
T2=$(date +%s.%N)
echo "   signed $AGENTS advertisements in $(echo "$T1 - $T0" | bc) s; imported $N in $(echo "$T2 - $T1" | bc) s"
FOUND=$("$AGENTNET" discover --skill "$TAG" --limit 50 --json --data-dir "$DATA" | python3 -c 'import json,sys;print(len(json.load(sys.stdin)))')
echo "   agentnet discover --skill $TAG --limit 50: $FOUND agents"
echo "   node RSS before load: $(grep VmRSS /proc/$NODE_PID/status)"
# /mcp needs the admin token (docs/MCP.md).
AUTH="Bearer $(cat "$DATA/admin.token")"
ARGS="{\"tags\":[\"$TAG\"]}"
# The node's answer, kept: bare rmcp serves the same bytes as its floor (3b).
curl -s -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
  -H 'MCP-Protocol-Version: 2026-07-28' -H 'Mcp-Method: tools/call' -H 'Mcp-Name: discover_agents' \
  -H "Authorization: $AUTH" --data "$(body_of discover_agents "$ARGS")" "http://$ADMIN/mcp" \
  | python3 -c 'import json,sys
t = sys.stdin.read()
t = t[t.index("{"):] if not t.startswith("{") else t
print(json.dumps(json.loads(t)["result"]["structuredContent"]))' >"$DIR/answer.json"
echo "   the answer: $(python3 -c 'import json,sys;print(len(json.load(open(sys.argv[1]))["agents"]))' "$DIR/answer.json") agents, $(wc -c <"$DIR/answer.json") bytes of structuredContent"
# 3 and 3b alternate ROUNDS times: the ratio is taken within one run on one machine.
SUMMARY=()
summary() { # NAME
  SUMMARY+=("$(printf '%-22s %10s %9s %9s %12s' "$1" "$(awk '/^Requests\/sec:/ {print $2}' "$DIR/$1.wrk")" \
    "$(awk '$1 == "50%" {print $2}' "$DIR/$1.wrk")" "$(awk '$1 == "99%" {print $2}' "$DIR/$1.wrk")" \
    "$(awk '{print $5}' "$DIR/$1.cpu" 2>/dev/null)")")
}
for round in $(seq "${ROUNDS:-1}"); do
  echo "== 3. round $round: agentnet /mcp discover_agents"
  run_wrk "node-$round" "http://$ADMIN/mcp" discover_agents "$ARGS" "$NODE_PID"
  summary "node-$round"
  echo "   node RSS after load: $(grep VmRSS /proc/$NODE_PID/status)"
  echo "== 3b. round $round: bare rmcp serving the node's answer (ANSWER_FILE)"
  SAVED_AUTH=$AUTH; AUTH=
  ANSWER_FILE="$DIR/answer.json" start_ready "rmcp-answer-$round" "$RMCP_ECHO" 127.0.0.1:0
  run_wrk "rmcp-answer-$round" "$URL" discover_agents "$ARGS" "$LAST_PID"
  summary "rmcp-answer-$round"
  kill "$LAST_PID"; wait "$LAST_PID" 2>/dev/null || true
  AUTH=$SAVED_AUTH
done
echo "== discover_agents against bare rmcp serving the same answer"
printf '%-22s %10s %9s %9s %12s\n' server req/s p50 p99 "µs CPU/req"
printf '%s\n' "${SUMMARY[@]}"

echo "== 4. stdio: agentnet mcp beside the node, $STDIO_N sequential discover_agents"
"$PY" bench/mcp_stdio_latency.py --n "$STDIO_N" --tool discover_agents --args "{\"tags\":[\"$TAG\"]}" \
  -- "$AGENTNET" mcp --data-dir "$DATA" 2>"$DIR/stdio.err"
echo "== 4b. the same on the Python mcp echo over stdio (baseline)"
"$PY" bench/mcp_stdio_latency.py --n "$STDIO_N" --tool echo --args '{"text":"hello"}' \
  -- "$PY" bench/python_mcp_echo.py stdio 2>"$DIR/stdio-py.err"
