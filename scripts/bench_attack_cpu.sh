#!/usr/bin/env bash
# Delivery under attack on a short CPU (docs/BENCHMARKS.md, "Delivery under attack on a short
# CPU"): `simulate` on sim/scenarios/ci-attacks.toml (junk, replays, Sybils, an eclipse attempt)
# and on the same network without its attackers, each pinned to one core (taskset) beside HOGS
# busy loops on that core and FREE busy loops on any core, RUNS times.
#
#   scripts/bench_attack_cpu.sh [SIMULATE]   # env: HOGS=4 FREE=4 RUNS=2 DEADLINE_MS=8000
#
# SIMULATE defaults to the debug build CI tests ($CARGO_TARGET_DIR/debug/simulate; build it with
# `cargo build -p agentnet-sim --bin simulate`). One line per run: delivery within the deadline,
# each advert's nodes reached and time to reach all (ms, -1: not all), the (advert, node) pairs
# never reached by the end, messages accepted after leaving gossipsub's cache (so not
# forwarded), forwards abandoned, and the CPU of the advertisement phase.
set -euo pipefail
cd "$(dirname "$0")/.."
SIM=${1:-${CARGO_TARGET_DIR:-$HOME/.cache/agentnet/target}/debug/simulate}
HOGS=${HOGS:-4}; FREE=${FREE:-4}; RUNS=${RUNS:-2}; DEADLINE_MS=${DEADLINE_MS:-8000}
[ -x "$SIM" ] || { echo "no simulate at $SIM" >&2; exit 2; }
command -v taskset >/dev/null || { echo "taskset is needed (util-linux)" >&2; exit 2; }
WORK="$(mktemp -d)"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT
# The same network without its attackers: every line before the first table, no adversaries.
sed -n '/^\[links\]/,/^$/p;1,/^\[/p' sim/scenarios/ci-attacks.toml \
  | grep -v '^adversaries\|^junk_rate\|^\[replay\]\|^\[sybil\]\|^\[eclipse\]' | awk '!seen[$0]++' \
  >"$WORK/none.toml"
for _ in $(seq "$HOGS"); do taskset -c 0 sh -c 'while :; do :; done' & PIDS+=($!); done
for _ in $(seq "$FREE"); do sh -c 'while :; do :; done' & PIDS+=($!); done
sleep 5
for run in $(seq "$RUNS"); do
  for s in sim/scenarios/ci-attacks.toml "$WORK/none.toml"; do
    taskset -c 0 "$SIM" --scenario "$s" --deadline-ms "$DEADLINE_MS" --json >"$WORK/r.json" 2>/dev/null
    name=$([ "$s" = "$WORK/none.toml" ] && echo "no attack" || echo "attacks  ")
    echo "$name run $run: $(jq -c '{delivery_pct, reached: [.per_advert[] | .reached],
      all_by_ms: [.per_advert[] | (.reach100_ms // -1 | floor)], never: .queries.missed_by_gossip,
      accepted_too_late: .gossip_validated_too_late, forwards_dropped: .gossip_send_dropped,
      cpu_s: .cpu_s_advert_phase, load: .load_end}' "$WORK/r.json")"
  done
done
