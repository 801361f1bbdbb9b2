"""Time the ANP Python SDK's RFC 9421 verification, for docs/BENCHMARKS.md.

Usage: python anp_bench.py [ITERATIONS]

Verifies the SDK-signed sample request in interop/fixtures (anp_http_sig_sample.json) with
`anp.authentication.verify_http_message_signature` against its DID document, ITERATIONS times,
and prints the median and mean microseconds per verification of 5 rounds as JSON.
"""
import json
import statistics
import sys
import time
from pathlib import Path

from anp.authentication.http_signatures import verify_http_message_signature

FIX = Path(__file__).resolve().parent.parent / "fixtures"


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    sample = json.loads((FIX / "anp_http_sig_sample.json").read_text())["rfc9421"]
    body = (FIX / sample["body_file"]).read_bytes()
    doc = json.loads((FIX / "did_wba_e1.json").read_text())
    args = (doc, sample["method"], sample["url"], sample["headers"], body)
    ok = verify_http_message_signature(*args)
    if not ok or (isinstance(ok, tuple) and not ok[0]):
        print(json.dumps({"error": "sample did not verify", "result": repr(ok)}))
        return 1
    rounds = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            verify_http_message_signature(*args)
        rounds.append((time.perf_counter() - t0) / n * 1e6)
    print(json.dumps({"sdk": "anp (PyPI)", "function": "verify_http_message_signature",
                      "iterations": n, "us_per_verify_median": round(statistics.median(rounds), 1),
                      "us_per_verify_rounds": [round(r, 1) for r in rounds]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
