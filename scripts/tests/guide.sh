#!/usr/bin/env bash
# Runs the quick start of docs/GUIDE.md exactly as written, so the guide cannot rot.
#
# The guide's fenced blocks with the info string `sh quickstart` are run in order, each with bash
# in one fresh working directory under a temporary HOME, with `agentnet` on PATH being the
# binary of this checkout ($CARGO_TARGET_DIR/debug/agentnet, built if missing):
# - `sh quickstart`: run in the foreground (at most STEP_TIMEOUT seconds); must exit 0;
# - `sh quickstart bg`: a command the guide runs "in another terminal" (`agentnet up`): started
#   in the background, its output to a log; the step is done once the `--data-dir` it names has a
#   node.json whose pid is alive (at most START_TIMEOUT seconds);
# - `sh quickstart retry`: like the first, rerun until its expected output shows (a discovery
#   that waits for gossip), at most RETRY_TIMEOUT seconds.
# A ```text quickstart-output``` block right after a command block is what the command must
# print: each of its lines must match a line of the command's standard output, with `…`
# standing for anything and runs of spaces for any run of whitespace.
# At the end every background process must have exited (the guide stops the nodes); whatever is
# left is killed. On failure: the step, its output, and every background log.
# Loopback only: the guide's addresses are 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT="$PWD"
GUIDE="${GUIDE:-$ROOT/docs/GUIDE.md}"  # another file: to check this test fails on a wrong guide
STEP_TIMEOUT="${STEP_TIMEOUT:-120}"
START_TIMEOUT="${START_TIMEOUT:-60}"
RETRY_TIMEOUT="${RETRY_TIMEOUT:-60}"
STOP_TIMEOUT="${STOP_TIMEOUT:-20}"

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/agentnet/target}"
BIN="$CARGO_TARGET_DIR/debug/agentnet"
if [ ! -x "$BIN" ]; then
  cargo build --locked -p agentnet --bin agentnet
fi
for tool in jq timeout setsid; do
  command -v "$tool" >/dev/null || { echo "guide test: needs $tool" >&2; exit 1; }
done

TMP="$(mktemp -d)"
mkdir -p "$TMP/bin" "$TMP/home" "$TMP/work" "$TMP/steps" "$TMP/logs"
ln -s "$BIN" "$TMP/bin/agentnet"
BG_PIDS=()

cleanup() {
  local pid
  for pid in "${BG_PIDS[@]}"; do
    kill -TERM -- "-$pid" 2>/dev/null || true
  done
  for pid in "${BG_PIDS[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || true
  done
  rm -rf "$TMP"
}
trap cleanup EXIT

# Split the guide into steps: steps/NN.sh, NN.kind (run|bg|retry), NN.expect (optional).
awk -v dir="$TMP/steps" '
  function flush_kind(k) { printf "%s\n", k > (dir "/" sprintf("%02d", n) ".kind"); close(dir "/" sprintf("%02d", n) ".kind") }
  /^```sh quickstart/ && !inblock {
    n++; inblock = "cmd"; kind = "run"
    if ($0 ~ /quickstart bg/) kind = "bg"
    if ($0 ~ /quickstart retry/) kind = "retry"
    flush_kind(kind); file = dir "/" sprintf("%02d", n) ".sh"; printf "" > file; last = n; next
  }
  /^```text quickstart-output/ && !inblock {
    if (!last) { print "quickstart-output before any command block" > "/dev/stderr"; exit 1 }
    inblock = "out"; file = dir "/" sprintf("%02d", last) ".expect"; printf "" > file; next
  }
  /^```/ && inblock { close(file); if (inblock == "out") last = 0; inblock = ""; next }
  inblock { print >> file; next }
  /^```/ { last = 0 }
' "$GUIDE"
STEPS=("$TMP"/steps/*.sh)
if [ "${#STEPS[@]}" -lt 5 ]; then
  echo "FAIL: found ${#STEPS[@]} quickstart blocks in $GUIDE; the markers are gone?" >&2
  exit 1
fi

export HOME="$TMP/home"
export PATH="$TMP/bin:$PATH"
unset AGENTNET_DATA_DIR
cd "$TMP/work"

show_logs() {
  local f
  for f in "$TMP"/logs/*.log; do
    [ -e "$f" ] || continue
    echo "---- $(basename "$f"):" >&2
    tail -n 60 "$f" >&2
  done
}

fail() {
  echo "FAIL (guide quick start, step $1): $2" >&2
  echo "---- the step:" >&2
  cat "$3" >&2
  show_logs
  exit 1
}

# matches EXPECT OUTPUT: every line of EXPECT matches some line of OUTPUT.
matches() {
  local line re
  while IFS= read -r line || [ -n "$line" ]; do
    [ -n "$line" ] || continue
    re="$(printf '%s' "$line" | sed -e 's/[][\.*^$+?(){}|/]/\\&/g' -e 's/…/.*/g' -e 's/  */[[:space:]]+/g')"
    grep -Eq -- "^[[:space:]]*$re[[:space:]]*\$" "$2" || return 1
  done <"$1"
}

for step in "${STEPS[@]}"; do
  id="$(basename "$step" .sh)"
  kind="$(cat "$TMP/steps/$id.kind")"
  expect="$TMP/steps/$id.expect"
  out="$TMP/logs/$id.out.log"
  err="$TMP/logs/$id.err.log"
  echo "== step $id ($kind): $(head -n1 "$step")"
  case "$kind" in
    bg)
      dir="$(grep -o -- '--data-dir [^ ]*' "$step" | head -n1 | cut -d' ' -f2)"
      [ -n "$dir" ] || fail "$id" "a background step must name its --data-dir" "$step"
      setsid bash -euo pipefail "$step" >"$TMP/logs/$id.bg.log" 2>&1 &
      BG_PIDS+=("$!")
      bg="$!"
      deadline=$((SECONDS + START_TIMEOUT))
      until [ -s "$dir/node.json" ] && kill -0 "$(jq -r .pid "$dir/node.json" 2>/dev/null)" 2>/dev/null; do
        kill -0 "$bg" 2>/dev/null || fail "$id" "the command exited before writing $dir/node.json" "$step"
        [ "$SECONDS" -lt "$deadline" ] || fail "$id" "no $dir/node.json after ${START_TIMEOUT}s" "$step"
        sleep 0.2
      done
      ;;
    run | retry)
      deadline=$((SECONDS + RETRY_TIMEOUT))
      while :; do
        rc=0
        timeout "$STEP_TIMEOUT" bash -euo pipefail "$step" >"$out" 2>"$err" || rc=$?
        ok=1
        [ "$rc" -eq 0 ] || ok=0
        if [ "$ok" -eq 1 ] && [ -e "$expect" ] && ! matches "$expect" "$out"; then ok=0; fi
        [ "$ok" -eq 0 ] || break
        if [ "$kind" = run ] || [ "$SECONDS" -ge "$deadline" ]; then
          {
            echo "---- exit status $rc; standard output:"; cat "$out"
            echo "---- standard error:"; cat "$err"
            if [ -e "$expect" ]; then echo "---- expected lines:"; cat "$expect"; fi
          } >&2
          fail "$id" "exit status $rc (0 wanted), or the output is not what the guide shows" "$step"
        fi
        sleep 1
      done
      ;;
  esac
done

# The guide stopped the nodes: each background command must end by itself.
for pid in "${BG_PIDS[@]}"; do
  deadline=$((SECONDS + STOP_TIMEOUT))
  while kill -0 "$pid" 2>/dev/null; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "FAIL (guide quick start): a node still runs ${STOP_TIMEOUT}s after the guide stopped it" >&2
      show_logs
      exit 1
    fi
    sleep 0.2
  done
done
echo "guide quick start: ${#STEPS[@]} steps passed"
