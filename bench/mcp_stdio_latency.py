#!/usr/bin/env python3
"""Latency of sequential MCP `tools/call` requests over stdio (stateless 2026-07-28 requests,
one JSON-RPC message per line), for `scripts/bench_mcp.sh`.

    mcp_stdio_latency.py --n 2000 --tool discover_agents --args '{"tags":["bench-7"]}' -- CMD ARG...

Spawns CMD, sends --warmup requests, then --n more, each after the previous answer arrived,
and prints one JSON line: {"n", "p50_us", "p90_us", "p99_us", "max_us", "mean_us"}. Fails if an
answer is a JSON-RPC error or an isError result. Measured from the write of a request to the
read of its answer line, in this process (Python's own share included).
"""

import argparse
import json
import subprocess
import sys
import time

META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "0"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--tool", required=True)
    ap.add_argument("--args", default="{}")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd:
        sys.exit("mcp_stdio_latency.py: no command")
    args = json.loads(a.args)
    # Buffered: an unbuffered pipe's readline() reads one byte per system call, which cost
    # ~5 ms per 9 KB answer and was first mistaken for the server's latency.
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert p.stdin and p.stdout
    out = p.stdout

    def call(i: int) -> int:
        req = {"jsonrpc": "2.0", "id": i, "method": "tools/call",
               "params": {"name": a.tool, "arguments": args, "_meta": META}}
        line = (json.dumps(req) + "\n").encode()
        t0 = time.perf_counter_ns()
        p.stdin.write(line)
        p.stdin.flush()
        while True:
            got = out.readline()
            if not got:
                sys.exit(f"mcp_stdio_latency.py: the server closed stdout (exit {p.poll()})")
            msg = json.loads(got)
            if msg.get("id") == i:
                break
        dt = time.perf_counter_ns() - t0
        if "error" in msg or msg["result"].get("isError"):
            sys.exit(f"mcp_stdio_latency.py: request {i} failed: {got[:500]!r}")
        return dt

    for i in range(a.warmup):
        call(i)
    lat = sorted(call(a.warmup + i) for i in range(a.n))
    p.stdin.close()
    p.wait(timeout=30)

    def pct(q: float) -> float:
        return round(lat[min(len(lat) - 1, int(q * len(lat)))] / 1000, 1)

    print(json.dumps({"n": a.n, "p50_us": pct(0.50), "p90_us": pct(0.90), "p99_us": pct(0.99),
                      "max_us": round(lat[-1] / 1000, 1), "mean_us": round(sum(lat) / len(lat) / 1000, 1)}))


if __name__ == "__main__":
    main()
