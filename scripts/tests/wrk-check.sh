#!/usr/bin/env bash
# The benchmarks fail when their requests fail: scripts/lib/wrk.sh's wrk_failures refuses wrk
# outputs (as wrk 4.1 prints them) whose answers were errors, whose Lua script did not load, or
# that completed nothing, and accepts a clean one. When wrk is installed, also against a live
# loopback server that refuses requests without the right Authorization header (the header whose
# quotes a heredoc once lost, so that every request of scripts/bench_mcp.sh was refused).
# Prints "N passed, N failed".
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/lib/wrk.sh
DIR=$(mktemp -d)
SERVER=
trap '[ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null; rm -rf "$DIR"' EXIT
passed=0; failed=0
expect() { # WHAT ok|fail FILE
  local why rc=0
  why=$(wrk_failures "$3") || rc=$?
  if { [ "$2" = ok ] && [ "$rc" = 0 ]; } || { [ "$2" = fail ] && [ "$rc" != 0 ] && [ -n "$why" ]; }; then
    passed=$((passed+1)); echo "ok: $1 -> $2${why:+ ($why)}"
  else
    failed=$((failed+1)); echo "FAIL: $1 should be $2; wrk_failures said: ${why:-nothing} (rc $rc)"
  fi
}
clean='Running 1s test @ http://127.0.0.1:18777/
  1 threads and 2 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency    43.56ms    9.22ms  51.91ms   95.65%
    Req/Sec    46.00      9.66    60.00     70.00%
  46 requests in 1.00s, 5.29KB read
Requests/sec:     45.81
Transfer/sec:      5.27KB'
printf '%s\n' "$clean" >"$DIR/clean"
expect "a clean run" ok "$DIR/clean"
printf '%s\n' "/tmp/x/node.lua: /tmp/x/node.lua:7: '=' expected near 'y'" \
  "$(sed 's/46 requests/1354 requests/' <<<"$clean")" "  Non-2xx or 3xx responses: 1354" >"$DIR/lua"
expect "a Lua error, every answer refused" fail "$DIR/lua"
printf '%s\n' "/tmp/x/node.lua: /tmp/x/node.lua:7: '=' expected near 'y'" "$clean" >"$DIR/lua-only"
expect "a Lua error alone" fail "$DIR/lua-only"
printf '%s\n' "$clean" "  Non-2xx or 3xx responses: 3" >"$DIR/some"
expect "three refusals among 46" fail "$DIR/some"
printf '%s\n' "$clean" "  Socket errors: connect 0, read 2, write 0, timeout 5" >"$DIR/sock"
expect "socket errors" fail "$DIR/sock"
printf '%s\n' "$clean" "answers failed: 0" >"$DIR/checked"
expect "a script's response check that counted nothing" ok "$DIR/checked"
printf '%s\n' "$clean" "answers failed: 7" >"$DIR/jsonrpc"
expect "seven HTTP 200 answers carrying errors" fail "$DIR/jsonrpc"
sed 's/46 requests/0 requests/' <<<"$clean" >"$DIR/none"
expect "nothing completed" fail "$DIR/none"

if command -v wrk >/dev/null; then
  cat >"$DIR/server.py" <<'PY'
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        code = 200 if self.headers.get("Authorization") == "Bearer a b" else 401
        self.send_response(code); self.send_header("content-length", "2"); self.end_headers()
        self.wfile.write(b"{}")
    def log_message(self, *a): pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
PY
  python3 "$DIR/server.py" >"$DIR/port" 2>/dev/null &
  SERVER=$!
  for _ in $(seq 50); do [ -s "$DIR/port" ] && break; sleep 0.1; done
  url="http://127.0.0.1:$(cat "$DIR/port")/"
  printf 'wrk.method = "POST"\nwrk.headers["Authorization"] = "Bearer a b"\nwrk.body = "{}"\n' >"$DIR/good.lua"
  printf 'wrk.method = "POST"\nwrk.headers["Authorization"] = "Bearer a c"\nwrk.body = "{}"\n' >"$DIR/refused.lua"
  printf 'wrk.method = "POST"\nwrk.headers[Authorization] = Bearer a b\nwrk.body = "{}"\n' >"$DIR/broken.lua"
  for s in good refused broken; do wrk -t1 -c1 -d1s -s "$DIR/$s.lua" "$url" >"$DIR/live-$s" 2>&1 || true; done
  expect "live: the right header" ok "$DIR/live-good"
  expect "live: every request refused" fail "$DIR/live-refused"
  expect "live: the header's quotes lost" fail "$DIR/live-broken"
else
  echo "(wrk is not installed: the live half is skipped; apt-get install wrk)"
fi
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
