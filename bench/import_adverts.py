#!/usr/bin/env python3
"""Import signed advertisements (JSON lines on stdin) into a running node through its admin API,
`POST /admin/v1/adverts` with the admin token, over one keep-alive connection; for
`scripts/bench_mcp.sh`. Every advertisement is validated by the node as if it came from the
network. Prints how many were imported; fails on the first refusal.

    import_adverts.py ADMIN_ADDR TOKEN_FILE < adverts.jsonl
"""

import http.client
import sys


def main() -> None:
    addr, token_file = sys.argv[1], sys.argv[2]
    token = open(token_file).read().strip()
    host, port = addr.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    n = 0
    for line in sys.stdin.buffer:
        line = line.strip()
        if not line:
            continue
        conn.request("POST", "/admin/v1/adverts", body=line, headers=headers)
        r = conn.getresponse()
        body = r.read()
        if r.status != 200:
            sys.exit(f"import_adverts.py: advertisement {n}: HTTP {r.status}: {body[:300]!r}")
        n += 1
    print(n)


if __name__ == "__main__":
    main()
