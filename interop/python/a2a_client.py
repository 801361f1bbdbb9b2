#!/usr/bin/env python3
"""Drive agentnet's A2A 1.0 server with the official Python SDK client (a2a-sdk).

Independent-implementation side of the agentnet A2A interop test. Every call goes
through a2a-sdk's own client (card resolution, transport selection from the card,
request building, response and SSE parsing, error mapping); this script only
checks what comes back.

The server is the sample router of the agentnet-a2a crate (a2a/examples/a2a_samples.rs
or the in-process server of a2a/tests/interop_python.rs): `echo` under /echo and
`ask-name` (asks for input, then completes) under /ask-name. The server's test
authenticator takes the caller from the `x-test-caller` header, which stands in for
the DID signature the node will verify.

Usage:
  a2a_client.py BASE_URL BINDING      BINDING: JSONRPC or HTTP+JSON

Checks, over the chosen binding: card, SendMessage (blocking), GetTask, ListTasks,
CancelTask, SendStreamingMessage through INPUT_REQUIRED and on to COMPLETED,
SubscribeToTask, and that the lifecycle errors (unknown task, message to / cancel of /
subscribe to a terminal task) map to the SDK's error types.

Exit codes: 0 all checks passed, 1 a check failed, 2 usage / setup error.
Output: one JSON summary line on stdout; diagnostics on stderr.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid

from typing import Any, NoReturn


def _die(code: int, msg: str) -> NoReturn:
    print(f'a2a_client.py: {msg}', file=sys.stderr)
    sys.exit(code)


try:
    import httpx

    from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
    from a2a.types import (
        CancelTaskRequest,
        GetTaskRequest,
        ListTasksRequest,
        Message,
        Part,
        Role,
        SendMessageRequest,
        SubscribeToTaskRequest,
        TaskNotCancelableError,
        TaskNotFoundError,
        TaskState,
        UnsupportedOperationError,
    )
except ImportError as e:  # pragma: no cover
    _die(2, f'missing dependency ({e}); run interop/setup.sh')


class CheckFailed(Exception):
    pass


def check(cond: bool, what: str) -> None:
    if not cond:
        raise CheckFailed(what)


def user_message(text: str, task_id: str | None = None) -> SendMessageRequest:
    msg = Message(
        message_id=str(uuid.uuid4()),
        role=Role.ROLE_USER,
        parts=[Part(text=text)],
    )
    if task_id:
        msg.task_id = task_id
    return SendMessageRequest(message=msg)


def state_of(ev: Any) -> int | None:
    if ev.HasField('task'):
        return ev.task.status.state
    if ev.HasField('status_update'):
        return ev.status_update.status.state
    return None


async def collect(stream: Any) -> list[Any]:
    return [ev async for ev in stream]


async def run(base: str, binding: str) -> dict[str, Any]:
    caller = f'did:example:python-{binding.lower().replace("+", "-")}'
    http = httpx.AsyncClient(headers={'x-test-caller': caller}, timeout=30.0)
    done: list[str] = []
    try:

        async def client_for(agent: str, streaming: bool, polling: bool = False):
            card = await A2ACardResolver(http, f'{base}/{agent}').get_agent_card()
            check(card.name == agent, f'card name {card.name!r}')
            config = ClientConfig(
                streaming=streaming,
                polling=polling,
                httpx_client=http,
                supported_protocol_bindings=[binding],
                use_client_preference=True,
            )
            return ClientFactory(config).create(card)

        # Card and blocking SendMessage.
        echo = await client_for('echo', streaming=False)
        transport = type(echo._transport).__name__  # which binding the SDK really chose
        done.append('card')
        events = await collect(echo.send_message(user_message('hello from python')))
        check(len(events) == 1 and events[0].HasField('task'), f'send: {events}')
        task = events[0].task
        check(task.status.state == TaskState.TASK_STATE_COMPLETED, f'send state {task.status.state}')
        check(task.artifacts[0].parts[0].text == 'hello from python', 'echo artifact')
        done.append('send')

        # GetTask.
        got = await echo.get_task(GetTaskRequest(id=task.id, history_length=1))
        check(got.id == task.id, 'get id')
        check(len(got.history) == 1, f'get history {len(got.history)}')
        done.append('get')

        # ListTasks: this caller's tasks only, newest first, paged.
        await collect(echo.send_message(user_message('second')))
        page = await echo.list_tasks(ListTasksRequest(page_size=1))
        check(len(page.tasks) == 1, f'list page {len(page.tasks)}')
        check(page.total_size >= 2, f'list total {page.total_size}')
        check(page.next_page_token != '', 'list next token')
        page2 = await echo.list_tasks(
            ListTasksRequest(page_size=100, page_token=page.next_page_token)
        )
        check(any(t.id == task.id for t in page2.tasks), 'first task on the next page')
        done.append('list')

        # Unknown task: the SDK's TaskNotFoundError.
        try:
            await echo.get_task(GetTaskRequest(id='no-such-task'))
            raise CheckFailed('unknown task did not fail')
        except TaskNotFoundError:
            pass
        done.append('task-not-found')

        # CancelTask on a working task (non-blocking send).
        ask_poll = await client_for('ask-name', streaming=False, polling=True)
        events = await collect(ask_poll.send_message(user_message('slow one')))
        working = events[0].task
        check(
            working.status.state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING),
            f'non-blocking state {working.status.state}',
        )
        canceled = await ask_poll.cancel_task(CancelTaskRequest(id=working.id))
        check(canceled.status.state == TaskState.TASK_STATE_CANCELED, 'cancel state')
        done.append('cancel')

        # SendStreamingMessage: task, working, INPUT_REQUIRED; then the answer to COMPLETED.
        ask = await client_for('ask-name', streaming=True)
        events = await collect(ask.send_message(user_message('what time is it?')))
        check(events[0].HasField('task'), 'stream starts with the task')
        check(state_of(events[-1]) == TaskState.TASK_STATE_INPUT_REQUIRED, f'stream end {state_of(events[-1])}')
        task_id = events[0].task.id
        events = await collect(ask.send_message(user_message('Python', task_id)))
        check(state_of(events[-1]) == TaskState.TASK_STATE_COMPLETED, 'answer completes')
        arts = [e.artifact_update.artifact for e in events if e.HasField('artifact_update')]
        check(
            arts and arts[0].parts[0].text == 'Hello, Python! You asked: what time is it?',
            f'greeting artifact {arts}',
        )
        done.append('stream')

        # SubscribeToTask on a task that is working: the stream stays open through the
        # question (INPUT_REQUIRED), the answer sent meanwhile completes the task, and the
        # stream ends with it.
        events = await collect(ask_poll.send_message(user_message('subscribe to me')))
        sub_id = events[0].task.id
        events = []
        answered = False
        async for ev in ask.subscribe(SubscribeToTaskRequest(id=sub_id)):
            events.append(ev)
            if state_of(ev) == TaskState.TASK_STATE_INPUT_REQUIRED and not answered:
                answered = True
                await collect(ask_poll.send_message(user_message('Python', sub_id)))
        check(events[0].HasField('task') and events[0].task.id == sub_id, 'subscribe starts with the task')
        check(state_of(events[-1]) == TaskState.TASK_STATE_COMPLETED, f'subscribe end {state_of(events[-1])}')
        done.append('subscribe')

        # Lifecycle errors, mapped to the SDK's error types: a message to a terminal task,
        # cancel of a terminal task, subscribe to a terminal task, subscribe to no task.
        async def expect(exc: type, coro_or_gen: Any, what: str) -> None:
            try:
                if hasattr(coro_or_gen, '__aiter__'):
                    await collect(coro_or_gen)
                else:
                    await coro_or_gen
            except exc:
                return
            raise CheckFailed(f'{what}: no {exc.__name__}')

        await expect(UnsupportedOperationError, collect(echo.send_message(user_message('again', task.id))), 'message to terminal')
        await expect(TaskNotCancelableError, echo.cancel_task(CancelTaskRequest(id=task.id)), 'cancel terminal')
        await expect(UnsupportedOperationError, ask.subscribe(SubscribeToTaskRequest(id=working.id)), 'subscribe terminal')
        await expect(TaskNotFoundError, ask.subscribe(SubscribeToTaskRequest(id='no-such-task')), 'subscribe unknown')
        done.append('errors')
        return {'binding': binding, 'transport': transport, 'ok': True, 'checks': done}
    except CheckFailed as e:
        return {'binding': binding, 'ok': False, 'checks': done, 'failed': str(e)}
    except Exception as e:  # an SDK error is a failed check too, with its type
        return {'binding': binding, 'ok': False, 'checks': done, 'failed': f'{type(e).__name__}: {e}'}
    finally:
        await http.aclose()


def main() -> None:
    if len(sys.argv) != 3 or sys.argv[2] not in ('JSONRPC', 'HTTP+JSON'):
        _die(2, 'usage: a2a_client.py BASE_URL JSONRPC|HTTP+JSON')
    result = asyncio.run(run(sys.argv[1].rstrip('/'), sys.argv[2]))
    print(json.dumps(result))
    sys.exit(0 if result['ok'] else 1)


if __name__ == '__main__':
    main()
