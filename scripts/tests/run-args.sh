#!/usr/bin/env bash
# scripts/run.sh sends flags alone to the testnet (`run.sh --keep`, as the testnet's last line
# says) and a command, `--help` or `--version` to agentnet. Needs the binary built (scripts/test.sh
# builds it first); prints "N passed, N failed".
set -euo pipefail
cd "$(dirname "$0")/../.."
passed=0; failed=0
check() {
  local what="$1" want="$2"; shift 2
  local out
  if out="$(bash scripts/run.sh "$@" 2>&1)" && grep -q -- "$want" <<<"$out"; then
    passed=$((passed+1)); echo "ok: run.sh $* -> $what"
  else
    failed=$((failed+1)); echo "FAIL: run.sh $* should give $what; it printed:"; tail -5 <<<"$out"
  fi
}
check "the testnet's usage" "Usage: agentnet testnet" --keep --help
check "agentnet's usage" "Usage: agentnet \[OPTIONS\] <COMMAND>" --help
check "the version" "^agentnet " --version
check "the testnet's usage" "Usage: agentnet testnet" testnet --help
echo "run-args: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
