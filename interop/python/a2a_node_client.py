#!/usr/bin/env python3
"""Call an agent hosted by a real agentnet node with the official Python SDK client
(a2a-sdk), its requests signed with the caller's DID by the official ANP SDK (PyPI `anp`).

Usage:
  a2a_node_client.py ECHO_URL ASK_URL BINDING [--did-doc DOC.json --key KEY.jwk]
                     [--expect-401]

ECHO_URL and ASK_URL are agent base URLs (their cards are at
<url>/.well-known/agent-card.json): an `echo` agent and an `ask` agent (asks for the
caller's name with INPUT_REQUIRED, then greets). BINDING: JSONRPC or HTTP+JSON.

With --did-doc/--key every HTTP request the SDK sends is signed in an httpx request
hook by anp.authentication.generate_http_signature_headers (RFC 9421, the ANP profile:
Signature-Input, Signature, Content-Digest; keyid the document's first authentication
method). Without them the caller is anonymous.

Checks: card (both interfaces, the DID extension declared), blocking SendMessage to
COMPLETED with the echo artifact, GetTask, ListTasks (signed callers only: an anonymous
caller's list is empty by design), CancelTask of a terminal task -> TaskNotCancelable,
GetTask of an unknown id -> TaskNotFound, SendStreamingMessage through INPUT_REQUIRED
and on to COMPLETED. With --expect-401 only: the first send must fail with HTTP 401.

Exit codes: 0 all checks passed, 1 a check failed, 2 usage / setup error.
Output: one JSON summary line on stdout; diagnostics on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from typing import Any, NoReturn


def _die(code: int, msg: str) -> NoReturn:
    print(f'a2a_node_client.py: {msg}', file=sys.stderr)
    sys.exit(code)


try:
    import httpx
    from anp.authentication import generate_http_signature_headers

    from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
    from a2a.types import (
        CancelTaskRequest,
        GetTaskRequest,
        ListTasksRequest,
        Message,
        Part,
        Role,
        SendMessageRequest,
        TaskNotCancelableError,
        TaskNotFoundError,
        TaskState,
    )

    from anp_keys import load_json, load_jwk_private_key
except ImportError as e:  # pragma: no cover
    _die(2, f'missing dependency ({e}); run interop/setup.sh')

DID_EXTENSION = 'urn:agentnet:a2a:did-auth:v1'


class CheckFailed(Exception):
    pass


def check(cond: bool, what: str) -> None:
    if not cond:
        raise CheckFailed(what)


def user_message(text: str, task_id: str | None = None) -> SendMessageRequest:
    msg = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=text)])
    if task_id:
        msg.task_id = task_id
    return SendMessageRequest(message=msg)


def signing_hook(doc: dict, key: Any):
    keyid = doc['authentication'][0]
    if isinstance(keyid, dict):
        keyid = keyid['id']
    if keyid.startswith('#'):
        keyid = doc['id'] + keyid

    async def sign(request: httpx.Request) -> None:
        body = await request.aread()
        headers = generate_http_signature_headers(
            did_document=doc,
            request_url=str(request.url),
            request_method=request.method,
            sign_callback=lambda content, _fragment: key.sign(content),
            headers={},
            body=body or None,
            keyid=keyid,
        )
        for name, value in headers.items():
            request.headers[name] = value

    return sign


async def run(args: argparse.Namespace) -> dict[str, Any]:
    hooks = {}
    if args.did_doc:
        doc = load_json(args.did_doc)
        key = load_jwk_private_key(args.key)
        hooks = {'request': [signing_hook(doc, key)]}
    http = httpx.AsyncClient(timeout=30.0, event_hooks=hooks)
    done: list[str] = []
    try:

        async def client_for(url: str, streaming: bool):
            card = await A2ACardResolver(http, url).get_agent_card()
            config = ClientConfig(
                streaming=streaming,
                httpx_client=http,
                supported_protocol_bindings=[args.binding],
                use_client_preference=True,
            )
            return card, ClientFactory(config).create(card)

        card, echo = await client_for(args.echo_url, streaming=False)
        transport = type(echo._transport).__name__
        bindings = sorted(i.protocol_binding for i in card.supported_interfaces)
        check(bindings == ['HTTP+JSON', 'JSONRPC'], f'interfaces {bindings}')
        check(
            any(e.uri == DID_EXTENSION for e in card.capabilities.extensions),
            'the DID extension is declared',
        )
        check(len(card.signatures) >= 1, 'the card is signed')
        done.append('card')

        if args.expect_401:
            try:
                [ev async for ev in echo.send_message(user_message('who am i'))]
            except Exception as e:  # the SDK's error types differ per binding
                text = repr(e)
                check('401' in text, f'expected a 401, got {text}')
                done.append('unauthenticated-401')
                return {'ok': True, 'transport': transport, 'checks': done}
            raise CheckFailed('an unsigned request was served')

        events = [ev async for ev in echo.send_message(user_message('hello over a2a'))]
        check(len(events) == 1 and events[0].HasField('task'), f'send: {events}')
        task = events[0].task
        check(task.status.state == TaskState.TASK_STATE_COMPLETED, f'state {task.status.state}')
        check(task.artifacts[0].parts[0].text == 'hello over a2a', 'echo artifact')
        done.append('send')

        got = await echo.get_task(GetTaskRequest(id=task.id))
        check(got.id == task.id and got.status.state == TaskState.TASK_STATE_COMPLETED, 'get')
        done.append('get')

        page = await echo.list_tasks(ListTasksRequest(page_size=10))
        if args.did_doc:
            check(any(t.id == task.id for t in page.tasks), 'list has the task')
        else:
            check(len(page.tasks) == 0, 'an anonymous list is empty')
        done.append('list')

        try:
            await echo.cancel_task(CancelTaskRequest(id=task.id))
            raise CheckFailed('cancel of a completed task succeeded')
        except TaskNotCancelableError:
            done.append('cancel-terminal')

        try:
            await echo.get_task(GetTaskRequest(id=str(uuid.uuid4())))
            raise CheckFailed('unknown task found')
        except TaskNotFoundError:
            done.append('not-found')

        _, ask = await client_for(args.ask_url, streaming=True)
        states = []
        task_id = None
        async for ev in ask.send_message(user_message('greet me')):
            if ev.HasField('task'):
                task_id = ev.task.id
                states.append(ev.task.status.state)
            elif ev.HasField('status_update'):
                task_id = ev.status_update.task_id
                states.append(ev.status_update.status.state)
        check(states and states[-1] == TaskState.TASK_STATE_INPUT_REQUIRED, f'stream {states}')
        final = None
        async for ev in ask.send_message(user_message('Ada', task_id=task_id)):
            if ev.HasField('task'):
                final = ev.task
            elif ev.HasField('status_update'):
                states.append(ev.status_update.status.state)
        got = await ask.get_task(GetTaskRequest(id=task_id))
        check(got.status.state == TaskState.TASK_STATE_COMPLETED, f'ask final {got.status.state}')
        check('Hello, Ada!' in got.artifacts[0].parts[0].text, 'greeting artifact')
        done.append('stream-input-required-completed')
        return {'ok': True, 'transport': transport, 'checks': done}
    finally:
        await http.aclose()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument('echo_url')
    ap.add_argument('ask_url')
    ap.add_argument('binding', choices=['JSONRPC', 'HTTP+JSON'])
    ap.add_argument('--did-doc')
    ap.add_argument('--key')
    ap.add_argument('--expect-401', action='store_true')
    args = ap.parse_args()
    if bool(args.did_doc) != bool(args.key):
        _die(2, '--did-doc and --key go together')
    try:
        out = asyncio.run(run(args))
    except CheckFailed as e:
        print(json.dumps({'ok': False, 'failed': str(e)}))
        return 1
    print(json.dumps(out))
    return 0


if __name__ == '__main__':
    sys.exit(main())
