#!/usr/bin/env node
// agentnet endorsements (docs/PROTOCOL.md, "Endorsements") with independent implementations:
// `jose` for the compact JWS (RFC 7515, EdDSA), `canonicalize` (RFC 8785) for the payload
// bytes, and @digitalbazaar/ed25519-multikey for the did:key and its key.
//
// Usage:
//   node endorsement.mjs verify JWS_FILE
//     Prints {"ok": true, "payload": {...}} and exits 0 when the JWS verifies with the key of
//     the did:key its kid names, the payload is canonical and names that DID as `iss`;
//     {"ok": false, "error": ...} and exit 1 otherwise.
//   node endorsement.mjs issue SEED_HEX SUBJECT_DID SKILL IAT EXP
//     Prints {"jws": ..., "iss": ...}: an endorsement of SUBJECT_DID for SKILL, signed by the
//     did:key of the 32-byte SEED.
// Exit 2 on usage errors.

import {readFileSync} from 'node:fs';
import * as Ed25519Multikey from '@digitalbazaar/ed25519-multikey';
import {CompactSign, compactVerify, decodeProtectedHeader, importJWK} from 'jose';
import canonicalize from 'canonicalize';

const [mode, ...args] = process.argv.slice(2);
const usage = () => {
  process.stderr.write('usage: node endorsement.mjs verify JWS_FILE | issue SEED_HEX SUBJECT SKILL IAT EXP\n');
  process.exit(2);
};
const fail = (error) => {
  console.log(JSON.stringify({ok: false, error}));
  process.exit(1);
};
const TYP = 'agentnet-endorsement+jws';

async function keyOf(did) {
  const multibase = did.slice('did:key:'.length);
  const keyPair = await Ed25519Multikey.from({
    type: 'Multikey', id: `${did}#${multibase}`, controller: did, publicKeyMultibase: multibase,
  });
  const jwk = await Ed25519Multikey.toJwk({keyPair});
  return importJWK({...jwk, alg: 'EdDSA'}, 'EdDSA');
}

if (mode === 'verify') {
  const [file] = args;
  if (!file) usage();
  const jws = readFileSync(file, 'utf8').trim();
  let header;
  try {
    header = decodeProtectedHeader(jws);
  } catch (e) {
    fail(`not a JWS: ${e.message}`);
  }
  if (header.alg !== 'EdDSA' || header.typ !== TYP) fail(`header ${JSON.stringify(header)}`);
  const did = String(header.kid ?? '').split('#')[0];
  if (!did.startsWith('did:key:z6Mk')) fail(`kid ${header.kid} is not an Ed25519 did:key URL`);
  let payloadBytes;
  try {
    ({payload: payloadBytes} = await compactVerify(jws, await keyOf(did), {algorithms: ['EdDSA']}));
  } catch (e) {
    fail(`signature: ${e.code ?? ''} ${e.message}`);
  }
  const text = new TextDecoder().decode(payloadBytes);
  const payload = JSON.parse(text);
  if (canonicalize(payload) !== text) fail('the payload is not in its RFC 8785 canonical form');
  if (payload.v !== 1) fail(`version ${payload.v}`);
  if (payload.iss !== did) fail(`iss ${payload.iss} is not the kid's DID ${did}`);
  console.log(JSON.stringify({ok: true, payload}));
} else if (mode === 'issue') {
  const [seedHex, sub, skill, iat, exp] = args;
  if (!seedHex || !sub || !skill || !iat || !exp) usage();
  const keyPair = await Ed25519Multikey.generate({seed: Buffer.from(seedHex, 'hex')});
  const iss = `did:key:${keyPair.publicKeyMultibase}`;
  const jwk = await Ed25519Multikey.toJwk({keyPair, secretKey: true});
  // The library's secret key is seed and public key (64 bytes); a JWK's `d` is the seed.
  const d = Buffer.from(jwk.d, 'base64url').subarray(0, 32).toString('base64url');
  const key = await importJWK({...jwk, d, alg: 'EdDSA'}, 'EdDSA');
  const payload = canonicalize({v: 1, iss, sub, skills: [skill], iat: Number(iat), exp: Number(exp)});
  const jws = await new CompactSign(new TextEncoder().encode(payload))
    .setProtectedHeader({alg: 'EdDSA', kid: `${iss}#${keyPair.publicKeyMultibase}`, typ: TYP})
    .sign(key);
  console.log(JSON.stringify({jws, iss}));
} else {
  usage();
}
