#!/usr/bin/env python3
"""Sign and verify DID-WBA HTTP requests with the official ANP SDK (PyPI `anp`).

    anp_http.py sign --did-doc DOC.json --key KEY.jwk --method POST --url URL
                     [--body FILE] [--header 'Name: value' ...] [--nonce N]
                     [--created TS] [--expires TS] [--keyid ID]
                     [--components '@method' '@target-uri' ...]
        -> {"headers": {Signature-Input, Signature[, Content-Digest]},
            "signature_base": <exact bytes the SDK handed to the signer>}

    anp_http.py sign-legacy --did-doc DOC.json --key KEY.jwk
                     (--domain HOST | --url URL) [--nonce N] [--timestamp T] [--version 1.1]
        -> {"headers": {"Authorization": "DIDWba v=..."}, "signed_hash_hex": ...}

    anp_http.py verify --did-doc DOC.json --method POST --url URL --headers H.json
                     [--body FILE] [--domain HOST] [--repeat N]
        -> {"ok": true, "did": ..., "auth_scheme": ..., ...}   exit 0
           {"ok": false, "status": 401, "reason": ...}          exit 1

Signing uses anp.authentication.generate_http_signature_headers /
generate_auth_header; verification uses anp.authentication.DidWbaVerifier.
The verifier normally fetches the DID document over HTTPS; here the SDK's
resolver functions (as imported by anp.authentication.did_wba_verifier) are
replaced by a function returning --did-doc, so nothing touches the network.
All other checks (document id == DID, e1 binding proof, authentication
relationship, signature, time window, nonce replay cache) are the SDK's own.
--repeat N verifies the same request N times against ONE verifier instance,
which exercises the SDK's in-memory nonce replay cache.

Exit codes: 0 accepted/ok, 1 rejected, 2 usage error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import secrets
import sys
from typing import Any, Dict, Optional
from urllib.parse import urlparse

from cryptography.hazmat.primitives import serialization

import anp.authentication.did_wba_verifier as verifier_module
from anp.authentication import (
    DidWbaVerifier,
    DidWbaVerifierConfig,
    DidWbaVerifierError,
    generate_auth_header,
    generate_http_signature_headers,
)
from anp.authentication.did_wba import _extract_public_key, _find_verification_method

from anp_keys import KeyFileError, load_json, load_jwk_private_key


def _read_body(path: Optional[str]) -> Optional[bytes]:
    if path is None:
        return None
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError as exc:
        raise KeyFileError(f"cannot read body file {path}: {exc}") from exc


def _parse_header_args(values) -> Dict[str, str]:
    headers: Dict[str, str] = {}
    for item in values or []:
        if ":" not in item:
            raise KeyFileError(f"--header must be 'Name: value', got {item!r}")
        name, value = item.split(":", 1)
        headers[name.strip()] = value.strip()
    return headers


def _check_key_matches(doc: Dict[str, Any], keyid: str, key) -> None:
    """Refuse to sign with a key that is not the document's key for keyid."""
    method = _find_verification_method(doc, keyid)
    if method is None:
        raise KeyFileError(f"verification method {keyid} not in DID document")
    public = _extract_public_key(method)
    raw = lambda k: k.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)  # noqa: E731
    if raw(public) != raw(key.public_key()):
        raise KeyFileError(f"key file does not match {keyid} in the DID document")


def _default_keyid(doc: Dict[str, Any]) -> str:
    auth = doc.get("authentication") or []
    if not auth:
        raise KeyFileError("DID document has no authentication entries")
    first = auth[0]
    return first if isinstance(first, str) else first.get("id", "")


def cmd_sign(args: argparse.Namespace) -> int:
    doc = load_json(args.did_doc)
    key = load_jwk_private_key(args.key)
    keyid = args.keyid or _default_keyid(doc)
    _check_key_matches(doc, keyid, key)
    body = _read_body(args.body)
    captured: Dict[str, bytes] = {}

    def sign_callback(content: bytes, fragment: str) -> bytes:
        captured["base"] = content
        captured["fragment"] = fragment.encode()
        return key.sign(content)

    headers = generate_http_signature_headers(
        did_document=doc,
        request_url=args.url,
        request_method=args.method,
        sign_callback=sign_callback,
        headers=_parse_header_args(args.header),
        body=body,
        keyid=args.keyid,
        nonce=args.nonce,
        created=args.created,
        expires=args.expires,
        covered_components=args.components,
    )
    out = {"headers": headers, "signature_base": captured["base"].decode("utf-8")}
    print(json.dumps(out, indent=2))
    return 0


def cmd_sign_legacy(args: argparse.Namespace) -> int:
    doc = load_json(args.did_doc)
    key = load_jwk_private_key(args.key)
    _check_key_matches(doc, _default_keyid(doc), key)
    if args.domain:
        domain = args.domain
    elif args.url:
        # Same rule as the SDK verifier's default: the URL's hostname (no port).
        domain = urlparse(args.url).hostname or ""
    else:
        raise KeyFileError("sign-legacy needs --domain or --url")
    captured: Dict[str, bytes] = {}

    def sign_callback(content: bytes, fragment: str) -> bytes:
        captured["hash"] = content
        return key.sign(content)

    header = generate_auth_header(
        doc,
        domain,
        sign_callback,
        version=args.version,
        nonce=args.nonce,
        timestamp=args.timestamp,
    )
    out = {
        "headers": {"Authorization": header},
        "service_domain": domain,
        "signed_hash_hex": captured["hash"].hex(),
    }
    print(json.dumps(out, indent=2))
    return 0


def _load_headers(path: str) -> Dict[str, str]:
    value = load_json(path)
    if isinstance(value, dict) and isinstance(value.get("headers"), dict):
        value = value["headers"]
    if not isinstance(value, dict):
        raise KeyFileError(f"{path}: expected a JSON object of headers")
    return {str(k): str(v) for k, v in value.items()}


def _install_local_resolver(doc: Dict[str, Any]) -> None:
    """Make the SDK verifier resolve DIDs from the local document only."""

    async def local_resolve(did: str, *args: Any, **kwargs: Any):
        return doc if doc.get("id") == did else None

    # DidWbaVerifier calls these names from its own module namespace.
    verifier_module.resolve_did_wba_document = local_resolve
    verifier_module.resolve_did_document = local_resolve


async def _verify(args: argparse.Namespace) -> int:
    doc = load_json(args.did_doc)
    headers = _load_headers(args.headers)
    body = _read_body(args.body)
    _install_local_resolver(doc)
    # A JWT signing key is mandatory: the SDK issues an access token on success
    # and raises a 500-style error without one. HS256 with a throwaway secret.
    secret = secrets.token_hex(32)
    verifier = DidWbaVerifier(
        DidWbaVerifierConfig(jwt_private_key=secret, jwt_public_key=secret, jwt_algorithm="HS256")
    )
    attempts = []
    all_ok = True
    for _ in range(max(1, args.repeat)):
        try:
            result = await verifier.verify_request(
                method=args.method, url=args.url, headers=headers, body=body, domain=args.domain
            )
            attempts.append({
                "ok": True,
                "did": result["did"],
                "auth_scheme": result["auth_scheme"],
                "token_type": result.get("token_type"),
                "response_headers": sorted(result.get("response_headers", {})),
            })
        except DidWbaVerifierError as exc:
            all_ok = False
            attempts.append({"ok": False, "status": exc.status_code, "reason": str(exc),
                             "challenge": exc.headers or None})
    out = dict(attempts[0])
    if len(attempts) > 1:
        out["ok"] = all_ok
        out["attempts"] = attempts
        if not all_ok:
            first_bad = next(a for a in attempts if not a["ok"])
            out["reason"] = first_bad["reason"]
    print(json.dumps(out, indent=2))
    return 0 if all_ok else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--verbose", action="store_true", help="show SDK log output")
    sub = parser.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("sign", help="RFC 9421 Signature-Input/Signature/Content-Digest")
    s.add_argument("--did-doc", required=True)
    s.add_argument("--key", required=True)
    s.add_argument("--method", required=True)
    s.add_argument("--url", required=True)
    s.add_argument("--body")
    s.add_argument("--header", action="append", help="extra request header 'Name: value'")
    s.add_argument("--keyid")
    s.add_argument("--nonce")
    s.add_argument("--created", type=int)
    s.add_argument("--expires", type=int)
    s.add_argument("--components", nargs="+", help="covered components (default: SDK default)")
    s.set_defaults(func=cmd_sign)

    lg = sub.add_parser("sign-legacy", help="legacy 'Authorization: DIDWba ...' header")
    lg.add_argument("--did-doc", required=True)
    lg.add_argument("--key", required=True)
    lg.add_argument("--domain", help="service domain (hostname) that is signed")
    lg.add_argument("--url", help="derive the service domain from this URL's hostname")
    lg.add_argument("--nonce")
    lg.add_argument("--timestamp", help="ISO 8601 UTC, e.g. 2025-01-01T00:00:00Z")
    lg.add_argument("--version", default="1.1")
    lg.set_defaults(func=cmd_sign_legacy)

    v = sub.add_parser("verify", help="verify with the SDK's DidWbaVerifier (local DID doc)")
    v.add_argument("--did-doc", required=True)
    v.add_argument("--method", required=True)
    v.add_argument("--url", required=True)
    v.add_argument("--headers", required=True, help="JSON object of headers, or sign's output")
    v.add_argument("--body")
    v.add_argument("--domain", help="service domain for legacy DIDWba (default: URL hostname)")
    v.add_argument("--repeat", type=int, default=1, help="verify N times on one verifier instance")
    v.set_defaults(func=lambda a: asyncio.run(_verify(a)))

    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.CRITICAL, stream=sys.stderr)
    try:
        return args.func(args)
    except KeyFileError as exc:
        print(f"usage error: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:  # SDK refused to sign (bad document / keyid)
        print(f"usage error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
