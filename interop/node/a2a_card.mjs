#!/usr/bin/env node
// Sign / verify A2A 1.0 Agent Card signatures with @a2a-js/sdk (JS).
//
// Independent-implementation side of the agentnet interop tests. Signing and
// verification go through the SDK's own exports (package root '@a2a-js/sdk'):
//   generateAgentCardSignature(privateKey, protectedHeader, header?) -> async signer
//   verifyAgentCardSignature(async (kid, jku) => key)                -> async verifier
//   canonicalizeAgentCard(card)                                      -> JCS string
// `jose` is used only for key generation / JWK export; did:key kids are
// resolved with @digitalbazaar/did-method-key (+ ed25519-multikey toJwk).
//
// Usage:
//   node a2a_card.mjs verify SIGNED_CARD.json [--jwk PUBJWK.json]
//   node a2a_card.mjs sign CARD.json --alg ES256|EdDSA --out-key PUBJWK.json [--kid KID]
//   node a2a_card.mjs canonical CARD.json
// Exit codes: 0 ok, 1 verification failure, 2 usage / input error.

import fs from 'node:fs';
import {
  canonicalizeAgentCard,
  generateAgentCardSignature,
  verifyAgentCardSignature,
} from '@a2a-js/sdk';
import * as jose from 'jose';
import {driver as didKeyDriver} from '@digitalbazaar/did-method-key';
import * as Ed25519Multikey from '@digitalbazaar/ed25519-multikey';

const USAGE = `usage:
  node a2a_card.mjs verify SIGNED_CARD.json [--jwk PUBJWK.json]
  node a2a_card.mjs sign CARD.json --alg ES256|EdDSA --out-key PUBJWK.json [--kid KID]
  node a2a_card.mjs canonical CARD.json`;

class UsageError extends Error {}

function die(code, msg) {
  process.stderr.write(`a2a_card.mjs: ${msg}\n`);
  process.exit(code);
}

function parseArgs(argv) {
  const [cmd, ...rest] = argv;
  if (!['verify', 'sign', 'canonical'].includes(cmd)) {
    throw new UsageError(cmd ? `unknown command ${cmd}` : 'missing command');
  }
  const opts = {cmd, positional: []};
  const known = {verify: ['--jwk'], sign: ['--alg', '--out-key', '--kid'], canonical: []}[cmd];
  for (let i = 0; i < rest.length; i++) {
    const a = rest[i];
    if (a.startsWith('--')) {
      const [name, inline] = a.split(/=(.*)/s, 2);
      if (!known.includes(name)) throw new UsageError(`unknown option ${name} for ${cmd}`);
      const val = inline !== undefined ? inline : rest[++i];
      if (val === undefined) throw new UsageError(`option ${name} needs a value`);
      opts[name.slice(2)] = val;
    } else {
      opts.positional.push(a);
    }
  }
  if (opts.positional.length !== 1) throw new UsageError(`${cmd} takes exactly one CARD file`);
  if (cmd === 'sign') {
    if (!['ES256', 'EdDSA'].includes(opts.alg)) throw new UsageError('--alg must be ES256 or EdDSA');
    if (!opts['out-key']) throw new UsageError('--out-key is required');
  }
  return opts;
}

function loadJson(path) {
  let text;
  try {
    text = fs.readFileSync(path, 'utf8');
  } catch (e) {
    throw new UsageError(`cannot read ${path}: ${e.message}`);
  }
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new UsageError(`${path} is not valid JSON: ${e.message}`);
  }
}

// did:key DID URL -> public JWK, via the did:key resolver (Multikey suite).
const resolver = didKeyDriver();
resolver.use({multibaseMultikeyHeader: 'z6Mk', fromMultibase: Ed25519Multikey.from});

async function didKeyToJwk(kid) {
  const vm = await resolver.get({url: kid.includes('#') ? kid : `${kid}#${kid.slice('did:key:'.length)}`});
  const keyPair = await Ed25519Multikey.from(vm);
  return Ed25519Multikey.toJwk({keyPair});
}

function decodeProtected(sig) {
  try {
    return jose.decodeProtectedHeader(sig);
  } catch {
    return {};
  }
}

async function cmdVerify(opts) {
  const cardPath = opts.positional[0];
  const card = loadJson(cardPath);
  if (typeof card !== 'object' || card === null || Array.isArray(card)) {
    throw new UsageError(`${cardPath}: an Agent Card must be a JSON object`);
  }
  const fixedJwk = opts.jwk ? loadJson(opts.jwk) : null;
  const sigs = Array.isArray(card.signatures) ? card.signatures : [];
  if (sigs.length === 0) {
    console.log(JSON.stringify({ok: false, error: 'card has no signatures'}));
    die(1, 'verification FAILED: no signatures');
  }

  const verifier = verifyAgentCardSignature(async (kid, _jku) => {
    if (fixedJwk) return fixedJwk;
    if (typeof kid !== 'string' || !kid.startsWith('did:key:')) {
      throw new Error(`cannot resolve kid ${JSON.stringify(kid)} (not did:key and no --jwk)`);
    }
    return didKeyToJwk(kid);
  });

  // The SDK verifier logs each failed entry with console.debug; keep stdout
  // clean JSON by routing debug output to stderr.
  console.debug = (...args) => process.stderr.write(args.map(String).join(' ') + '\n');

  const results = [];
  for (let i = 0; i < sigs.length; i++) {
    // The SDK verifier accepts a card if ANY signature verifies; check each
    // entry on its own by handing it a copy carrying just that signature.
    const hdr = decodeProtected(sigs[i]);
    const entry = {index: i, alg: hdr.alg ?? null, kid: hdr.kid ?? null};
    try {
      await verifier({...card, signatures: [sigs[i]]});
      entry.ok = true;
    } catch (e) {
      entry.ok = false;
      entry.error = String(e?.message ?? e);
    }
    results.push(entry);
  }
  const ok = results.every((r) => r.ok);
  console.log(JSON.stringify({ok, signatures: results}));
  if (!ok) {
    die(1, `verification FAILED for signature(s) ${JSON.stringify(results.filter((r) => !r.ok).map((r) => r.index))}`);
  }
}

function multibaseEd25519(xB64u) {
  // did:key for an Ed25519 key, built through the Multikey library.
  return Ed25519Multikey.fromJwk({jwk: {kty: 'OKP', crv: 'Ed25519', x: xB64u}}).then((kp) => kp.publicKeyMultibase);
}

async function cmdSign(opts) {
  const cardPath = opts.positional[0];
  const card = loadJson(cardPath);
  if (typeof card !== 'object' || card === null || Array.isArray(card)) {
    throw new UsageError(`${cardPath}: an Agent Card must be a JSON object`);
  }
  const alg = opts.alg;
  const {privateKey, publicKey} = await jose.generateKeyPair(alg, {extractable: true, crv: alg === 'EdDSA' ? 'Ed25519' : undefined});
  const pubJwk = await jose.exportJWK(publicKey);
  let kid = opts.kid;
  if (!kid) {
    if (alg === 'EdDSA') {
      const mb = await multibaseEd25519(pubJwk.x);
      kid = `did:key:${mb}#${mb}`;
    } else {
      kid = 'test-key-1';
    }
  }
  const signer = generateAgentCardSignature(privateKey, {alg, typ: 'JOSE', kid});
  const signed = await signer(card);
  try {
    fs.writeFileSync(opts['out-key'], JSON.stringify({...pubJwk, kid, alg, use: 'sig'}, null, 2) + '\n');
  } catch (e) {
    throw new UsageError(`cannot write ${opts['out-key']}: ${e.message}`);
  }
  // The SDK signer returns {...card, signatures: [...old, new]}: the raw input
  // (empty values included) plus the signature.
  console.log(JSON.stringify(signed, null, 2));
}

async function cmdCanonical(opts) {
  process.stdout.write(canonicalizeAgentCard(loadJson(opts.positional[0])) + '\n');
}

try {
  const opts = parseArgs(process.argv.slice(2));
  await {verify: cmdVerify, sign: cmdSign, canonical: cmdCanonical}[opts.cmd](opts);
} catch (e) {
  if (e instanceof UsageError) {
    process.stderr.write(USAGE + '\n');
    die(2, e.message);
  }
  die(2, `error: ${e?.stack ?? e}`);
}
