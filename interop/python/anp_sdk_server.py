#!/usr/bin/env python3
"""An ANP agent served by the ANP SDK's own server framework (PyPI `anp`: `anp.fastanp.FastANP`
on FastAPI/uvicorn), on 127.0.0.1, for `agentnet call --ad` to reach.

    anp_sdk_server.py --caller-doc DOC.json [--open]

Serves `/ad.json` (the SDK's common header, the interface linked by URL as its examples do),
the OpenRPC document `/info/echo.json` and JSON-RPC at `/rpc`, with one method `echo(text)`
answering {"echo": text, "caller": <the DID the SDK's verifier authenticated>}, and the agent's
own did:wba document (made by the SDK, with an AgentDescription service naming /ad.json) at
its did:wba path. Unless --open,
every call goes through the SDK's DID-WBA middleware (RFC 9421 or legacy DIDWba); the DID
document of DOC.json is the one its verifier resolves (its id must match the signer's DID:
the SDK fetches did:wba documents over HTTPS only, so a loopback caller's document is handed
to it here). Prints one JSON line {"ad": URL, "did": DID} once listening, then serves until killed.
"""

import argparse
import json
import secrets
import socket
import sys

try:
    import uvicorn
    from fastapi import FastAPI

    import anp.authentication.did_wba_verifier as verifier_module
    import anp.fastanp.middleware as middleware_module
    from anp.authentication import create_did_wba_document
    from anp.authentication.did_wba_verifier import DidWbaVerifierConfig
    from anp.fastanp import Context, FastANP
except ImportError as e:  # pragma: no cover
    print(f"missing dependency ({e}); run interop/setup.sh", file=sys.stderr)
    sys.exit(2)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--caller-doc", required=True)
    ap.add_argument("--open", action="store_true")
    a = ap.parse_args()
    with open(a.caller_doc) as f:
        caller_doc = json.load(f)

    async def local_resolve(did: str, *args, **kwargs):
        return caller_doc if did == caller_doc.get("id") else None

    verifier_module.resolve_did_wba_document = local_resolve
    verifier_module.resolve_did_document = local_resolve

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    # The DID names localhost, so the description is served there (a did:wba vouches for its
    # own origin only).
    base = f"http://localhost:{port}"

    # The agent's own did:wba, made by the SDK, its document naming the description (an
    # AgentDescription service) and served here.
    own_doc, _ = create_did_wba_document(
        hostname="localhost", port=port, path_segments=["agents", "echo"],
        agent_description_url=f"{base}/ad.json", enable_e2ee=False,
    )
    own_did = own_doc["id"]
    own_path = "/" + "/".join(own_did.split(":")[3:]) + "/did.json"

    # A DID document is public: exempt it from the SDK's middleware as the SDK exempts ad.json.
    middleware_module.EXEMPT_PATHS.append("*/did.json")
    app = FastAPI()

    @app.get(own_path)
    def own_document():
        return own_doc

    anp = FastANP(
        app=app,
        name="SDK echo",
        description="An echo agent served by the ANP SDK (fastanp)",
        did=own_did,
        agent_domain=base,
        enable_auth_middleware=not a.open,
        auth_config=DidWbaVerifierConfig(
            jwt_private_key=secrets.token_hex(32),
            jwt_public_key=None,
            jwt_algorithm="HS256",
        ) if not a.open else None,
    )

    @anp.interface("/info/echo.json", description="Echo the text back, with the caller's DID")
    def echo(text: str, ctx: Context) -> dict:
        return {"echo": text, "caller": ctx.did}

    @app.get("/ad.json")
    def ad():
        doc = anp.get_common_header()
        doc["interfaces"] = [anp.interfaces[echo].link_summary]
        return doc

    print(json.dumps({"ad": f"{base}/ad.json", "did": own_did}), flush=True)
    config = uvicorn.Config(app, log_level="warning")
    uvicorn.Server(config).run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
