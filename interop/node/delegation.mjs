#!/usr/bin/env node
// The independent side of agentnet's delegation chains (docs/PROTOCOL.md, "Delegation"):
// W3C VC 2.0 credentials with eddsa-jcs-2022 Data Integrity proofs, issued and verified with
// digitalbazaar's @digitalbazaar/vc, @digitalbazaar/data-integrity and
// @digitalbazaar/eddsa-jcs-2022-cryptosuite; did:key through @digitalbazaar/did-method-key.
//
// Usage:
//   node delegation.mjs verify CHAIN.json [--principal DID] [--holder DID]
//       verifies each link's proof with @digitalbazaar/vc and the chain's links (issuer =
//       the audience before, parent = sha256 of the RFC 8785 bytes of the link before);
//       prints {"verified": true, "links": N, "principal": DID}; exit 1 when it does not hold.
//   node delegation.mjs issue --to DID [--links N] [--ops send,get] [--depth D]
//       [--skills a,b] [--agents DID,DID] [--ttl SECONDS] [--expired]
//       mints a principal did:key (and N-1 intermediate ones), issues root → … → DID and
//       prints {"principal": DID, "chain": [...]}.
// Exit codes: 0 ok, 1 does not verify, 2 usage error.
import fs from 'node:fs';
import crypto from 'node:crypto';
import * as vc from '@digitalbazaar/vc';
import {DataIntegrityProof} from '@digitalbazaar/data-integrity';
import {createSignCryptosuite, createVerifyCryptosuite} from '@digitalbazaar/eddsa-jcs-2022-cryptosuite';
import * as Ed25519Multikey from '@digitalbazaar/ed25519-multikey';
import {driver as didKeyDriver} from '@digitalbazaar/did-method-key';
import {contexts as credContexts} from '@digitalbazaar/credentials-context';
import canonicalize from 'canonicalize';

const didKey = didKeyDriver();
didKey.use({multibaseMultikeyHeader: 'z6Mk', fromMultibase: Ed25519Multikey.from});

async function documentLoader(url) {
  if (credContexts.has(url)) {
    return {contextUrl: null, documentUrl: url, document: credContexts.get(url)};
  }
  if (url.startsWith('did:key:')) {
    const document = await didKey.get({url});
    return {contextUrl: null, documentUrl: url, document};
  }
  throw new Error(`documentLoader: refusing to load ${url}`);
}

function die(code, msg) {
  process.stderr.write(`delegation.mjs: ${msg}\n`);
  process.exit(code);
}

function digest(v) {
  return 'sha256:' + crypto.createHash('sha256').update(canonicalize(v)).digest('hex');
}

function args(rest) {
  const o = {positional: []};
  for (let i = 0; i < rest.length; i++) {
    const a = rest[i];
    if (a === '--expired') { o.expired = true; continue; }
    if (a.startsWith('--')) {
      const v = rest[++i];
      if (v === undefined) die(2, `option ${a} needs a value`);
      o[a.slice(2)] = v;
    } else o.positional.push(a);
  }
  return o;
}

async function verify(o) {
  if (o.positional.length !== 1) die(2, 'verify takes one CHAIN file');
  const chain = JSON.parse(fs.readFileSync(o.positional[0], 'utf8'));
  if (!Array.isArray(chain) || chain.length === 0) die(1, 'the chain is not a non-empty array');
  const suite = new DataIntegrityProof({cryptosuite: createVerifyCryptosuite()});
  for (let i = 0; i < chain.length; i++) {
    const link = chain[i];
    const r = await vc.verifyCredential({credential: link, suite, documentLoader});
    if (!r.verified) {
      const why = (r.error?.errors || [r.error]).map(e => e?.message || String(e)).join('; ');
      die(1, `link ${i}: proof does not verify: ${why}`);
    }
    const issuer = typeof link.issuer === 'string' ? link.issuer : link.issuer?.id;
    if (!link.proof.verificationMethod.startsWith(issuer + '#')) {
      die(1, `link ${i}: signed by ${link.proof.verificationMethod}, not by its issuer ${issuer}`);
    }
    if (i > 0) {
      const before = chain[i - 1];
      if (issuer !== before.credentialSubject.id) die(1, `link ${i}: issuer ${issuer} is not the audience before it`);
      if (link.credentialSubject.parent !== digest(before)) die(1, `link ${i}: parent digest does not name the link before it`);
    } else if (link.credentialSubject.parent !== undefined) {
      die(1, 'link 0 names a parent');
    }
  }
  const root = chain[0];
  const principal = typeof root.issuer === 'string' ? root.issuer : root.issuer.id;
  if (o.principal && o.principal !== principal) die(1, `principal ${principal}, not ${o.principal}`);
  const holder = chain[chain.length - 1].credentialSubject.id;
  if (o.holder && o.holder !== holder) die(1, `holder ${holder}, not ${o.holder}`);
  process.stdout.write(JSON.stringify({verified: true, links: chain.length, principal, holder}) + '\n');
}

async function mint() {
  const key = await Ed25519Multikey.generate();
  const did = `did:key:${key.publicKeyMultibase}`;
  key.id = `${did}#${key.publicKeyMultibase}`;
  key.controller = did;
  return {key, did};
}

function rfc3339(ms) {
  return new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');
}

async function issue(o) {
  if (!o.to) die(2, 'issue needs --to DID');
  const links = Number(o.links || 1);
  if (!(links >= 1 && links <= 8)) die(2, '--links must be 1 to 8');
  const ops = (o.ops || 'send,get').split(',');
  const depth0 = Number(o.depth ?? links - 1);
  const ttl = Number(o.ttl || 3600) * 1000;
  const now = Date.now();
  const from = o.expired ? now - 2 * ttl : now - 10_000;
  const until = o.expired ? now - ttl : now + ttl;
  const issuers = [];
  for (let i = 0; i < links; i++) issuers.push(await mint());
  const chain = [];
  for (let i = 0; i < links; i++) {
    const audience = i + 1 < links ? issuers[i + 1].did : o.to;
    const capability = {ops, depth: depth0 - i};
    if (o.skills) capability.skills = o.skills.split(',');
    if (o.agents) capability.agents = o.agents.split(',');
    const subject = {id: audience, capability};
    if (i > 0) subject.parent = digest(chain[i - 1]);
    const credential = {
      '@context': ['https://www.w3.org/ns/credentials/v2'],
      type: ['VerifiableCredential', 'AgentnetDelegation'],
      id: `urn:uuid:${crypto.randomUUID()}`,
      issuer: issuers[i].did,
      validFrom: rfc3339(from),
      validUntil: rfc3339(until),
      credentialSubject: subject,
    };
    const suite = new DataIntegrityProof({signer: issuers[i].key.signer(), cryptosuite: createSignCryptosuite()});
    chain.push(await vc.issue({credential, suite, documentLoader}));
  }
  process.stdout.write(JSON.stringify({principal: issuers[0].did, chain}) + '\n');
}

const [cmd, ...rest] = process.argv.slice(2);
const o = args(rest);
try {
  if (cmd === 'verify') await verify(o);
  else if (cmd === 'issue') await issue(o);
  else die(2, `unknown command ${cmd ?? '(none)'}: verify or issue`);
} catch (e) {
  die(1, e?.stack || String(e));
}
