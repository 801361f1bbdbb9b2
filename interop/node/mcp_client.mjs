// List and call the tools of an MCP server over Streamable HTTP with the official TypeScript SDK
// client (npm @modelcontextprotocol/sdk; its current release speaks the 2025-11-25 era:
// `initialize`, then a session).
//
// Usage: node mcp_client.mjs URL [--call NAME JSON]... [--header NAME:VALUE]...
//
// Checks (exit 1 when one fails): the server lists at least one tool, and every tool has a
// description, an input schema and an output schema (JSON objects of type "object"). Then each
// --call is made in order; a tool error is reported, not a failure.
// Output: one JSON summary line on stdout:
//   {"ok": true, "protocolVersion", "tools": [names], "calls": [{name, isError, text, structuredContent}]}
// or {"ok": false, "failed": "..."}. Exit codes: 0 passed, 1 a check failed, 2 usage error.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

function usage(msg) {
  process.stderr.write(`mcp_client.mjs: ${msg}\n`);
  process.exit(2);
}

const argv = process.argv.slice(2);
const url = argv.shift();
if (!url || url.startsWith('--')) usage('URL first');
const calls = [];
const headers = {};
while (argv.length) {
  const flag = argv.shift();
  if (flag === '--call') {
    const name = argv.shift();
    const raw = argv.shift();
    if (name === undefined || raw === undefined) usage('--call NAME JSON');
    let args;
    try {
      args = JSON.parse(raw);
    } catch (e) {
      usage(`--call ${name}: ${e.message}`);
    }
    if (args === null || typeof args !== 'object' || Array.isArray(args)) usage(`--call ${name}: not a JSON object`);
    calls.push([name, args]);
  } else if (flag === '--header') {
    const h = argv.shift() ?? '';
    const i = h.indexOf(':');
    if (i <= 0) usage(`--header ${h}: want NAME:VALUE`);
    headers[h.slice(0, i).trim()] = h.slice(i + 1).trim();
  } else {
    usage(`unknown argument ${flag}`);
  }
}

class CheckFailed extends Error {}

async function run() {
  const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
  const client = new Client({ name: 'agentnet-interop', version: '0.0.0' });
  await client.connect(transport);
  try {
    const { tools } = await client.listTools();
    if (!tools.length) throw new CheckFailed('the server lists no tools');
    for (const t of tools) {
      for (const [what, schema] of [['input', t.inputSchema], ['output', t.outputSchema]]) {
        if (!schema || schema.type !== 'object') {
          throw new CheckFailed(`tool ${t.name} has no ${what} schema of type object: ${JSON.stringify(schema)}`);
        }
      }
      if (!(t.description ?? '').trim()) throw new CheckFailed(`tool ${t.name} has no description`);
    }
    const done = [];
    for (const [name, args] of calls) {
      // The SDK validates structuredContent against the tool's output schema here.
      const r = await client.callTool({ name, arguments: args });
      done.push({
        name,
        isError: Boolean(r.isError),
        text: (r.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('\n'),
        structuredContent: r.structuredContent ?? null,
      });
    }
    return {
      ok: true,
      protocolVersion: transport.protocolVersion ?? null,
      tools: tools.map((t) => t.name),
      calls: done,
    };
  } finally {
    await transport.terminateSession().catch(() => {});
    await client.close();
  }
}

try {
  console.log(JSON.stringify(await run()));
} catch (e) {
  console.log(JSON.stringify({ ok: false, failed: String(e?.message ?? e) }));
  process.exit(1);
}
