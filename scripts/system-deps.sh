#!/usr/bin/env bash
# System packages the build and the tests need, installed when missing (Debian, as root or with
# sudo): libclang for bindgen in librocksdb-sys; with `--tests`, also chromium (headless) for
# the status page test (tests/e2e/status_page.rs) and iproute2 for the network namespace test
# (sim/tests/shadowgen_netns.rs). `scripts/run.sh` asks for the build's only, so that the main
# job installs no browser; `scripts/test.sh` passes `--tests`.
#
# What counts as libclang is what clang-sys (bindgen's loader) can open: `libclang.so*` or
# `libclang-<version>.so*`. A fresh Debian image ships `libclang-cpp.so.*` (the C++ API, from
# libclang-cpp14), which is not it: bindgen then panics "Unable to find libclang". Tested by
# scripts/tests/system-deps.sh in a mount namespace where libclang is hidden.
set -euo pipefail

have_libclang() {
  local dirs=() d f name
  [ -n "${LIBCLANG_PATH:-}" ] && dirs+=("$LIBCLANG_PATH")
  dirs+=(/usr/lib/llvm-*/lib /usr/lib/*-linux-gnu /usr/lib /usr/lib64 /usr/local/lib)
  for d in "${dirs[@]}"; do
    [ -d "$d" ] || continue
    for f in "$d"/libclang.so* "$d"/libclang-[0-9]*.so*; do
      [ -e "$f" ] || continue
      name="$(basename "$f")"
      case "$name" in libclang-cpp*) continue ;; esac
      return 0
    done
  done
  return 1
}

have_chromium() {
  command -v chromium >/dev/null 2>&1
}

tests=0
case "${1:-}" in
  "") ;;
  --tests) tests=1 ;;
  *) echo "usage: scripts/system-deps.sh [--tests]" >&2; exit 2 ;;
esac

missing=()
have_libclang || missing+=(libclang-dev)
[ "$tests" -eq 0 ] || have_chromium || missing+=(chromium)
# iproute2's `ip`: sim/tests/shadowgen_netns.rs makes network namespaces with it.
[ "$tests" -eq 0 ] || command -v ip >/dev/null 2>&1 || missing+=(iproute2)
if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
why() {
  case "$1" in
    libclang-dev) echo "libclang-dev (RocksDB's bindings)" ;;
    chromium) echo "chromium (the status page test)" ;;
    iproute2) echo "iproute2 (the network namespace test)" ;;
  esac
}
what=()
for p in "${missing[@]}"; do what+=("$(why "$p")"); done
# Name only what is installed: on a fresh machine, run.sh installs libclang-dev alone.
(IFS=,; echo "scripts/system-deps.sh: installing ${what[*]}" | sed 's/,/, /g') >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
if ! have_libclang; then
  echo "scripts/system-deps.sh: libclang-dev installed but no libclang.so found" >&2
  exit 1
fi
if [ "$tests" -eq 1 ] && ! command -v ip >/dev/null 2>&1; then
  echo "scripts/system-deps.sh: iproute2 installed but no \`ip\` on PATH" >&2
  exit 1
fi
if [ "$tests" -eq 1 ] && ! have_chromium; then
  echo "scripts/system-deps.sh: chromium installed but no \`chromium\` on PATH" >&2
  exit 1
fi
