#!/usr/bin/env python3
"""Sign / verify A2A 1.0 Agent Card signatures with the a2a-sdk (Python).

Independent-implementation side of the agentnet interop tests. All signing
and verification goes through a2a-sdk's own functions:

  a2a.client.card_resolver.parse_agent_card   JSON dict -> AgentCard proto
                                              (what the SDK client does on fetch)
  a2a.utils.signing.create_agent_card_signer  signer
  a2a.utils.signing.create_signature_verifier verifier

Only key handling is done here: did:key decoding (multibase base58btc 'z',
multicodec 0xed 0x01, 32-byte Ed25519 key) and key generation.

Usage:
  a2a_card.py verify SIGNED_CARD.json [--jwk PUBJWK.json]
  a2a_card.py sign CARD.json --alg ES256|EdDSA --out-key PUBJWK.json [--kid KID]
  a2a_card.py canonical CARD.json      (prints the SDK's canonical payload)

Exit codes: 0 ok, 1 verification failure, 2 usage / input error.
Output: JSON on stdout; diagnostics on stderr.
"""

from __future__ import annotations

import argparse
import base64
import copy
import json
import sys

from typing import Any, NoReturn


def _die(code: int, msg: str) -> NoReturn:
    print(f'a2a_card.py: {msg}', file=sys.stderr)
    sys.exit(code)


try:
    import jwt  # noqa: F401  (PyJWT; a2a.utils.signing needs it)

    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519
    from google.protobuf.json_format import MessageToDict, ParseError
    from jwt.api_jwk import PyJWK
    from jwt.exceptions import PyJWKError, PyJWTError

    from a2a.client.card_resolver import parse_agent_card
    from a2a.types import AgentCard
    from a2a.utils.signing import (
        SignatureVerificationError,
        _canonicalize_agent_card,
        create_agent_card_signer,
        create_signature_verifier,
    )
except ImportError as e:  # pragma: no cover
    _die(2, f'missing dependency ({e}); run interop/setup.sh')

# Algorithms handed to create_signature_verifier (anti alg-confusion list).
ACCEPTED_ALGORITHMS = ['EdDSA', 'ES256', 'ES384', 'ES512', 'RS256', 'PS256']

_B58_ALPHABET = '123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz'
_ED25519_PUB_MULTICODEC = b'\xed\x01'


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b'=').decode('ascii')


def b58decode(s: str) -> bytes:
    """Plain base58btc (Bitcoin alphabet) decoding."""
    n = 0
    for ch in s:
        idx = _B58_ALPHABET.find(ch)
        if idx < 0:
            raise ValueError(f'invalid base58 character {ch!r}')
        n = n * 58 + idx
    body = n.to_bytes((n.bit_length() + 7) // 8, 'big') if n else b''
    leading_zeros = len(s) - len(s.lstrip('1'))
    return b'\x00' * leading_zeros + body


def b58encode(data: bytes) -> str:
    n = int.from_bytes(data, 'big')
    out = ''
    while n:
        n, r = divmod(n, 58)
        out = _B58_ALPHABET[r] + out
    leading_zeros = len(data) - len(data.lstrip(b'\x00'))
    return '1' * leading_zeros + out


def did_key_to_ed25519_raw(did_url: str) -> bytes:
    """did:key:z6Mk...[#z6Mk...] -> 32 raw Ed25519 public key bytes."""
    if not did_url.startswith('did:key:'):
        raise ValueError(f'not a did:key: {did_url!r}')
    did, _, fragment = did_url.partition('#')
    mb = did[len('did:key:') :]
    if fragment and fragment != mb:
        raise ValueError('did:key fragment does not match the method-specific id')
    if not mb.startswith('z'):
        raise ValueError('did:key multibase value must use base58btc (z)')
    decoded = b58decode(mb[1:])
    if decoded[:2] != _ED25519_PUB_MULTICODEC:
        raise ValueError('did:key is not an Ed25519 public key (multicodec 0xed01)')
    raw = decoded[2:]
    if len(raw) != 32:
        raise ValueError(f'Ed25519 public key must be 32 bytes, got {len(raw)}')
    return raw


def ed25519_raw_to_did_url(raw: bytes) -> str:
    mb = 'z' + b58encode(_ED25519_PUB_MULTICODEC + raw)
    return f'did:key:{mb}#{mb}'


def _load_json(path: str) -> Any:
    try:
        with open(path, encoding='utf-8') as f:
            return json.load(f)
    except OSError as e:
        _die(2, f'cannot read {path}: {e}')
    except json.JSONDecodeError as e:
        _die(2, f'{path} is not valid JSON: {e}')


def _parse_card(raw: Any, path: str) -> AgentCard:
    if not isinstance(raw, dict):
        _die(2, f'{path}: an Agent Card must be a JSON object')
    try:
        # parse_agent_card mutates its argument (legacy-field migration).
        return parse_agent_card(copy.deepcopy(raw))
    except (ParseError, ValueError, TypeError) as e:
        _die(2, f'{path}: not a valid AgentCard: {e}')


def _header_of(sig: Any) -> dict[str, Any]:
    try:
        pad = '=' * (-len(sig.protected) % 4)
        hdr = json.loads(base64.urlsafe_b64decode(sig.protected + pad))
        return hdr if isinstance(hdr, dict) else {}
    except Exception:  # noqa: BLE001 - informational only
        return {}


def cmd_verify(args: argparse.Namespace) -> int:
    raw = _load_json(args.card)
    card = _parse_card(raw, args.card)
    fixed_key: PyJWK | None = None
    if args.jwk:
        try:
            fixed_key = PyJWK(_load_json(args.jwk))
        except PyJWTError as e:
            _die(2, f'{args.jwk}: unusable JWK: {e}')

    calls: list[dict[str, Any]] = []

    def key_provider(kid: str | None, jku: str | None) -> PyJWK:
        calls.append({'kid': kid, 'jku': jku})
        if fixed_key is not None:
            return fixed_key
        if not kid:
            # Must be a PyJWTError subclass: the SDK verifier only catches
            # PyJWTError per signature; anything else escapes the verifier.
            raise PyJWKError('no kid in protected header and no --jwk given')
        try:
            x = did_key_to_ed25519_raw(kid)
        except ValueError as e:
            raise PyJWKError(f'cannot resolve kid {kid!r}: {e}') from e
        return PyJWK({'kty': 'OKP', 'crv': 'Ed25519', 'x': _b64url(x)})

    verifier = create_signature_verifier(key_provider, ACCEPTED_ALGORITHMS)

    sigs = list(card.signatures)
    if not sigs:
        print(json.dumps({'ok': False, 'error': 'card has no signatures'}))
        print('a2a_card.py: verification FAILED: no signatures', file=sys.stderr)
        return 1

    results = []
    for i, sig in enumerate(sigs):
        # The SDK verifier accepts a card if ANY signature verifies; to check
        # every entry, run it on a copy that carries just this one signature.
        single = AgentCard()
        single.CopyFrom(card)
        del single.signatures[:]
        single.signatures.append(sig)
        hdr = _header_of(sig)
        entry: dict[str, Any] = {'index': i, 'alg': hdr.get('alg'), 'kid': hdr.get('kid')}
        try:
            verifier(single)
            entry['ok'] = True
        except SignatureVerificationError as e:
            entry['ok'] = False
            entry['error'] = f'{type(e).__name__}: {e}'
        results.append(entry)

    ok = all(r['ok'] for r in results)
    print(json.dumps({'ok': ok, 'signatures': results}))
    if not ok:
        bad = [r['index'] for r in results if not r['ok']]
        print(f'a2a_card.py: verification FAILED for signature(s) {bad}', file=sys.stderr)
        return 1
    return 0


def cmd_sign(args: argparse.Namespace) -> int:
    raw = _load_json(args.card)
    card = _parse_card(raw, args.card)

    if args.alg == 'ES256':
        priv = ec.generate_private_key(ec.SECP256R1())
        nums = priv.public_key().public_numbers()
        pub_jwk = {
            'kty': 'EC',
            'crv': 'P-256',
            'x': _b64url(nums.x.to_bytes(32, 'big')),
            'y': _b64url(nums.y.to_bytes(32, 'big')),
        }
        kid = args.kid or 'test-key-1'
    elif args.alg == 'EdDSA':
        priv = ed25519.Ed25519PrivateKey.generate()
        x = priv.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        pub_jwk = {'kty': 'OKP', 'crv': 'Ed25519', 'x': _b64url(x)}
        kid = args.kid or ed25519_raw_to_did_url(x)
    else:  # argparse restricts choices; kept for clarity
        _die(2, f'unsupported --alg {args.alg}')
    pub_jwk.update({'kid': kid, 'alg': args.alg, 'use': 'sig'})

    pem = priv.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    signer = create_agent_card_signer(
        signing_key=pem,
        protected_header={'alg': args.alg, 'typ': 'JOSE', 'kid': kid},
    )
    before = len(card.signatures)
    signed = signer(card)
    new_sigs = [MessageToDict(s) for s in list(signed.signatures)[before:]]

    # Emit the caller's raw JSON (empty values and all) plus the new
    # signature(s), so a verifier has to do the SDK clean-up itself.
    out = dict(raw)
    out['signatures'] = list(raw.get('signatures') or []) + new_sigs

    try:
        with open(args.out_key, 'w', encoding='utf-8') as f:
            json.dump(pub_jwk, f, indent=2)
            f.write('\n')
    except OSError as e:
        _die(2, f'cannot write {args.out_key}: {e}')
    print(json.dumps(out, ensure_ascii=False, indent=2))
    return 0


def cmd_canonical(args: argparse.Namespace) -> int:
    card = _parse_card(_load_json(args.card), args.card)
    sys.stdout.write(_canonicalize_agent_card(card))
    sys.stdout.write('\n')
    return 0


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # exit 2 with usage
        self.print_usage(sys.stderr)
        _die(2, message)


def main(argv: list[str] | None = None) -> int:
    p = _Parser(prog='a2a_card.py', description=__doc__.split('\n\n')[0])
    sub = p.add_subparsers(dest='cmd', required=True, parser_class=_Parser)

    v = sub.add_parser('verify', help='verify every signature on a signed card')
    v.add_argument('card')
    v.add_argument('--jwk', help='public JWK file to use instead of resolving kid')

    s = sub.add_parser('sign', help='sign a card with a fresh key')
    s.add_argument('card')
    s.add_argument('--alg', required=True, choices=['ES256', 'EdDSA'])
    s.add_argument('--out-key', required=True, help='where to write the public JWK')
    s.add_argument('--kid', help='override kid (default: test-key-1 / did:key URL)')

    c = sub.add_parser('canonical', help="print the SDK's canonical JCS payload")
    c.add_argument('card')

    args = p.parse_args(argv)
    return {'verify': cmd_verify, 'sign': cmd_sign, 'canonical': cmd_canonical}[args.cmd](args)


if __name__ == '__main__':
    sys.exit(main())
