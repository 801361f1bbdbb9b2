#!/usr/bin/env bash
# System packages the build needs, installed when missing (Debian, as root or with sudo):
# libclang for bindgen in librocksdb-sys.
set -euo pipefail
if ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1 || ls /usr/lib/*/libclang*.so* >/dev/null 2>&1; then
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "scripts/system-deps.sh: installing libclang-dev (needed to build RocksDB bindings)" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq libclang-dev >/dev/null
