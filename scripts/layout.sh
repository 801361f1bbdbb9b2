#!/usr/bin/env bash
# The house in figures: what a newcomer meets when reading the tree (docs/ARCHITECTURE.md, "The
# house"). For each crate: its top-level rooms, its files and their median length, the
# production files over 1 000 lines and the functions over 150 (test modules left out), glob
# imports outside tests, and import circles between rooms; then the end-to-end test binaries.
#
#   bash scripts/layout.sh            # a table per crate, then the worst offenders
#   bash scripts/layout.sh --json     # one JSON object
#   bash scripts/layout.sh --check    # also exit 1 when a limit below is passed
#
# The limits (--check): node/ has at most 16 rooms; no production file over 1 000 lines except
# the one state machine per crate named in LARGE_OK; no function over 150 lines; no glob import
# outside tests; no import circle; one end-to-end test binary. python3 standard library only.
set -euo pipefail
cd "$(dirname "$0")/.."
RUSTSRC_LIB="$PWD/scripts/lib" exec python3 - "$@" <<'PY'
import json, os, re, statistics, subprocess, sys

sys.path.insert(0, os.environ["RUSTSRC_LIB"])
from rustsrc import strip, test_spans, without_tests

CRATES = {"did": "did/src", "a2a": "a2a/src", "discovery": "discovery/src",
          "node": "node/src", "sim": "sim/src", "fuzz": "fuzz/src", "agentnet": "src"}
# The one state machine per crate allowed past FILE_MAX (docs/ARCHITECTURE.md names them).
LARGE_OK = {"discovery/src/net.rs", "a2a/src/engine.rs"}
FILE_MAX, FN_MAX, NODE_ROOMS_MAX = 1000, 150, 16

args = set(sys.argv[1:])
unknown = args - {"--json", "--check"}
if unknown:
    sys.exit(f"layout.sh: unknown argument {sorted(unknown)[0]}; use --json or --check")


def rust_files(root):
    """The crate's source files, less the test modules kept in files of their own."""
    for d, _, fs in os.walk(root):
        for f in sorted(fs):
            if f.endswith(".rs") and f != "tests.rs" and "/tests" not in d[len(root):]:
                yield os.path.join(d, f)


def rooms(root):
    names = set()
    for name in os.listdir(root):
        if name in ("lib.rs", "main.rs", "bin"):
            continue
        if os.path.isdir(os.path.join(root, name)) or name.endswith(".rs"):
            names.add(name[:-3] if name.endswith(".rs") else name)
    return sorted(names)


def long_functions(code):
    """(name, first line, lines) of each function body in `code` (stripped, tests blanked)."""
    found = []
    for m in re.finditer(r"\bfn\s+(\w+)", code):
        i, depth = m.end(), 0
        while i < len(code):
            c = code[i]
            if c in "([":
                depth += 1
            elif c in ")]":
                depth -= 1
            elif depth == 0 and c in "{;":
                break
            i += 1
        if i >= len(code) or code[i] == ";":
            continue
        start, depth = i, 0
        while i < len(code):
            depth += {"{": 1, "}": -1}.get(code[i], 0)
            i += 1
            if depth == 0:
                break
        first = code.count("\n", 0, m.start()) + 1
        last = code.count("\n", 0, i) + 1
        found.append((m.group(1), first, last - first + 1))
    return found


report = {"crates": {}, "files_over": [], "functions_over": [], "glob_imports": []}
for crate, root in CRATES.items():
    if not os.path.isdir(root):
        continue
    lengths = []
    for path in rust_files(root):
        text = open(path, encoding="utf-8").read()
        code = strip(text)
        spans = test_spans(code)
        test_lines = sum(code.count("\n", a, b) + 1 for a, b in spans)
        total = text.count("\n") + (0 if text.endswith("\n") else 1)
        prod = total - test_lines
        lengths.append(total)
        if prod > FILE_MAX:
            report["files_over"].append(
                {"file": path, "lines": prod, "allowed": path in LARGE_OK})
        shipped = without_tests(code)
        for name, line, n in long_functions(shipped):
            if n > FN_MAX:
                report["functions_over"].append({"fn": name, "at": f"{path}:{line}", "lines": n})
        for m in re.finditer(r"\buse\b[^;]*::\s*\*", shipped):
            line = shipped.count("\n", 0, m.start()) + 1
            report["glob_imports"].append(f"{path}:{line}")
    crate_dir = os.path.dirname(root) or "."
    circles = 0
    if crate_dir != ".":
        r = subprocess.run(["bash", "scripts/tests/module-cycles.sh", crate_dir],
                           capture_output=True, text=True)
        circles = r.stdout.count("modules in a circle")
    report["crates"][crate] = {
        "rooms": len(rooms(root)), "files": len(lengths),
        "lines": sum(lengths), "median_file_lines": int(statistics.median(lengths)),
        "circles": circles,
    }

tests = [f for f in os.listdir("tests") if f.endswith(".rs")]
tests += [d for d in os.listdir("tests")
          if os.path.isfile(os.path.join("tests", d, "main.rs"))]
report["e2e_test_binaries"] = len(tests)
report["files_over"].sort(key=lambda f: -f["lines"])
report["functions_over"].sort(key=lambda f: -f["lines"])

failures = []
if report["crates"]["node"]["rooms"] > NODE_ROOMS_MAX:
    failures.append(f"node/ has {report['crates']['node']['rooms']} rooms (at most {NODE_ROOMS_MAX})")
for f in report["files_over"]:
    if not f["allowed"]:
        failures.append(f"{f['file']}: {f['lines']} production lines (at most {FILE_MAX})")
for f in report["functions_over"]:
    failures.append(f"{f['at']}: fn {f['fn']} is {f['lines']} lines (at most {FN_MAX})")
for g in report["glob_imports"]:
    failures.append(f"{g}: a glob import outside tests")
for crate, c in report["crates"].items():
    if c["circles"]:
        failures.append(f"{crate}: {c['circles']} import circle(s) (bash scripts/tests/module-cycles.sh {crate})")
if report["e2e_test_binaries"] > 1:
    failures.append(f"tests/ builds {report['e2e_test_binaries']} test binaries (one wanted)")
report["over_limits"] = len(failures)

if "--json" in args:
    print(json.dumps(report, indent=1))
else:
    print(f"{'crate':<10} {'rooms':>5} {'files':>5} {'lines':>6} {'median':>6} {'circles':>7}")
    for crate, c in report["crates"].items():
        print(f"{crate:<10} {c['rooms']:>5} {c['files']:>5} {c['lines']:>6} "
              f"{c['median_file_lines']:>6} {c['circles']:>7}")
    print(f"\nend-to-end test binaries (tests/): {report['e2e_test_binaries']}")
    print(f"production files over {FILE_MAX} lines: {len(report['files_over'])}")
    for f in report["files_over"]:
        print(f"  {f['lines']:>5}  {f['file']}" + ("  (the crate's state machine)" if f["allowed"] else ""))
    print(f"functions over {FN_MAX} lines: {len(report['functions_over'])}")
    for f in report["functions_over"]:
        print(f"  {f['lines']:>5}  {f['fn']}  {f['at']}")
    print(f"glob imports outside tests: {len(report['glob_imports'])}")
    for g in report["glob_imports"]:
        print(f"  {g}")
    print(f"\nover the limits: {len(failures)}")
if "--check" in args and failures:
    for f in failures:
        print(f"layout: {f}", file=sys.stderr)
    sys.exit(1)
PY
