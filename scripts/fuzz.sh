#!/usr/bin/env bash
# Fuzz the parsers that read what strangers send the node, with AFL++ (README.md,
# "Fuzzing"): `scripts/fuzz.sh [TARGET|all] [SECONDS]`, SECONDS per target (default 180), one
# afl-fuzz at a time. Prints, per target, the executions, executions a second, corpus entries,
# edges found, crashes and hangs; the findings stay in $FUZZ_OUT/<target>/default/{crashes,hangs}.
#
# Installs what it needs when absent: make, a C compiler and clang (apt), and cargo-afl (crates.io),
# whose install builds AFL++ itself from the sources in the crate (about a minute). Builds the
# targets with AFL's instrumentation (`cargo afl build --release`) in a target directory of its
# own: the instrumentation flags differ from every other build's, so nothing there is shared.
# The targets that link RocksDB (advert, anp_jsonrpc, ard_query) reuse the RocksDB library that
# scripts/run.sh or scripts/test.sh built, when there is one, rather than compile its C++ again.
#
# Exits 1 when a target crashed or hung, after running them all.
set -euo pipefail
cd "$(dirname "$0")/.."

TARGETS_DID="jcs did_document httpsig card delegation receipt endorsement a2a_jsonrpc"
TARGETS_NODE="advert anp_jsonrpc ard_query"
WHICH="${1:-all}"
SECONDS_EACH="${2:-180}"
case "$WHICH" in
  all) TARGETS="$TARGETS_DID $TARGETS_NODE" ;;
  *)
    if ! [[ " $TARGETS_DID $TARGETS_NODE " == *" $WHICH "* ]]; then
      echo "fuzz.sh: unknown target $WHICH; one of: $TARGETS_DID $TARGETS_NODE, or all" >&2
      exit 2
    fi
    TARGETS="$WHICH"
    ;;
esac
[[ "$SECONDS_EACH" =~ ^[0-9]+$ ]] || { echo "fuzz.sh: SECONDS must be a number" >&2; exit 2; }

export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
# The workspace's build cache, only to find its RocksDB library.
SHARED_TARGET="${CARGO_TARGET_DIR:-$HOME/.cache/agentnet/target}"
export CARGO_TARGET_DIR="${AGENTNET_FUZZ_TARGET_DIR:-$HOME/.cache/agentnet/fuzz-target}"
FUZZ_OUT="${FUZZ_OUT:-$HOME/.cache/agentnet/fuzz-out}"

echo "== tools"
# cargo-afl builds AFL++ from its sources, whose compiler wrappers need clang.
if ! command -v make >/dev/null 2>&1 || ! command -v cc >/dev/null 2>&1 || ! command -v clang >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq make gcc clang >/dev/null
fi
# cargo-afl's version must match the `afl` crate in Cargo.lock (its runtime links into the targets).
AFL_VERSION="$(awk '/^name = "afl"$/ {getline; gsub(/"/, "", $3); print $3}' Cargo.lock)"
if ! cargo afl --version 2>/dev/null | grep -q "cargo-afl $AFL_VERSION"; then
  cargo install cargo-afl --version "$AFL_VERSION" --locked
fi
if ! cargo afl --version >/dev/null 2>&1; then
  cargo afl config --build
fi
cargo afl --version

FEATURES="afl"
for t in $TARGETS; do
  [[ " $TARGETS_NODE " == *" $t "* ]] && FEATURES="afl,node"
done
ROCKSDB_A="$(ls -t "$SHARED_TARGET"/debug/build/librocksdb-sys-*/out/librocksdb.a 2>/dev/null | head -n 1 || true)"
if [ "$FEATURES" = "afl,node" ] && [ -n "$ROCKSDB_A" ]; then
  echo "reusing $ROCKSDB_A"
  export ROCKSDB_LIB_DIR="$(dirname "$ROCKSDB_A")" ROCKSDB_STATIC=1
  # A prebuilt RocksDB is linked without the C++ runtime its own build would have named.
  export RUSTFLAGS="${RUSTFLAGS:-} -l dylib=stdc++"
fi

echo "== build ($CARGO_TARGET_DIR)"
BINS=()
for t in $TARGETS; do BINS+=(--bin "$t"); done
start=$(date +%s)
cargo afl build --release --locked -p agentnet-fuzz --no-default-features --features "$FEATURES" "${BINS[@]}"
echo "build: $(( $(date +%s) - start )) s"

# No core pattern or CPU governor changes (shared machine, and CI has neither to change).
export AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_UI=1
found=0
printf '\n%-14s %12s %9s %8s %12s %8s %6s\n' target execs execs/s corpus edges crashes hangs > "$FUZZ_OUT.summary" 2>/dev/null || {
  mkdir -p "$(dirname "$FUZZ_OUT")"
  printf '\n%-14s %12s %9s %8s %12s %8s %6s\n' target execs execs/s corpus edges crashes hangs > "$FUZZ_OUT.summary"
}
for t in $TARGETS; do
  echo "== afl-fuzz $t for $SECONDS_EACH s"
  out="$FUZZ_OUT/$t"
  rm -rf "$out"
  mkdir -p "$out"
  # -V: stop after the time; -m: 2 GiB of address space, so an unbounded allocation crashes.
  cargo afl fuzz -V "$SECONDS_EACH" -m 2048 -t 2000 -i "fuzz/corpus/$t" -o "$out" \
    "$CARGO_TARGET_DIR/release/$t" > "$out.log" 2>&1 || { tail -n 20 "$out.log"; found=1; continue; }
  stats="$out/default/fuzzer_stats"
  get() { awk -F' *: *' -v k="$1" '$1 == k {print $2}' "$stats"; }
  crashes="$(get saved_crashes)"; hangs="$(get saved_hangs)"
  printf '%-14s %12s %9s %8s %12s %8s %6s\n' "$t" "$(get execs_done)" "$(get execs_per_sec)" \
    "$(get corpus_count)" "$(get edges_found)/$(get total_edges)" "$crashes" "$hangs" >> "$FUZZ_OUT.summary"
  [ "${crashes:-0}" = 0 ] && [ "${hangs:-0}" = 0 ] || found=1
done
cat "$FUZZ_OUT.summary"
[ "$found" = 0 ] || echo "findings under $FUZZ_OUT/<target>/default/{crashes,hangs}" >&2
exit "$found"
