"""A minimal MCP server built with the official Python SDK (PyPI `mcp` 2.x): one `echo` tool.

It is the independent server the interop client scripts are first checked against, and the
Python baseline of `scripts/bench_mcp.sh`.

    python bench/python_mcp_echo.py stdio
    python bench/python_mcp_echo.py http --port 8931     # Streamable HTTP at /mcp, both eras

Over HTTP it serves the 2025-11-25 era (initialize, sessions) and the stateless 2026-07-28 era
(`server/discover`, one POST per request) on the same path. On startup over HTTP it prints one
line `READY http://127.0.0.1:<port>/mcp` on stdout (port 0 picks a free port).
"""

import argparse
import socket
import sys

import uvicorn
from pydantic import BaseModel

from mcp.server.mcpserver import MCPServer


class Echoed(BaseModel):
    text: str


server = MCPServer("python-mcp-echo")


@server.tool(description="Return the given text unchanged.")
def echo(text: str) -> Echoed:
    return Echoed(text=text)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("transport", choices=["stdio", "http"])
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args()
    if args.transport == "stdio":
        server.run("stdio")
        return
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    port = sock.getsockname()[1]
    app = server.streamable_http_app(json_response=True, stateless_http=True)
    print(f"READY http://127.0.0.1:{port}/mcp", flush=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    sys.exit(main())
