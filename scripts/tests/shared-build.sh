#!/usr/bin/env bash
# Check, without building anything, that the test build reuses every third-party crate of the
# binary's build.
#
# `scripts/run.sh` builds the `agentnet` binary; `scripts/test.sh` then builds every test,
# example and benchmark of the workspace. Cargo builds a crate again whenever the test graph
# gives it other features or another profile than the binary's graph does, or gives that to
# anything below it (a unit's hash covers its dependencies'): one feature a dev-dependency adds
# to tokio (`test-util`) or to `either` (`use_std`) rebuilt hyper, axum, reqwest, libp2p's 21
# crates, hickory and rmcp, and a host dependency of bindgen shared with a target one rebuilt
# RocksDB's C++ (10+ minutes on 2 cores). Only a cold cache shows it. This compares the two
# graphs from cargo's unit graph (seconds, no compilation): every third-party unit both graphs
# have (same package, target, mode, and host or target side) must be the same unit, dependencies
# included. The crates only the tests use (criterion, proptest, ...) are counted, not compared.
# The unit graph is an unstable cargo output, read here on the stable toolchain through
# RUSTC_BOOTSTRAP=1 for this one read-only query; `cargo tree` cannot see a difference in profile
# (a host dependency shared with a target one, so built with the target's debuginfo).
# A failure names each crate whose own features or profile differ; the fix is usually a line in
# the root Cargo.toml's "workspace-hack" list. Prints "N passed, N failed".
set -euo pipefail
cd "$(dirname "$0")/../.."

command -v python3 >/dev/null 2>&1 || { echo "shared-build: python3 not found" >&2; exit 1; }

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
graph() {
  local out="$1"; shift
  RUSTC_BOOTSTRAP=1 cargo "$@" --locked -Z unstable-options --unit-graph >"$WORK/$out.json" 2>"$WORK/$out.err" || {
    echo "shared-build: cargo $* --unit-graph failed:" >&2
    cat "$WORK/$out.err" >&2
    exit 1
  }
}
# The two builds of the README's commands, as scripts/run.sh and scripts/test.sh make them.
graph bin build -p agentnet --bin agentnet
graph tests test --workspace --lib --bins --tests --examples --benches --no-run

python3 - "$WORK/bin.json" "$WORK/tests.json" <<'PY'
import hashlib, json, sys

def units_of(path):
    """Third-party units by (package, target, mode, side), each with its identity: what cargo
    hashes into a unit's file names (features, profile, and its dependencies' identities)."""
    units = json.load(open(path))["units"]
    # The host side: build scripts, proc-macros and everything they depend on.
    host = set()
    todo = [i for i, u in enumerate(units)
            if (u["target"]["kind"] == ["custom-build"] and u["mode"] == "build")
            or "proc-macro" in u["target"]["kind"]]
    while todo:
        i = todo.pop()
        if i not in host:
            host.add(i)
            todo += [d["index"] for d in units[i]["dependencies"]]
    memo = {}
    def ident(i):
        if i not in memo:
            u = units[i]
            # The profile's name (dev or test) is not hashed; its settings are.
            profile = {k: v for k, v in u["profile"].items() if k != "name"}
            deps = sorted(ident(d["index"]) + d["extern_crate_name"] for d in u["dependencies"])
            text = json.dumps([u["pkg_id"], u["target"]["name"], u["target"]["kind"], u["mode"],
                               u["features"], profile, deps], sort_keys=True)
            memo[i] = hashlib.sha256(text.encode()).hexdigest()
        return memo[i]
    out = {}
    for i, u in enumerate(units):
        if u["pkg_id"].startswith("path+"):
            continue
        key = (u["pkg_id"].split("#")[-1], u["target"]["name"], u["mode"],
               "host" if i in host else "target")
        out.setdefault(key, []).append((ident(i), u))
    return out

binary, tests = units_of(sys.argv[1]), units_of(sys.argv[2])
shared = sorted(set(binary) & set(tests))
added = sorted(set(tests) - set(binary))
passed = failed = 0

# The query still sees the binary's graph (RocksDB's build among it).
if len(shared) < 100 or not any(k[0].startswith("librocksdb-sys@") and k[2] == "run-custom-build"
                                for k in shared):
    print(f"FAIL: only {len(shared)} third-party units in both graphs, or none building "
          "librocksdb-sys (did the query change?)")
    failed += 1
else:
    passed += 1

differ = []
for k in shared:
    mine = {ident for ident, _ in binary[k]}
    for ident, u in tests[k]:
        if ident in mine:
            continue
        b = binary[k][0][1]
        why = []
        more, fewer = set(u["features"]) - set(b["features"]), set(b["features"]) - set(u["features"])
        if more:
            why.append("the test graph adds features " + ", ".join(sorted(more)))
        if fewer:
            why.append("the test graph lacks features " + ", ".join(sorted(fewer)))
        prof = {p: v for p, v in u["profile"].items() if p != "name" and b["profile"].get(p) != v}
        if prof:
            why.append(f"the test graph's profile has {prof}")
        differ.append((k, why))
if differ:
    print(f"FAIL: the test build would compile {len(differ)} units of the binary's graph again:")
    for (pkg, target, mode, side), why in differ:
        if why:
            print(f"  {pkg} ({target}, {mode}, {side}): {'; '.join(why)}")
    below = sorted({k[0] for k, why in differ if not why})
    if below:
        print(f"  and, because a dependency differs: {', '.join(below)}")
    print("  (`cargo tree --workspace -e features -i <crate>` shows who asks for a feature; turn"
          " it on for the binary too, in the root Cargo.toml, or change the test that asks)")
    failed += 1
else:
    print(f"ok: the {len(shared)} third-party units of the binary's graph are the same units in "
          f"the test graph; the tests add {len(added)} of their own "
          f"({len({k[0] for k in added})} crates)")
    passed += 1
print(f"shared-build: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
PY
