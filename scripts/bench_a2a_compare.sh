#!/usr/bin/env bash
# A2A SendMessage load, one client, four servers: wrk (2 threads, 16 connections, SECONDS each)
# against
#   node-open  our node's hosted echo agent, policy open (tasks in its RocksDB)
#   node-receipt  node-open's load, each message asking for a signed receipt (as `agentnet call`
#              does: an agent signs one only for a caller who asks)
#   node-did   our node's hosted echo agent, policy did, replaying requests pre-signed as
#              `agentnet call` signs them (agentnet-sim --bin signed_requests, scripts/wrk_replay.lua)
#   node-chain the same, each message also presenting a 3-link delegation chain (issue 18) to an
#              agent that requires one from the generator's fixed principal
#   node-token the same agent, every request with the access token one signed request got
#              (as the ANP SDK's client sends them: Authorization: Bearer)
#   a2a-lf     the echo agent on the official Rust server crate, a2a-server-lf 0.5, in memory
#              (bench/a2a-lf-echo)
#   python     the echo agent on the Python a2a-sdk 1.3.0 server, in memory (bench/python_echo_server.py)
# Each server is started fresh, checked with one request (a completed task with an artifact;
# for node-did, three pre-signed requests from the file succeed and a replay of one is refused)
# before the load. Prints a table: req/s, p50, p99, non-2xx responses, and for our node its RSS
# idle and after the load. wrk's full output is kept in OUT_DIR (default: a temporary directory),
# with one answer of each checked row (NAME.answer: its body, then its HTTP status).
#
#   scripts/bench_a2a_compare.sh [AGENTNET_BINARY] [SECONDS]
# Environment (defaults in brackets):
#   SIGNED_REQUESTS  the generator [the signed_requests binary next to AGENTNET_BINARY]
#   LF_ECHO          [/root/.cache/agentnet/target-bench/release/a2a-lf-echo]
#   PYTHON           [~/.cache/agentnet/venv/bin/python]
#   DIDS             did:key identities signing the load [32]
#   SIGNED_REQUESTS_N  pre-signed requests [90000; the node's nonce cache holds 100000 in all,
#                    10000 per DID, for 360 s]
#   ONLY             space-separated subset of: node-open node-receipt node-did node-chain node-token
#                    a2a-lf python
#   OUT_DIR          where wrk's outputs go
#   VERIFY_BATCH     the node's [auth] verify_batch [0: each signature alone; 16: in batches]
#   PERF             when set, the server is sampled with `perf record -g` during the load
#                    (OUT_DIR/NAME.perf; read with `perf report -i`; set OUT_DIR to keep it);
#                    PERF_CALL_GRAPH=dwarf for call stacks (release builds keep no frame pointers)
# Build first (release; docs/BENCHMARKS.md, "A2A: baselines and signed load"):
#   CARGO_TARGET_DIR=/root/.cache/agentnet/target-release cargo build --offline --release --workspace --bins
#   (cd bench/a2a-lf-echo && CARGO_TARGET_DIR=/root/.cache/agentnet/target-bench cargo build --release --offline)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib/wrk.sh"
ROOT=$(dirname "$HERE")
BIN=$(realpath "${1:-target/release/agentnet}")
SECS=${2:-10}
SIGNED_REQUESTS=${SIGNED_REQUESTS:-$(dirname "$BIN")/signed_requests}
LF_ECHO=${LF_ECHO:-/root/.cache/agentnet/target-bench/release/a2a-lf-echo}
PYTHON=${PYTHON:-$HOME/.cache/agentnet/venv/bin/python}
DIDS=${DIDS:-32}
N=${SIGNED_REQUESTS_N:-90000}
ONLY=${ONLY:-node-open node-did node-chain node-token a2a-lf python}
command -v wrk >/dev/null || { echo "wrk is needed (apt-get install wrk)" >&2; exit 2; }
for f in "$BIN" "$SIGNED_REQUESTS" "$LF_ECHO" "$PYTHON"; do
  [ -x "$f" ] || { echo "missing: $f (see the build commands at the top of $0)" >&2; exit 2; }
done
DIR=$(mktemp -d)
OUT_DIR=${OUT_DIR:-$DIR/out}
mkdir -p "$OUT_DIR"
PID=
stop() { if [ -n "$PID" ]; then kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; PID=; fi; }
trap 'stop; rm -rf "$DIR"' EXIT

rss() { awk '/VmRSS/ {printf "%.1f MB", $2/1024}' "/proc/$1/status"; }

# A SendMessage with the unsigned load's body; the answer must be a completed task with an artifact.
check_unsigned() {
  local url=$1 out
  out=$(curl -s -H 'Content-Type: application/a2a+json' -H 'A2A-Version: 1.0' \
    -d '{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"role":"ROLE_USER","parts":[{"text":"hello"}],"messageId":"check-1"}}}' "$url")
  grep -q '"TASK_STATE_COMPLETED"' <<<"$out" && grep -q '"artifacts":\[{' <<<"$out" \
    || { echo "check failed at $url: $out" >&2; exit 1; }
}

# Send one line of a requests file with curl; prints the HTTP status then the body.
replay_line() {
  local base=$1 line=$2 f args=() i
  IFS=$'\t' read -r -a f <<<"$line"
  for ((i = 2; i < ${#f[@]} - 1; i++)); do args+=(-H "${f[i]}"); done
  curl -s -w '\n%{http_code}' -X "${f[0]}" "${args[@]}" --data-binary "${f[-1]}" "$base${f[1]}"
}

start_node() {
  local name=$1
  mkdir -p "$DIR/$name"
  cat > "$DIR/$name/node.toml" <<'TOML'
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
[[agent]]
id = "echo-did"
kind = "echo"
policy = "did"
publish = false
TOML
  cat >> "$DIR/$name/node.toml" <<TOML
[auth]
# All the load comes from 127.0.0.1: the per-source share (max_nonces / 32 by default) would
# refuse all but 3 125 signed requests of one run.
per_source_nonces = 100000
verify_batch = ${VERIFY_BATCH:-0}
[[agent]]
id = "echo-chain"
kind = "echo"
policy = "did"
publish = false
require_delegation_from = ["$("$SIGNED_REQUESTS" --print-principal --agent http://unused --out /dev/null)"]
TOML
  "$BIN" up --config "$DIR/$name/node.toml" --data-dir "$DIR/$name/data" \
    >"$DIR/$name/up.out" 2>"$DIR/$name/up.err" &
  PID=$!
  for _ in $(seq 300); do [ -f "$DIR/$name/data/node.json" ] && break; sleep 0.1; done
  [ -f "$DIR/$name/data/node.json" ] || { cat "$DIR/$name/up.err" >&2; exit 1; }
  NODE_BASE="http://$(python3 -c "import json,sys;print(json.load(open(sys.argv[1]))['http'])" "$DIR/$name/data/node.json")"
}

# Start a baseline server that prints its JSON-RPC URL on its first stdout line.
start_printing_url() {
  local name=$1; shift
  mkdir -p "$DIR/$name"
  "$@" >"$DIR/$name/out" 2>"$DIR/$name/err" &
  PID=$!
  for _ in $(seq 300); do [ -s "$DIR/$name/out" ] && break; sleep 0.1; done
  URL=$(head -n1 "$DIR/$name/out")
  [ -n "$URL" ] || { cat "$DIR/$name/err" >&2; exit 1; }
  # uvicorn accepts shortly after printing.
  for _ in $(seq 100); do curl -s -o /dev/null "$URL" && break; sleep 0.1; done
}

# wrk against $2 with the Lua script $3 (plus env from the caller); output kept as $1.wrk.
run_wrk() {
  local name=$1 url=$2 lua=$3 perf=
  if [ -n "${PERF:-}" ] && [ -n "$PID" ]; then
    perf record -q -F 499 --call-graph "${PERF_CALL_GRAPH:-fp}" -p "$PID" -o "$OUT_DIR/$name.perf" -- sleep "$SECS" 2>/dev/null &
    perf=$!
  fi
  local before
  before=$(cpu_ticks "$PID")
  # wrk's own CPU (user + system seconds, init included) goes to the .time file.
  WRK_THREADS=2 /usr/bin/time -o "$OUT_DIR/$name.time" -f '%U %S' \
    wrk -t2 -c16 -d"${SECS}s" --latency -s "$lua" "$url" >"$OUT_DIR/$name.wrk" 2>&1 \
    || { cat "$OUT_DIR/$name.wrk" >&2; exit 1; }
  local why
  why=$(wrk_failures "$OUT_DIR/$name.wrk") \
    || { cat "$OUT_DIR/$name.wrk" >&2; echo "FAIL: $name measured failures, not answers: $why" >&2; exit 1; }
  echo "server_ticks $(( $(cpu_ticks "$PID") - before ))" >>"$OUT_DIR/$name.time"
  if [ -n "$perf" ]; then wait "$perf" || true; fi
}

# User + system CPU of process $1 so far, in clock ticks (fields 14 and 15 of /proc/PID/stat;
# the command name, field 2, has no spaces here).
cpu_ticks() { if [ -n "$1" ]; then awk '{print $14 + $15}' "/proc/$1/stat"; else echo 0; fi; }

ROWS=()
row() {
  local name=$1 idle=${2:--} after=${3:--} w="$OUT_DIR/$1.wrk" rps p50 p99 non2xx errs
  rps=$(awk '/^Requests\/sec:/ {print $2}' "$w")
  p50=$(awk '$1 == "50%" {print $2}' "$w")
  p99=$(awk '$1 == "99%" {print $2}' "$w")
  non2xx=$(awk '/Non-2xx or 3xx responses:/ {print $NF}' "$w"); non2xx=${non2xx:-0}
  errs=$(awk '/Socket errors:/ {sub(/^ *Socket errors: */, ""); print}' "$w"); errs=${errs:-none}
  if grep -q '^replay: [1-9]' "$w"; then
    errs="$errs; RAN OUT of pre-signed requests (figures invalid: raise SIGNED_REQUESTS_N or lower SECONDS)"
  fi
  # The server's CPU per request (µs) and the cores it kept busy; then wrk's CPU in seconds.
  local ticks hz requests cpu_req cores client
  ticks=$(awk '/^server_ticks/ {print $2}' "$OUT_DIR/$1.time")
  hz=$(getconf CLK_TCK)
  requests=$(awk '/requests in/ {print $1}' "$w")
  cpu_req=$(awk -v t="$ticks" -v hz="$hz" -v n="$requests" 'BEGIN {if (n > 0 && t > 0) printf "%.0f", t / hz / n * 1e6; else print "-"}')
  cores=$(awk -v t="$ticks" -v hz="$hz" -v s="$SECS" 'BEGIN {if (t > 0) printf "%.2f", t / hz / s; else print "-"}')
  client=$(awk 'NR == 1 {printf "%.1f s", $1 + $2}' "$OUT_DIR/$1.time")
  ROWS+=("$(printf '%-10s %10s %9s %9s %8s  %-13s %-13s %9s %6s %8s  %s' "$name" "$rps" "$p50" "$p99" "$non2xx" "$idle" "$after" "$cpu_req" "$cores" "$client" "$errs")")
}

echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg) at start; wrk -t2 -c16 -d${SECS}s on the same machine"
for target in $ONLY; do
  case $target in
    node-open)
      start_node node-open
      check_unsigned "$NODE_BASE/a2a/echo"
      idle=$(rss "$PID")
      run_wrk node-open "$NODE_BASE/a2a/echo" "$HERE/wrk_send_message.lua"
      row node-open "$idle" "$(rss "$PID")"
      stop
      ;;
    node-receipt)
      # node-open's load, each message asking for a signed receipt (as `agentnet call` does).
      start_node node-receipt
      out=$(curl -s -H 'Content-Type: application/a2a+json' -H 'A2A-Version: 1.0' \
        -d '{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"role":"ROLE_USER","parts":[{"text":"hello"}],"messageId":"r-1","extensions":["urn:agentnet:a2a:signed-receipts:v1"]}}}' \
        "$NODE_BASE/a2a/echo")
      grep -q '"signed-receipts/v1":"ey' <<<"$out" || { echo "no receipt in an answer that asked for one: $out" >&2; exit 1; }
      idle=$(rss "$PID")
      RECEIPT=1 run_wrk node-receipt "$NODE_BASE/a2a/echo" "$HERE/wrk_send_message.lua"
      row node-receipt "$idle" "$(rss "$PID")"
      stop
      ;;
    node-did)
      start_node node-did
      "$SIGNED_REQUESTS" --agent "$NODE_BASE/a2a/echo-did" --dids "$DIDS" --requests "$N" \
        --out "$DIR/signed.tsv" --check 3 --check-out "$DIR/check.tsv"
      # Unsigned: refused.
      code=$(curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/a2a+json' -H 'A2A-Version: 1.0' \
        -d '{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"role":"ROLE_USER","parts":[{"text":"hello"}],"messageId":"u-1"}}}' \
        "$NODE_BASE/a2a/echo-did")
      [ "$code" = 401 ] || { echo "an unsigned request to the did agent got $code, not 401" >&2; exit 1; }
      while IFS= read -r line; do
        out=$(replay_line "$NODE_BASE" "$line")
        [ "$(tail -n1 <<<"$out")" = 200 ] && grep -q '"TASK_STATE_COMPLETED"' <<<"$out" \
          && grep -q '"artifacts":\[{' <<<"$out" \
          || { echo "a pre-signed request failed: $out" >&2; exit 1; }
        printf '%s\n' "$out" >"$OUT_DIR/node-did.answer"
      done <"$DIR/check.tsv"
      out=$(replay_line "$NODE_BASE" "$(head -n1 "$DIR/check.tsv")")
      [ "$(tail -n1 <<<"$out")" = 401 ] || { echo "a replayed request was not refused: $out" >&2; exit 1; }
      echo "node-did: 3 pre-signed requests completed with an artifact; an unsigned one and a replay got 401"
      idle=$(rss "$PID")
      REQUESTS="$DIR/signed.tsv" run_wrk node-did "$NODE_BASE/a2a/echo-did" "$HERE/wrk_replay.lua"
      row node-did "$idle" "$(rss "$PID")"
      stop
      ;;
    node-chain)
      start_node node-chain
      "$SIGNED_REQUESTS" --agent "$NODE_BASE/a2a/echo-chain" --dids "$DIDS" --requests "$N" \
        --delegation-links 3 --out "$DIR/chain.tsv" --check 3 --check-out "$DIR/chain-check.tsv"
      while IFS= read -r line; do
        out=$(replay_line "$NODE_BASE" "$line")
        [ "$(tail -n1 <<<"$out")" = 200 ] && grep -q '"TASK_STATE_COMPLETED"' <<<"$out" \
          || { echo "a request with a chain failed: $out" >&2; exit 1; }
        printf '%s\n' "$out" >"$OUT_DIR/node-chain.answer"
      done <"$DIR/chain-check.tsv"
      # The same signer without a chain is refused (the agent requires one).
      "$SIGNED_REQUESTS" --agent "$NODE_BASE/a2a/echo-chain" --dids 1 --requests 1 \
        --out "$DIR/nochain.tsv" --check 0 --check-out "$DIR/none.tsv"
      out=$(replay_line "$NODE_BASE" "$(head -n1 "$DIR/nochain.tsv")")
      grep -q 'PERMISSION_DENIED' <<<"$out" || { echo "a request without a chain was not refused: $out" >&2; exit 1; }
      echo "node-chain: 3 requests with a 3-link chain completed; one without a chain got PERMISSION_DENIED"
      idle=$(rss "$PID")
      REQUESTS="$DIR/chain.tsv" run_wrk node-chain "$NODE_BASE/a2a/echo-chain" "$HERE/wrk_replay.lua"
      row node-chain "$idle" "$(rss "$PID")"
      stop
      ;;
    node-token)
      start_node node-token
      "$SIGNED_REQUESTS" --agent "$NODE_BASE/a2a/echo-did" --dids 1 --requests 1 \
        --out "$DIR/one.tsv" --check 0 --check-out "$DIR/none.tsv"
      IFS=$'\t' read -r -a f <"$DIR/one.tsv"
      hargs=(); for ((i = 2; i < ${#f[@]} - 1; i++)); do hargs+=(-H "${f[i]}"); done
      token=$(curl -s -o /dev/null -D - -X "${f[0]}" "${hargs[@]}" --data-binary "${f[-1]}" "$NODE_BASE${f[1]}" \
        | sed -n 's/^authentication-info: access_token="\([^"]*\)".*/\1/Ip' | tr -d '\r')
      [ -n "$token" ] || { echo "no access token in the answer to a signed request" >&2; exit 1; }
      out=$(curl -s -H 'Content-Type: application/a2a+json' -H 'A2A-Version: 1.0' -H "Authorization: Bearer $token" \
        -d '{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"role":"ROLE_USER","parts":[{"text":"hello"}],"messageId":"t-1"}}}' \
        "$NODE_BASE/a2a/echo-did")
      grep -q '"TASK_STATE_COMPLETED"' <<<"$out" || { echo "the token was not accepted: $out" >&2; exit 1; }
      echo "node-token: a signed request got a token; a request with it completed"
      idle=$(rss "$PID")
      BEARER="$token" run_wrk node-token "$NODE_BASE/a2a/echo-did" "$HERE/wrk_send_message.lua"
      row node-token "$idle" "$(rss "$PID")"
      stop
      ;;
    a2a-lf)
      start_printing_url a2a-lf "$LF_ECHO"
      check_unsigned "$URL"
      run_wrk a2a-lf "$URL" "$HERE/wrk_send_message.lua"
      row a2a-lf
      stop
      ;;
    python)
      start_printing_url python "$PYTHON" "$ROOT/bench/python_echo_server.py"
      check_unsigned "$URL"
      run_wrk python "$URL" "$HERE/wrk_send_message.lua"
      row python
      stop
      ;;
    *) echo "unknown target: $target" >&2; exit 2 ;;
  esac
done
for f in "$OUT_DIR"/*.wrk; do echo "== $(basename "$f" .wrk)"; cat "$f"; done
echo "load $(cut -d' ' -f1-3 /proc/loadavg) at the end"
printf '%-10s %10s %9s %9s %8s  %-13s %-13s %9s %6s %8s  %s\n' server req/s p50 p99 non-2xx "RSS idle" "RSS after" "µs CPU/req" cores "wrk CPU" "socket errors"
printf '%s\n' "${ROWS[@]}"
