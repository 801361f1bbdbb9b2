#!/usr/bin/env python3
"""List and call the tools of an MCP server with the official Python SDK client (PyPI `mcp` 2.x).

Usage:
  mcp_client.py --era ERA (--url URL | --stdio CMD [ARG ...]) [--call NAME JSON]...
                [--header NAME:VALUE]...

ERA selects the protocol era through the SDK's `Client(mode=...)`:
  2026-07-28  `mode="auto"`: the SDK probes `server/discover` and, when the server answers,
              speaks the stateless 2026-07-28 protocol (every request self-contained);
              the script fails if the SDK fell back to the initialize handshake.
  2025-11-25  `mode="legacy"`: the `initialize` handshake (a session over HTTP).
--url is a Streamable HTTP endpoint; --stdio takes the rest of the command line as the
server command (its stderr is passed through). --header adds an HTTP header to every request.

Checks (exit 1 when one fails): the negotiated protocol version is ERA, the server lists at
least one tool, and every listed tool has an input schema and an output schema (both JSON
objects of type "object"). Then each --call is made in order (a tool error is reported, not a
failure: the caller decides what it expected).

Output: one JSON summary line on stdout:
  {"ok": true, "era": ..., "protocolVersion": ..., "tools": [names],
   "calls": [{"name", "isError", "text", "structuredContent"}], "httpStatuses": [...]}
or {"ok": false, "failed": "...", "httpStatuses": [...]}; diagnostics on stderr.
httpStatuses: the status of every HTTP response in order (empty over stdio).
Exit codes: 0 all checks passed, 1 a check failed, 2 usage / setup error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any, NoReturn

ERAS = {"2026-07-28": "auto", "2025-11-25": "legacy"}


def _die(code: int, msg: str) -> NoReturn:
    print(f"mcp_client.py: {msg}", file=sys.stderr)
    sys.exit(code)


class CheckFailed(Exception):
    pass


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--era", required=True, choices=sorted(ERAS))
    ap.add_argument("--url")
    ap.add_argument("--call", nargs=2, action="append", default=[], metavar=("NAME", "JSON"))
    ap.add_argument("--header", action="append", default=[])
    ap.add_argument("--stdio", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    if bool(a.url) == bool(a.stdio):
        _die(2, "give exactly one of --url and --stdio CMD ...")
    for name, args in a.call:
        try:
            if not isinstance(json.loads(args), dict):
                raise ValueError("not an object")
        except ValueError as e:
            _die(2, f"--call {name}: the arguments must be a JSON object: {e}")
    return a


STATUSES: list[int] = []
"""The HTTP status of every response (HTTP only), reported in the summary."""


async def _record(response: Any) -> None:
    STATUSES.append(response.status_code)


def _transport(a: argparse.Namespace) -> Any:
    if a.stdio:
        from mcp.client.stdio import StdioServerParameters

        return StdioServerParameters(command=a.stdio[0], args=a.stdio[1:])
    import httpx2 as httpx  # the HTTP client the SDK is built on
    from mcp.client.streamable_http import streamable_http_client

    headers = {}
    for h in a.header:
        name, sep, value = h.partition(":")
        if not sep:
            _die(2, f"--header {h!r}: want NAME:VALUE")
        headers[name.strip()] = value.strip()
    client = httpx.AsyncClient(headers=headers, event_hooks={"response": [_record]})
    return streamable_http_client(a.url, http_client=client)


def _text(result: Any) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "type", None) == "text")


async def _run(a: argparse.Namespace) -> dict[str, Any]:
    from mcp import Client

    async with Client(_transport(a), mode=ERAS[a.era]) as client:
        version = client.protocol_version
        if version != a.era:
            raise CheckFailed(f"negotiated protocol version {version!r}, wanted {a.era!r}")
        listed = await client.list_tools()
        tools = listed.tools
        if not tools:
            raise CheckFailed("the server lists no tools")
        for t in tools:
            for what, schema in (("input", t.input_schema), ("output", t.output_schema)):
                if not isinstance(schema, dict) or schema.get("type") != "object":
                    raise CheckFailed(f"tool {t.name!r} has no {what} schema of type object: {schema!r}")
            if not (t.description or "").strip():
                raise CheckFailed(f"tool {t.name!r} has no description")
        calls = []
        for name, args in a.call:
            r = await client.call_tool(name, json.loads(args))
            calls.append(
                {
                    "name": name,
                    "isError": bool(r.is_error),
                    "text": _text(r),
                    "structuredContent": r.structured_content,
                }
            )
        return {
            "ok": True,
            "era": a.era,
            "protocolVersion": version,
            "tools": [t.name for t in tools],
            "calls": calls,
        }


def main() -> None:
    a = _args()
    try:
        out = asyncio.run(_run(a))
    except CheckFailed as e:
        print(json.dumps({"ok": False, "failed": str(e), "httpStatuses": STATUSES}))
        sys.exit(1)
    except BaseException as e:  # the SDK's errors arrive wrapped in exception groups
        while isinstance(e, BaseExceptionGroup) and len(e.exceptions) == 1:
            e = e.exceptions[0]
        print(f"mcp_client.py: {e!r}", file=sys.stderr)
        print(json.dumps({"ok": False, "failed": f"{type(e).__name__}: {e}", "httpStatuses": STATUSES}))
        sys.exit(1)
    out["httpStatuses"] = STATUSES
    print(json.dumps(out))


if __name__ == "__main__":
    main()
