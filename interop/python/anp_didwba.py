#!/usr/bin/env python3
"""Create did:wba documents with the official ANP SDK (PyPI `anp`).

    anp_didwba.py create --host HOST [--port N] [--path SEG ...] [--e2ee]
                         [--profile e1] --out-doc DOC.json --out-key KEY.jwk
    anp_didwba.py check --did-doc DOC.json
    anp_didwba.py resolve --did DID

`resolve` fetches the document over HTTPS with the SDK's own resolver
(anp.authentication.resolve_did_wba_document, proof verification on; a private
CA is trusted through SSL_CERT_FILE), then runs the same checks as `check`.

`create` calls anp.authentication.create_did_wba_document (profile "e1":
Ed25519 Multikey #key-1 + DataIntegrityProof/eddsa-jcs-2022). With --path the
SDK appends the key-bound segment e1_<fingerprint>. The #key-1 private key is
written as an OKP JWK. Without --e2ee the SDK's extra E2EE keys (#key-2 P-256,
#key-3 X25519) are not added; with --e2ee they are added to the document and
their private keys are written to OUT-KEY with suffix ".e2ee.json" as PEM text.

`check` runs the SDK's own document checks (binding/e1 proof via
validate_did_document_binding, and verify_w3c_proof) and exits 0/1.

Exit codes: 0 ok, 1 check failed, 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from anp.authentication import create_did_wba_document
from anp.authentication.did_wba import (
    _extract_public_key,
    _find_verification_method,
    validate_did_document_binding,
)
from anp.proof import verify_w3c_proof

from anp_keys import KeyFileError, load_json, pem_to_jwk, write_json


def cmd_create(args: argparse.Namespace) -> int:
    doc, keys = create_did_wba_document(
        hostname=args.host,
        port=args.port,
        path_segments=args.path or None,
        agent_description_url=args.agent_description_url,
        enable_e2ee=args.e2ee,
        did_profile=args.profile,
        created=args.created,
    )
    priv_pem, _pub_pem = keys["key-1"]
    jwk = pem_to_jwk(priv_pem)
    write_json(args.out_doc, doc)
    write_json(args.out_key, jwk)
    extra = {name: pair[0].decode("ascii") for name, pair in keys.items() if name != "key-1"}
    if extra:
        write_json(args.out_key + ".e2ee.json", extra)
    print(json.dumps({"did": doc["id"], "keyid": doc["authentication"][0],
                      "out_doc": args.out_doc, "out_key": args.out_key}))
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    return check_doc(load_json(args.did_doc))


def cmd_resolve(args: argparse.Namespace) -> int:
    import asyncio

    from anp.authentication import resolve_did_wba_document

    doc = asyncio.run(resolve_did_wba_document(args.did, verify_proof=True))
    if not doc:
        print(json.dumps({"did": args.did, "ok": False, "error": "the SDK resolved nothing"}))
        return 1
    return check_doc(doc)


def check_doc(doc: dict) -> int:
    result = {"did": doc.get("id"), "binding_ok": bool(validate_did_document_binding(doc, verify_proof=True))}
    proof = doc.get("proof")
    if isinstance(proof, dict):
        method = _find_verification_method(doc, proof.get("verificationMethod", ""))
        ok = False
        if method:
            try:
                ok = bool(verify_w3c_proof(doc, _extract_public_key(method)))
            except ValueError:
                ok = False
        result["proof_ok"] = ok
    else:
        result["proof_ok"] = None
    result["ok"] = result["binding_ok"] and result["proof_ok"] is not False
    print(json.dumps(result))
    return 0 if result["ok"] else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--verbose", action="store_true", help="show SDK log output")
    sub = parser.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("create", help="create a did:wba document + key with the SDK")
    p.add_argument("--host", required=True)
    p.add_argument("--port", type=int)
    p.add_argument("--path", nargs="*", default=[], metavar="SEG",
                   help="DID path segments; the SDK appends e1_<fingerprint> when any are given")
    p.add_argument("--profile", default="e1", choices=["e1", "k1", "plain_legacy"],
                   help="SDK did_profile (only e1 produces an Ed25519 key usable with our JWK format)")
    p.add_argument("--e2ee", action="store_true", help="let the SDK add #key-2/#key-3 E2EE keys")
    p.add_argument("--agent-description-url")
    p.add_argument("--created", help="proof 'created' timestamp (ISO 8601), default now")
    p.add_argument("--out-doc", required=True)
    p.add_argument("--out-key", required=True)
    p.set_defaults(func=cmd_create)

    c = sub.add_parser("check", help="run the SDK's binding + proof checks on a document")
    c.add_argument("--did-doc", required=True)
    c.set_defaults(func=cmd_check)

    r = sub.add_parser("resolve", help="resolve a did:wba over HTTPS with the SDK, then check it")
    r.add_argument("--did", required=True)
    r.set_defaults(func=cmd_resolve)

    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.CRITICAL, stream=sys.stderr)
    if getattr(args, "profile", "e1") != "e1" and args.cmd == "create":
        print("error: only --profile e1 yields an Ed25519 key (our JWK key format)", file=sys.stderr)
        return 2
    try:
        return args.func(args)
    except (KeyFileError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
