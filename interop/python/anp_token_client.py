#!/usr/bin/env python3
"""The ANP SDK's own client flow (PyPI `anp`, `DIDWbaAuthHeader`) against agentnet's hosted
agents: sign the first request (RFC 9421), read the access token the node answers with
(`update_token`), then send the next requests with it, unsigned, to the same agent and to
another agent of the same node (the SDK keeps one token per host). Then the SDK's legacy
mode (`auth_mode="legacy_didwba"`), which signs the host name without the port: refused by a
node on a port of its own, with no token.

    anp_token_client.py ECHO_URL ASK_URL --did-doc DOC.json --key KEY.jwk

ECHO_URL and ASK_URL are the agents' JSON-RPC endpoints. Prints one JSON line:
{"checks": [...], "token_header": "..."}; exits 1 with the failed check on stderr.
"""

import argparse
import json
import os
import sys
import tempfile
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import httpx
    from anp.authentication.did_wba_authenticator import DIDWbaAuthHeader
    from cryptography.hazmat.primitives import serialization

    from anp_keys import load_jwk_private_key
except ImportError as e:  # pragma: no cover
    print(f"missing dependency ({e}); run interop/setup.sh", file=sys.stderr)
    sys.exit(2)

HEADERS = {"Content-Type": "application/a2a+json", "A2A-Version": "1.0"}


def rpc(method: str, params: dict) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": method,
                       "params": params}).encode()


def send(text: str) -> bytes:
    return rpc("SendMessage", {"message": {"role": "ROLE_USER", "parts": [{"text": text}],
                                           "messageId": str(uuid.uuid4())}})


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("echo")
    ap.add_argument("ask")
    ap.add_argument("--did-doc", required=True)
    ap.add_argument("--key", required=True)
    a = ap.parse_args()
    checks: list[str] = []

    def check(cond: bool, what: str) -> None:
        if not cond:
            print(f"check failed: {what}", file=sys.stderr)
            sys.exit(1)
        checks.append(what)

    with tempfile.TemporaryDirectory() as tmp:
        pem = os.path.join(tmp, "key.pem")
        with open(pem, "wb") as f:
            f.write(load_jwk_private_key(a.key).private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption()))
        auth = DIDWbaAuthHeader(a.did_doc, pem)
        with httpx.Client(timeout=30.0) as http:
            def post(url: str, body: bytes) -> httpx.Response:
                h = auth.get_auth_header(url, method="POST", headers=dict(HEADERS), body=body)
                return http.post(url, content=body, headers={**HEADERS, **h})

            first = post(a.echo, send("signed"))
            check(first.status_code == 200, f"signed SendMessage: {first.status_code} {first.text[:300]}")
            task = first.json()["result"]["task"]["id"]
            token = auth.update_token(a.echo, dict(first.headers))
            check(bool(token), "the node answered with an access token the SDK reads")
            h = auth.get_auth_header(a.echo, method="POST", headers=dict(HEADERS), body=b"{}")
            check(h.get("Authorization") == f"Bearer {token}", "the SDK sends the token next")

            got = post(a.echo, rpc("GetTask", {"id": task}))
            check(got.status_code == 200 and got.json().get("result", {}).get("id") == task,
                  f"GetTask with the token finds the signed request's task: {got.text[:300]}")
            other = post(a.ask, send("Ada"))
            check(other.status_code == 200 and "result" in other.json(),
                  f"the token works at another agent of the node: {other.text[:300]}")

            auth.tokens = {k: v[:-2] + "AA" for k, v in auth.tokens.items()}
            bad = post(a.echo, rpc("GetTask", {"id": task}))
            check(bad.status_code == 401, f"an altered token is refused: {bad.status_code}")

            # The SDK's legacy mode signs the host name without the port: refused at a node on
            # another port (a header that signs no port would verify at every port of the host).
            legacy = DIDWbaAuthHeader(a.did_doc, pem, auth_mode="legacy_didwba")
            body = send("legacy")
            h = legacy.get_auth_header(a.echo, method="POST", headers=dict(HEADERS), body=body)
            check(h.get("Authorization", "").startswith("DIDWba "), "the SDK's legacy header")
            r = http.post(a.echo, content=body, headers={**HEADERS, **h})
            check(r.status_code == 401 and "authentication-info" not in r.headers,
                  f"the SDK's legacy header, signed for the host without port, is refused: {r.status_code}")
    print(json.dumps({"checks": checks, "token_header": first.headers.get("authentication-info", "")[:40]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
