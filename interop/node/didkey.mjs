#!/usr/bin/env node
// Resolve did:key DIDs (or DID URLs) with @digitalbazaar/did-method-key 5.3.0
// and print the resulting documents as a JSON array.
//
// Usage: node didkey.mjs [--suite multikey|2020] DID [DID...]
// Exit codes: 0 all resolved, 1 a DID failed to resolve, 2 usage error.
//
// Document shapes this library produces (checked against 5.3.0 source and
// output; the suite is chosen by which `fromMultibase` is registered for the
// 'z6Mk' header via driver.use()):
//
// --suite multikey (default; fromMultibase = @digitalbazaar/ed25519-multikey `from`)
//   {"@context": ["https://www.w3.org/ns/did/v1",
//                 "https://w3id.org/security/multikey/v1"],
//    "id": "did:key:z6Mk...",
//    "verificationMethod": [{"id": "did:key:z6Mk...#z6Mk...", "type": "Multikey",
//        "controller": "did:key:z6Mk...", "publicKeyMultibase": "z6Mk..."}],
//    "authentication" / "assertionMethod" / "capabilityDelegation" /
//    "capabilityInvocation": ["did:key:z6Mk...#z6Mk..."]}
//   NO keyAgreement (the library has a FIXME: no X25519 derivation for Multikey).
//
// --suite 2020 (fromMultibase = @digitalbazaar/ed25519-verification-key-2020 `from`)
//   "@context": ["https://www.w3.org/ns/did/v1",
//                "https://w3id.org/security/suites/ed25519-2020/v1",
//                "https://w3id.org/security/suites/x25519-2020/v1"]
//   verificationMethod[0].type = "Ed25519VerificationKey2020" (same id /
//   controller / publicKeyMultibase as above), the same four relationship
//   arrays, plus
//   "keyAgreement": [{"id": "did:key:z6Mk...#z6LS...",
//       "type": "X25519KeyAgreementKey2020", "controller": "did:key:z6Mk...",
//       "publicKeyMultibase": "z6LS..."}]   (embedded object, not a reference;
//   X25519 key = Ed25519->Curve25519 birational map, multicodec 0xec 0x01).
//   With --suite 2020 a bare X25519 did:key ('z6LS' header) also resolves, to
//   {"@context": [did/v1, x25519-2020/v1], "id", "keyAgreement": [..]} only.
//
// Key order in every object is: @context, id, verificationMethod,
// authentication, assertionMethod, capabilityDelegation, capabilityInvocation,
// keyAgreement. A DID URL with a fragment (did:key:z6Mk...#frag) resolves to
// the single key node with "@context" set to that suite's context *string*
// (not an array), e.g. "https://w3id.org/security/multikey/v1".

import {driver} from '@digitalbazaar/did-method-key';
import * as Ed25519Multikey from '@digitalbazaar/ed25519-multikey';
import {Ed25519VerificationKey2020} from '@digitalbazaar/ed25519-verification-key-2020';
import {X25519KeyAgreementKey2020} from '@digitalbazaar/x25519-key-agreement-key-2020';

const USAGE = 'usage: node didkey.mjs [--suite multikey|2020] DID [DID...]';

function usage(msg) {
  process.stderr.write(`${USAGE}\ndidkey.mjs: ${msg}\n`);
  process.exit(2);
}

const args = process.argv.slice(2);
let suite = 'multikey';
const dids = [];
for (let i = 0; i < args.length; i++) {
  const a = args[i];
  if (a === '--suite') {
    suite = args[++i];
  } else if (a.startsWith('--suite=')) {
    suite = a.slice('--suite='.length);
  } else if (a.startsWith('-')) {
    usage(`unknown option ${a}`);
  } else {
    dids.push(a);
  }
}
if (!['multikey', '2020'].includes(suite)) usage('--suite must be multikey or 2020');
if (dids.length === 0) usage('at least one DID is required');

const resolver = driver();
if (suite === 'multikey') {
  resolver.use({multibaseMultikeyHeader: 'z6Mk', fromMultibase: Ed25519Multikey.from});
} else {
  resolver.use({multibaseMultikeyHeader: 'z6Mk', fromMultibase: Ed25519VerificationKey2020.from});
  resolver.use({multibaseMultikeyHeader: 'z6LS', fromMultibase: X25519KeyAgreementKey2020.from});
}

const docs = [];
let failed = false;
for (const did of dids) {
  if (!did.startsWith('did:key:')) {
    process.stderr.write(`didkey.mjs: not a did:key: ${did}\n`);
    failed = true;
    continue;
  }
  try {
    docs.push(await resolver.get({did}));
  } catch (e) {
    process.stderr.write(`didkey.mjs: cannot resolve ${did}: ${e?.message ?? e}\n`);
    failed = true;
  }
}
if (failed) process.exit(1);
console.log(JSON.stringify(docs, null, 2));
