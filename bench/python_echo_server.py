#!/usr/bin/env python3
"""Bench baseline: the echo agent on the official Python SDK's server (a2a-sdk 1.3.0).

The same agent as interop/python/a2a_server.py's /echo (imported from there, unchanged):
the SDK's DefaultRequestHandler with its InMemoryTaskStore, served by uvicorn; every task
completes at once with one artifact `echo` holding the message's text and the agent message
`echo: <text>`, as agentnet's sample Echo does. Only the JSON-RPC binding is mounted, at
<base>/rpc (what scripts/bench_a2a_compare.sh loads).

Usage (from the interop venv, ~/.cache/agentnet/venv):
  python bench/python_echo_server.py [PORT]      (default 0: any free port)

Prints the JSON-RPC URL on stdout once the socket is bound, then serves until killed.
"""

from __future__ import annotations

import os
import socket
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'interop', 'python'))

import uvicorn  # noqa: E402
from a2a.server.request_handlers import DefaultRequestHandler  # noqa: E402
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes  # noqa: E402
from a2a.server.tasks import InMemoryTaskStore  # noqa: E402
from starlette.applications import Starlette  # noqa: E402

from a2a_server import Echo, card  # noqa: E402


def main() -> None:
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(('127.0.0.1', port))
    base = f'http://127.0.0.1:{sock.getsockname()[1]}'
    # card() names the JSON-RPC interface <base>/echo/rpc; the app is mounted at the root here,
    # so the card says <base>/rpc.
    agent_card = card('echo', 'Echoes your message back', base)
    agent_card.supported_interfaces[0].url = f'{base}/rpc'
    del agent_card.supported_interfaces[1:]
    handler = DefaultRequestHandler(
        agent_executor=Echo(), task_store=InMemoryTaskStore(), agent_card=agent_card
    )
    app = Starlette(routes=create_agent_card_routes(agent_card) + create_jsonrpc_routes(handler, rpc_url='/rpc'))
    print(f'{base}/rpc', flush=True)
    # Access logging off: the load would otherwise be measured with a log line per request.
    config = uvicorn.Config(app, log_level='warning', access_log=False)
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == '__main__':
    main()
