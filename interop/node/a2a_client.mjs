#!/usr/bin/env node
// Drive agentnet's A2A 1.0 server with the official JavaScript SDK client (@a2a-js/sdk).
//
// Independent-implementation side of the agentnet A2A interop test, the twin of
// interop/python/a2a_client.py: every call goes through the SDK's own client (card
// resolution, transport selection, request building, response and SSE parsing); this
// script only checks what comes back. Who the caller is, by the last arguments:
// - none: the `x-test-caller` header, which the a2a crate's test authenticator reads (a
//   stand-in for the node's DID signatures);
// - `--sign SEED_HEX KEYID`: every request signed the ANP way (RFC 9421: @method,
//   @target-uri, @authority, content-digest; created, expires, nonce, keyid) with the Ed25519
//   key of that seed, as the node's hosted `did` agents require. The JS SDK has no DID
//   signing: this script's fetch wrapper does it, with node:crypto;
// - `--anonymous`: nothing; the agents must be `open`, and an anonymous caller's ListTasks is
//   empty (tasks are reachable by id only), which the list check then expects.
//
// Usage: node a2a_client.mjs BASE_URL JSONRPC|HTTP+JSON [--anonymous | --sign SEED_HEX KEYID]
// The agents are BASE_URL/echo (an echo agent whose card is named "echo") and
// BASE_URL/ask-name (asks for a name, then greets); A2A_ECHO and A2A_ASK rename them.
// Exit codes: 0 all checks passed, 1 a check failed, 2 usage error.
// Output: one JSON summary line on stdout.

import { createHash, createPrivateKey, randomBytes, randomUUID, sign } from 'node:crypto';

import { Role, TaskState } from '@a2a-js/sdk';
import {
  ClientFactory,
  JsonRpcTransportFactory,
  RestTransportFactory,
} from '@a2a-js/sdk/client';

const [base, binding, mode, seedHex, keyid] = process.argv.slice(2);
const usage = 'usage: a2a_client.mjs BASE_URL JSONRPC|HTTP+JSON [--anonymous | --sign SEED_HEX KEYID]';
if (!base || !['JSONRPC', 'HTTP+JSON'].includes(binding)
  || ![undefined, '--anonymous', '--sign'].includes(mode)
  || (mode === '--sign' && !(/^[0-9a-f]{64}$/.test(seedHex) && keyid))) {
  console.error(usage);
  process.exit(2);
}
const anonymous = mode === '--anonymous';
const echoAgent = process.env.A2A_ECHO || 'echo';
const askAgent = process.env.A2A_ASK || 'ask-name';

// RFC 9421 signature headers in the ANP profile for one request.
function signer(seed, kid) {
  // PKCS#8 wrapping of a raw Ed25519 seed (RFC 8410).
  const der = Buffer.concat([Buffer.from('302e020100300506032b657004220420', 'hex'), Buffer.from(seed, 'hex')]);
  const key = createPrivateKey({ key: der, format: 'der', type: 'pkcs8' });
  return (method, url, body) => {
    const digest = `sha-256=:${createHash('sha256').update(body).digest('base64')}:`;
    const created = Math.floor(Date.now() / 1000);
    const params = `("@method" "@target-uri" "@authority" "content-digest");created=${created};expires=${created + 300};nonce="${randomBytes(16).toString('hex')}";keyid="${kid}"`;
    const signatureBase = [
      `"@method": ${method.toUpperCase()}`,
      `"@target-uri": ${url}`,
      `"@authority": ${new URL(url).host}`,
      `"content-digest": ${digest}`,
      `"@signature-params": ${params}`,
    ].join('\n');
    const sig = sign(null, Buffer.from(signatureBase), key).toString('base64');
    return { 'content-digest': digest, 'signature-input': `sig1=${params}`, signature: `sig1=:${sig}:` };
  };
}
const signRequest = mode === '--sign' ? signer(seedHex, keyid) : undefined;

const caller = `did:example:node-${binding === 'JSONRPC' ? 'jsonrpc' : 'http-json'}`;
const fetchImpl = (input, init = {}) => {
  const headers = new Headers(init.headers || (input instanceof Request ? input.headers : undefined));
  if (signRequest) {
    const url = typeof input === 'string' ? input : input.url;
    const body = typeof init.body === 'string' ? init.body : '';
    for (const [k, v] of Object.entries(signRequest(init.method || 'GET', url, Buffer.from(body)))) headers.set(k, v);
  } else if (!anonymous) {
    headers.set('x-test-caller', caller);
  }
  return fetch(input, { ...init, headers });
};

class CheckFailed extends Error {}
const check = (cond, what) => {
  if (!cond) throw new CheckFailed(what);
};

function userMessage(text, taskId = '') {
  return {
    message: {
      messageId: randomUUID(),
      contextId: '',
      taskId,
      role: Role.ROLE_USER,
      parts: [{ content: { $case: 'text', value: text }, metadata: undefined, filename: '', mediaType: '' }],
      metadata: undefined,
      extensions: [],
      referenceTaskIds: [],
    },
    configuration: undefined,
    metadata: undefined,
    tenant: '',
  };
}

function stateOf(ev) {
  const p = ev.payload;
  if (p?.$case === 'task') return p.value.status?.state;
  if (p?.$case === 'statusUpdate') return p.value.status?.state;
  return undefined;
}

async function collect(stream) {
  const out = [];
  for await (const ev of stream) out.push(ev);
  return out;
}

async function clientFor(agent, clientConfig = {}) {
  const transports = binding === 'JSONRPC'
    ? [new JsonRpcTransportFactory({ fetchImpl })]
    : [new RestTransportFactory({ fetchImpl })];
  const factory = new ClientFactory({
    transports,
    preferredTransports: [binding],
    clientConfig,
  });
  // The JS resolver joins the card path to the host root, not to the base path: give the full URL.
  return factory.createFromUrl(`${base}/${agent}/.well-known/agent-card.json`, '');
}

const done = [];
let transport = '';
try {
  const echo = await clientFor(echoAgent);
  transport = echo.transport.constructor.name;
  const card = await echo.getAgentCard();
  check(card.name === 'echo', `card name ${card.name}`);
  done.push('card');

  const task = await echo.sendMessage(userMessage('hello from node'));
  check(task.status?.state === TaskState.TASK_STATE_COMPLETED, `send state ${task.status?.state}`);
  check(task.artifacts[0].parts[0].content.value === 'hello from node', 'echo artifact');
  done.push('send');

  const got = await echo.getTask({ id: task.id, historyLength: 1, tenant: '' });
  check(got.id === task.id && got.history.length === 1, `get ${got.history?.length}`);
  done.push('get');

  await echo.sendMessage(userMessage('second'));
  const page = await echo.listTasks({ pageSize: 1, tenant: '', contextId: '', status: 0, pageToken: '' });
  if (anonymous) {
    check(page.tasks.length === 0 && page.totalSize === 0 && page.nextPageToken === '', `anonymous list ${JSON.stringify(page).slice(0, 200)}`);
  } else {
    check(page.tasks.length === 1 && page.totalSize >= 2 && page.nextPageToken !== '', `list ${JSON.stringify(page).slice(0, 200)}`);
    const page2 = await echo.listTasks({ pageSize: 100, pageToken: page.nextPageToken, tenant: '', contextId: '', status: 0 });
    check(page2.tasks.some((t) => t.id === task.id), 'first task on the next page');
  }
  done.push('list');

  try {
    await echo.getTask({ id: 'no-such-task', tenant: '' });
    throw new CheckFailed('unknown task did not fail');
  } catch (e) {
    if (e instanceof CheckFailed) throw e;
    check(/^(JsonRpc|Rest)?TaskNotFoundError$/.test(e.constructor.name), `not-found error ${e.constructor.name}: ${e.message}`);
  }
  done.push('task-not-found');

  const askPoll = await clientFor(askAgent, { polling: true });
  const working = await askPoll.sendMessage(userMessage('slow one'));
  check([TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING].includes(working.status?.state), `non-blocking state ${working.status?.state}`);
  const canceled = await askPoll.cancelTask({ id: working.id, tenant: '', metadata: undefined });
  check(canceled.status?.state === TaskState.TASK_STATE_CANCELED, 'cancel state');
  done.push('cancel');

  const ask = await clientFor(askAgent);
  let evs = await collect(ask.sendMessageStream(userMessage('what time is it?')));
  check(evs[0].payload?.$case === 'task', `stream starts with the task: ${JSON.stringify(evs[0])}`);
  check(stateOf(evs.at(-1)) === TaskState.TASK_STATE_INPUT_REQUIRED, `stream end ${stateOf(evs.at(-1))}`);
  const taskId = evs[0].payload.value.id;
  evs = await collect(ask.sendMessageStream(userMessage('Node', taskId)));
  check(stateOf(evs.at(-1)) === TaskState.TASK_STATE_COMPLETED, 'answer completes');
  const arts = evs.filter((e) => e.payload?.$case === 'artifactUpdate').map((e) => e.payload.value.artifact);
  check(arts.length > 0 && arts[0].parts[0].content.value === 'Hello, Node! You asked: what time is it?', 'greeting artifact');
  done.push('stream');

  // SubscribeToTask stays open through the question (INPUT_REQUIRED); the answer sent
  // meanwhile completes the task, and the stream ends with it.
  const subTask = await askPoll.sendMessage(userMessage('subscribe to me'));
  evs = [];
  let answered = false;
  for await (const ev of ask.resubscribeTask({ id: subTask.id, tenant: '' })) {
    evs.push(ev);
    if (stateOf(ev) === TaskState.TASK_STATE_INPUT_REQUIRED && !answered) {
      answered = true;
      await askPoll.sendMessage(userMessage('Node', subTask.id));
    }
  }
  check(evs[0].payload?.$case === 'task' && evs[0].payload.value.id === subTask.id, 'subscribe starts with the task');
  check(stateOf(evs.at(-1)) === TaskState.TASK_STATE_COMPLETED, `subscribe end ${stateOf(evs.at(-1))}`);
  done.push('subscribe');

  // Lifecycle errors, mapped to the SDK's error types.
  async function expectError(name, fn, what) {
    try {
      await fn();
    } catch (e) {
      check(new RegExp(`^(JsonRpc|Rest)?${name}$`).test(e.constructor.name), `${what}: ${e.constructor.name}: ${e.message}`);
      return;
    }
    throw new CheckFailed(`${what}: no error`);
  }
  await expectError('UnsupportedOperationError', () => echo.sendMessage(userMessage('again', task.id)), 'message to terminal');
  await expectError('TaskNotCancelableError', () => echo.cancelTask({ id: task.id, tenant: '' }), 'cancel terminal');
  await expectError('UnsupportedOperationError', () => collect(ask.resubscribeTask({ id: working.id, tenant: '' })), 'subscribe terminal');
  await expectError('TaskNotFoundError', () => collect(ask.resubscribeTask({ id: 'no-such-task', tenant: '' })), 'subscribe unknown');
  done.push('errors');

  console.log(JSON.stringify({ binding, transport, ok: true, checks: done }));
} catch (e) {
  console.log(JSON.stringify({ binding, transport, ok: false, checks: done, failed: `${e.constructor.name}: ${e.message}` }));
  process.exit(1);
}
