#!/usr/bin/env python3
"""The ANP SDK's own clients (PyPI `anp`: `anp.openanp.RemoteAgent`, `anp.anp_crawler.ANPCrawler`)
discover and call an agentnet hosted agent through its Agent Description, signed as a did:wba
identity whose document this script serves on loopback (`localhost`, a port of its own).

    anp_sdk_client.py AD_URL [--open]

AD_URL is the agent's `ad.json`; the node's `/.well-known/agent-descriptions` must list it.
Checks, in order: the well-known list names AD_URL; `RemoteAgent.discover` finds `send` and
`getTask`, `send(text=...)` echoes, `getTask` reads the task back; the crawler reads the
description, lists the tools and its tool call echoes; then (unless --open) an unsigned call,
a call whose body was changed after signing, and a call signed by another key in the
identity's name are each refused with HTTP 401. Prints one JSON line {"checks": [...],
"did": ..., "document_fetches": N}; exits 1 with the failed check on stderr.
"""

import argparse
import asyncio
import http.server
import json
import os
import sys
import tempfile
import threading
import uuid
from urllib.parse import urlsplit

try:
    import httpx
    from anp.anp_crawler.anp_client import ANPClient
    from anp.anp_crawler.anp_crawler import ANPCrawler
    from anp.authentication import create_did_wba_document
    from anp.authentication.did_wba_authenticator import DIDWbaAuthHeader
    from anp.openanp import RemoteAgent
except ImportError as e:  # pragma: no cover
    print(f"missing dependency ({e}); run interop/setup.sh", file=sys.stderr)
    sys.exit(2)


def serve_document(doc_holder: dict) -> tuple[int, dict]:
    """An HTTP server on 127.0.0.1 answering every `…/did.json` with the document."""
    hits = {"n": 0}

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            body = json.dumps(doc_holder.get("doc", {})).encode()
            if self.path.endswith("/did.json"):
                hits["n"] += 1
                self.send_response(200)
            else:
                body = b""
                self.send_response(404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv.server_address[1], hits


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("ad_url")
    ap.add_argument("--open", action="store_true", help="the agent's policy is open")
    a = ap.parse_args()
    checks: list[str] = []

    def check(cond: bool, what: str, detail: object = "") -> None:
        if not cond:
            print(f"check failed: {what}: {detail}", file=sys.stderr)
            sys.exit(1)
        checks.append(what)

    holder: dict = {}
    port, hits = serve_document(holder)
    doc, keys = create_did_wba_document(
        hostname="localhost", port=port, path_segments=["agents", "alice"], enable_e2ee=False
    )
    holder["doc"] = doc
    did = doc["id"]
    _, other_keys = create_did_wba_document(
        hostname="localhost", port=port, path_segments=["agents", "mallory"], enable_e2ee=False
    )

    with tempfile.TemporaryDirectory() as tmp:
        doc_path = os.path.join(tmp, "did.json")
        with open(doc_path, "w") as f:
            json.dump(doc, f)
        pem = os.path.join(tmp, "key.pem")
        with open(pem, "wb") as f:
            f.write(keys["key-1"][0])
        other_pem = os.path.join(tmp, "other.pem")
        with open(other_pem, "wb") as f:
            f.write(other_keys["key-1"][0])

        u = urlsplit(a.ad_url)
        base = f"{u.scheme}://{u.netloc}"

        async def run() -> None:
            listing = await ANPClient(doc_path, pem).fetch(f"{base}/.well-known/agent-descriptions")
            check(listing.get("success") is True, "the well-known list is served", listing.get("error"))
            items = listing["data"].get("items", [])
            check(any(i.get("@id") == a.ad_url for i in items),
                  "/.well-known/agent-descriptions lists the agent", items)

            auth = DIDWbaAuthHeader(doc_path, pem)
            agent = await RemoteAgent.discover(a.ad_url, auth)
            check({"send", "getTask"} <= set(agent.method_names),
                  "RemoteAgent.discover finds send and getTask", agent.method_names)
            r = await agent.send(text="hello anp")
            check(r.get("text") == "hello anp" and r.get("state") == "TASK_STATE_COMPLETED",
                  "RemoteAgent send answers the echo", r)
            g = await agent.getTask(taskId=r["taskId"])
            check(g.get("taskId") == r["taskId"] and g.get("text") == "hello anp",
                  "RemoteAgent getTask reads the task back", g)

            crawler = ANPCrawler(doc_path, pem, cache_enabled=False)
            _, tools = await crawler.fetch_text(a.ad_url)
            names = crawler.list_available_tools()
            check(len(tools) >= 2 and any("send" in n for n in names),
                  "ANPCrawler lists the interface's tools", names)
            send_tool = next(n for n in names if n == "send" or n.endswith("send"))
            out = await crawler.execute_tool_call(send_tool, {"text": "crawled"})
            check(out.get("success") is True and out["result"].get("text") == "crawled",
                  "ANPCrawler's tool call echoes", out)

        asyncio.run(run())

        if not a.open:
            rpc_url = f"{a.ad_url.rsplit('/', 1)[0]}/anp/rpc"
            body = json.dumps({"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": "send",
                               "params": {"text": "x"}}, separators=(",", ":")).encode()
            h = {"Content-Type": "application/json"}
            with httpx.Client(timeout=30.0) as http_:
                r = http_.post(rpc_url, content=body, headers=h)
                check(r.status_code == 401, "an unsigned call is refused (401)", (r.status_code, r.text[:300]))
                signed = DIDWbaAuthHeader(doc_path, pem).get_auth_header(
                    rpc_url, method="POST", headers=dict(h), body=body)
                changed = body.replace(b'"x"', b'"y"')
                r = http_.post(rpc_url, content=changed, headers={**h, **signed})
                check(r.status_code == 401,
                      "a call changed after signing is refused (401)", (r.status_code, r.text[:300]))
                forged = DIDWbaAuthHeader(doc_path, other_pem).get_auth_header(
                    rpc_url, method="POST", headers=dict(h), body=body)
                r = http_.post(rpc_url, content=body, headers={**h, **forged})
                check(r.status_code == 401,
                      "a call signed by another key in the DID's name is refused (401)", (r.status_code, r.text[:300]))

    print(json.dumps({"checks": checks, "did": did, "document_fetches": hits["n"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
