#!/usr/bin/env node
// Verify an agentnet signed task receipt (docs/PROTOCOL.md, "Receipts and the audit log")
// with independent implementations: the did:key reference driver
// (@digitalbazaar/did-method-key, Multikey suite) for the signer's key, `jose` for the compact
// JWS (RFC 7515, EdDSA), and `canonicalize` (RFC 8785) to check the payload bytes are the
// canonical form of the JSON they hold.
//
// Usage: node receipt.mjs JWS_FILE TASK_ID AGENT_DID CALLER_DID|-
// Prints {"ok": true, "kid": ..., "payload": {...}} and exits 0 when it verifies; prints
// {"ok": false, "error": ...} and exits 1 otherwise; 2 on usage errors.

import {readFileSync} from 'node:fs';
import {driver} from '@digitalbazaar/did-method-key';
import * as Ed25519Multikey from '@digitalbazaar/ed25519-multikey';
import {compactVerify, decodeProtectedHeader, importJWK} from 'jose';
import canonicalize from 'canonicalize';

const [file, taskId, agent, caller] = process.argv.slice(2);
if (!file || !taskId || !agent || !caller) {
  process.stderr.write('usage: node receipt.mjs JWS_FILE TASK_ID AGENT_DID CALLER_DID|-\n');
  process.exit(2);
}
const fail = (error) => {
  console.log(JSON.stringify({ok: false, error}));
  process.exit(1);
};

const jws = readFileSync(file, 'utf8').trim();
let header;
try {
  header = decodeProtectedHeader(jws);
} catch (e) {
  fail(`not a JWS: ${e.message}`);
}
if (header.alg !== 'EdDSA') fail(`alg ${header.alg}`);
const kid = header.kid;
if (typeof kid !== 'string' || !kid.startsWith('did:key:')) fail(`kid ${kid} is not a did:key URL`);
const did = kid.split('#')[0];

const resolver = driver();
resolver.use({multibaseMultikeyHeader: 'z6Mk', fromMultibase: Ed25519Multikey.from});
const doc = await resolver.get({did});
const assertion = (doc.assertionMethod ?? []).map((m) => (typeof m === 'string' ? m : m.id));
if (!assertion.includes(kid)) fail(`${kid} is not an assertionMethod of ${did}`);
const vm = (doc.verificationMethod ?? []).find((m) => m.id === kid);
if (!vm) fail(`no verification method ${kid}`);
const keyPair = await Ed25519Multikey.from(vm);
const jwk = await Ed25519Multikey.toJwk({keyPair});
const key = await importJWK({...jwk, alg: 'EdDSA'}, 'EdDSA');

let payloadBytes;
try {
  ({payload: payloadBytes} = await compactVerify(jws, key, {algorithms: ['EdDSA']}));
} catch (e) {
  fail(`signature: ${e.code ?? ''} ${e.message}`);
}
const text = new TextDecoder().decode(payloadBytes);
const payload = JSON.parse(text);
if (canonicalize(payload) !== text) fail('the payload is not in its RFC 8785 canonical form');
if (payload.v !== 1) fail(`version ${payload.v}`);
if (payload.taskId !== taskId) fail(`receipt for task ${payload.taskId}, expected ${taskId}`);
if (payload.agent !== agent || did !== agent) fail(`receipt by ${payload.agent} (kid ${did}), expected ${agent}`);
const wantCaller = caller === '-' ? null : caller;
if (payload.caller !== wantCaller) fail(`receipt for caller ${payload.caller}, expected ${wantCaller}`);
console.log(JSON.stringify({ok: true, kid, payload}));
