#!/usr/bin/env python3
"""Serve the two sample agents with the official Python SDK's server (a2a-sdk).

Independent-implementation side of the agentnet A2A interop test in the other
direction: agentnet's Rust client (a2a/tests/interop_python_server.rs) against
a2a-sdk's server. The agents mirror the crate's samples:

  /echo       completes at once with an artifact holding the message's text
  /ask-name   works WORK_MS, asks "What is your name?" (INPUT_REQUIRED), then
              works WORK_MS again and completes with the artifact
              "Hello, <name>! You asked: <first message>"

Each agent serves its card at <base>/<agent>/.well-known/agent-card.json,
JSON-RPC at <base>/<agent>/rpc and HTTP+JSON under <base>/<agent>, all from the
SDK's own route factories, request handler and in-memory task store.

Usage:
  a2a_server.py PORT [WORK_MS]      (PORT 0: any free port)

Prints the base URL on stdout once listening, then serves until killed.
"""

from __future__ import annotations

import asyncio
import socket
import sys

from typing import NoReturn


def _die(code: int, msg: str) -> NoReturn:
    print(f'a2a_server.py: {msg}', file=sys.stderr)
    sys.exit(code)


try:
    import uvicorn

    from starlette.applications import Starlette
    from starlette.routing import Mount

    from a2a.helpers.proto_helpers import new_task
    from a2a.server.agent_execution import AgentExecutor, RequestContext
    from a2a.server.events import EventQueue
    from a2a.server.request_handlers import DefaultRequestHandler
    from a2a.server.routes import (
        create_agent_card_routes,
        create_jsonrpc_routes,
        create_rest_routes,
    )
    from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
    from a2a.types import (
        AgentCapabilities,
        AgentCard,
        AgentInterface,
        AgentSkill,
        Part,
        Role,
        TaskState,
    )
except ImportError as e:  # pragma: no cover
    _die(2, f'missing dependency ({e}); run interop/setup.sh')

QUESTION = 'What is your name?'


def text_of(message) -> str:
    return '\n'.join(p.text for p in message.parts if p.HasField('text'))


async def start(context: RequestContext, event_queue: EventQueue) -> TaskUpdater:
    task = context.current_task
    if task is None:
        task = new_task(
            context.task_id,
            context.context_id,
            TaskState.TASK_STATE_SUBMITTED,
            history=[context.message],
        )
        await event_queue.enqueue_event(task)
    return TaskUpdater(event_queue, task.id, task.context_id)


class Echo(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = await start(context, event_queue)
        text = text_of(context.message)
        await updater.add_artifact([Part(text=text)], name='echo')
        await updater.complete(updater.new_agent_message([Part(text=f'echo: {text}')]))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


class AskName(AgentExecutor):
    def __init__(self, work_s: float):
        self.work_s = work_s

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = await start(context, event_queue)
        current = context.current_task
        history = list(current.history) if current else []
        # The SDK keeps the question as the status message (it may not be in the history).
        asked = current is not None and (
            current.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            or any(m.role == Role.ROLE_AGENT and text_of(m) == QUESTION for m in history)
        )
        await updater.start_work()
        await asyncio.sleep(self.work_s)
        if not asked:
            await updater.requires_input(updater.new_agent_message([Part(text=QUESTION)]))
            return
        first = next((text_of(m) for m in history if m.role == Role.ROLE_USER), '')
        greeting = f'Hello, {text_of(context.message)}! You asked: {first}'
        await updater.add_artifact([Part(text=greeting)], name='greeting')
        await updater.complete(updater.new_agent_message([Part(text=greeting)]))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def card(name: str, description: str, base: str) -> AgentCard:
    return AgentCard(
        name=name,
        description=description,
        version='1.0.0',
        supported_interfaces=[
            AgentInterface(url=f'{base}/{name}/rpc', protocol_binding='JSONRPC', protocol_version='1.0'),
            AgentInterface(url=f'{base}/{name}', protocol_binding='HTTP+JSON', protocol_version='1.0'),
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=['text/plain'],
        default_output_modes=['text/plain'],
        skills=[AgentSkill(id=name, name=name, description=description, tags=['sample'])],
    )


def agent_routes(executor: AgentExecutor, agent_card: AgentCard) -> list:
    handler = DefaultRequestHandler(
        agent_executor=executor,
        task_store=InMemoryTaskStore(),
        agent_card=agent_card,
    )
    return (
        create_agent_card_routes(agent_card)
        + create_jsonrpc_routes(handler, rpc_url='/rpc')
        + create_rest_routes(handler)
    )


def main() -> None:
    if len(sys.argv) not in (2, 3):
        _die(2, 'usage: a2a_server.py PORT [WORK_MS]')
    port = int(sys.argv[1])
    work_s = (int(sys.argv[2]) if len(sys.argv) == 3 else 300) / 1000
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(('127.0.0.1', port))
    base = f'http://127.0.0.1:{sock.getsockname()[1]}'
    app = Starlette(
        routes=[
            Mount('/echo', routes=agent_routes(Echo(), card('echo', 'Echoes your message back', base))),
            Mount(
                '/ask-name',
                routes=agent_routes(AskName(work_s), card('ask-name', 'Asks your name, then greets you', base)),
            ),
        ]
    )
    print(base, flush=True)
    config = uvicorn.Config(app, log_level='warning')
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == '__main__':
    main()
