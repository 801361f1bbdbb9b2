"""Key-file helpers shared by the ANP interop scripts.

Project key file format: an OKP JWK
    {"kty": "OKP", "crv": "Ed25519", "x": <b64url public>, "d": <b64url seed>}
(unpadded base64url, RFC 8037).
"""

from __future__ import annotations

import base64
import json
from typing import Any, Dict

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519


class KeyFileError(ValueError):
    """Raised for unreadable or malformed key files (a usage error)."""


def b64url_encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def private_key_to_jwk(key: ed25519.Ed25519PrivateKey) -> Dict[str, str]:
    seed = key.private_bytes(
        serialization.Encoding.Raw,
        serialization.PrivateFormat.Raw,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    return {"kty": "OKP", "crv": "Ed25519", "x": b64url_encode(public), "d": b64url_encode(seed)}


def pem_to_jwk(pem: bytes) -> Dict[str, str]:
    key = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise KeyFileError(f"expected an Ed25519 private key, got {type(key).__name__}")
    return private_key_to_jwk(key)


def load_jwk_private_key(path: str) -> ed25519.Ed25519PrivateKey:
    try:
        with open(path, "r", encoding="utf-8") as fh:
            jwk: Any = json.load(fh)
    except (OSError, json.JSONDecodeError) as exc:
        raise KeyFileError(f"cannot read key file {path}: {exc}") from exc
    if not isinstance(jwk, dict) or jwk.get("kty") != "OKP" or jwk.get("crv") != "Ed25519":
        raise KeyFileError(f"{path}: expected an OKP/Ed25519 JWK")
    if "d" not in jwk:
        raise KeyFileError(f"{path}: JWK has no private part 'd'")
    seed = b64url_decode(jwk["d"])
    if len(seed) != 32:
        raise KeyFileError(f"{path}: 'd' must decode to 32 bytes")
    key = ed25519.Ed25519PrivateKey.from_private_bytes(seed)
    if "x" in jwk and private_key_to_jwk(key)["x"] != jwk["x"]:
        raise KeyFileError(f"{path}: 'x' does not match the public key derived from 'd'")
    return key


def load_json(path: str) -> Any:
    try:
        with open(path, "r", encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, json.JSONDecodeError) as exc:
        raise KeyFileError(f"cannot read JSON file {path}: {exc}") from exc


def write_json(path: str, value: Any) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(value, fh, indent=2, ensure_ascii=False)
        fh.write("\n")
