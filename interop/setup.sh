#!/usr/bin/env bash
# Idempotent setup for the interop test tools (Python venv + Node modules).
#
#   bash interop/setup.sh
#
# Needs only python3, node and npm on the machine (and the PyPI / npm
# registries). Re-running is cheap: pip runs only when requirements.txt
# changed since the last successful install, npm ci only when node_modules is
# missing or older than package-lock.json.
#
# Environment:
#   AGENTNET_VENV   venv location (default: $HOME/.cache/agentnet/venv)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${AGENTNET_VENV:-$HOME/.cache/agentnet/venv}"
REQ="$HERE/python/requirements.txt"
NODE_DIR="$HERE/node"

log() { printf 'interop/setup.sh: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

command -v python3 >/dev/null || die "python3 not found"
command -v node >/dev/null || die "node not found"
command -v npm >/dev/null || die "npm not found"

hash_of() { python3 -c 'import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],"rb").read()).hexdigest())' "$1"; }

# ---- Python venv ----------------------------------------------------------
make_venv() {
  mkdir -p "$(dirname "$VENV")"
  if ! python3 -m venv "$VENV" >/dev/null 2>&1; then
    # Debian splits ensurepip into python3-venv; fall back to a venv without
    # pip and bootstrap pip from the interpreter's own ensurepip if present.
    rm -rf "$VENV"
    python3 -m venv --without-pip "$VENV" || die "python3 -m venv failed"
  fi
  if ! "$VENV/bin/python" -m pip --version >/dev/null 2>&1; then
    "$VENV/bin/python" -m ensurepip --upgrade >/dev/null 2>&1 ||
      die "venv at $VENV has no pip and ensurepip is unavailable (Debian: apt-get install python3-venv)"
  fi
}

if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
  log "creating venv at $VENV"
  rm -rf "$VENV"
  make_venv
fi

STAMP="$VENV/.agentnet-requirements.sha256"
want="$(cat "$REQ" "$HERE/python/constraints.txt" | python3 -c "import hashlib,sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())")"
have="$(cat "$STAMP" 2>/dev/null || true)"
if [ "$want" != "$have" ] || ! "$VENV/bin/python" -c 'import a2a.utils.signing, jwt, cryptography, anp, anp.openanp, fastapi, starlette, sse_starlette, uvicorn, mcp' >/dev/null 2>&1; then
  log "installing Python requirements"
  "$VENV/bin/python" -m pip --version >/dev/null 2>&1 || make_venv
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$REQ" -c "$HERE/python/constraints.txt" ||
    die "pip install -r $REQ failed"
  printf '%s\n' "$want" > "$STAMP"
fi

# ---- Node modules ---------------------------------------------------------
NSTAMP="$NODE_DIR/node_modules/.agentnet-lock.sha256"
nwant="$(hash_of "$NODE_DIR/package-lock.json")"
nhave="$(cat "$NSTAMP" 2>/dev/null || true)"
if [ ! -d "$NODE_DIR/node_modules" ] || [ "$nwant" != "$nhave" ]; then
  log "installing Node modules (npm ci)"
  (cd "$NODE_DIR" && npm ci --silent --no-audit --no-fund >/dev/null) || die "npm ci failed in $NODE_DIR"
  printf '%s\n' "$nwant" > "$NSTAMP"
fi

exit 0
