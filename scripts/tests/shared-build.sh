#!/usr/bin/env bash
# Check, without building anything, that the test build reuses the binary's RocksDB build.
#
# `scripts/run.sh` builds the `agentnet` binary; `scripts/test.sh` then builds every test,
# example and benchmark of the workspace. Cargo builds RocksDB's C++ (librocksdb-sys, behind
# bindgen) once per distinct unit: if the test graph gives any unit that librocksdb-sys's build
# script depends on other features or another profile than the binary's graph does, it is
# compiled again (10+ minutes on 2 cores) and only a cold cache shows it. This compares the two
# graphs' units for that build script and everything it depends on, from cargo's unit graph
# (seconds, no compilation). The unit graph is an unstable cargo output, read here on the stable
# toolchain through RUSTC_BOOTSTRAP=1 for this one read-only query; `cargo tree` cannot see the
# difference that broke this once (a host dependency shared with a target one, so built with
# the target's debuginfo). Prints "N passed, N failed".
set -euo pipefail
cd "$(dirname "$0")/../.."

# jq reads the graphs; Debian's image ships it, a machine without it gets it here.
if ! command -v jq >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "shared-build: installing jq" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq jq >/dev/null
fi

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
graph() {
  RUSTC_BOOTSTRAP=1 cargo "$@" --locked -Z unstable-options --unit-graph >"$WORK/$1.json" 2>"$WORK/$1.err" || {
    echo "shared-build: cargo $* --unit-graph failed:" >&2
    cat "$WORK/$1.err" >&2
    exit 1
  }
}
mv_graph() { mv "$WORK/$1.json" "$WORK/$2.json"; }
graph build -p agentnet --bin agentnet; mv_graph build bin
graph test --workspace --lib --bins --tests --examples --benches --no-run; mv_graph test tests

# The units librocksdb-sys's build depends on, keyed by package, target and mode, with their
# features and profile; the two graphs must agree on every one.
closure() {
  jq -c '
    .units as $u
    | [range(0; $u | length) | select(($u[.].pkg_id | test("librocksdb-sys")) and $u[.].mode == "run-custom-build")] as $roots
    | {seen: [], todo: $roots}
    | until(.todo | length == 0;
        .todo[0] as $i | .todo |= .[1:]
        | if (.seen | index($i)) then . else .seen += [$i] | .todo += [$u[$i].dependencies[].index] end)
    | [.seen[] | $u[.] | {key: "\(.pkg_id | sub(".*#"; "")) \(.target.name) \(.mode)",
                          value: {features, profile: (.profile | del(.name)), platform}}]
    | from_entries' "$1"
}
closure "$WORK/bin.json" >"$WORK/bin.units"
closure "$WORK/tests.json" >"$WORK/tests.units"

passed=0; failed=0
n="$(jq 'length' "$WORK/bin.units")"
if [ "$n" -lt 5 ]; then
  echo "FAIL: found only $n units behind librocksdb-sys in the binary's graph (did the query change?)"
  failed=$((failed+1))
else
  passed=$((passed+1))
fi
diff_out="$(jq -n --slurpfile a "$WORK/bin.units" --slurpfile b "$WORK/tests.units" '
  ($a[0] | keys) + ($b[0] | keys) | unique | map(select($a[0][.] != $b[0][.]))
  | map({unit: ., binary: $a[0][.], tests: $b[0][.]})' )"
if [ "$diff_out" = "[]" ]; then
  echo "ok: the $n units behind librocksdb-sys are the same in the binary's and the test graph"
  passed=$((passed+1))
else
  echo "FAIL: the test graph builds librocksdb-sys's dependencies differently from the binary's:"
  echo "$diff_out" | jq .
  failed=$((failed+1))
fi
echo "shared-build: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
