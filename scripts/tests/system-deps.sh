#!/usr/bin/env bash
# Test of scripts/system-deps.sh as a fresh machine sees it: inside a private mount namespace,
# every libclang the machine has is hidden by an overlay (whiteouts) while libclang-cpp stays,
# and `apt-get` is a fake that records its arguments. The script must ask for libclang-dev.
# A second case adds a libclang.so.1 to the overlay: then it must not call apt-get at all.
# `chromium` is hidden the same way (a whiteout in each PATH directory that has it) or given
# as a fake on PATH: hidden, the script with `--tests` must ask for chromium, and for it alone
# when libclang is there; without `--tests` (the main job's build) it must not ask for it.
# iproute2's `ip` is hidden the same way: with `--tests` the script must ask for iproute2
# alone, without it for nothing.
# Needs root (mount namespaces and overlayfs); prints "N passed, N failed".
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ "$(id -u)" -ne 0 ] || ! unshare --mount --propagation private true 2>/dev/null; then
  echo "system-deps test: needs root and mount namespaces; skipped"
  echo "0 passed, 0 failed, 1 skipped"
  exit 0
fi

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/bin"
cat >"$WORK/bin/apt-get" <<'FAKE'
#!/bin/sh
echo "apt-get $*" >>"$APT_LOG"
FAKE
chmod +x "$WORK/bin/apt-get"

# Directories holding a real libclang (as system-deps.sh would find it), plus the multiarch
# directory, which holds libclang-cpp on a fresh image. Parents before children: an overlay
# mounted on a parent later would hide the overlays below it.
DIRS=()
for d in /usr/lib /usr/lib64 /usr/local/lib /usr/lib/*-linux-gnu /usr/lib/llvm-*/lib; do
  [ -d "$d" ] || continue
  for f in "$d"/libclang.so* "$d"/libclang-[0-9]*.so*; do
    if [ -e "$f" ] || [ -L "$f" ]; then DIRS+=("$d"); break; fi
  done
done
MULTIARCH="$(ls -d /usr/lib/*-linux-gnu | head -n1)"
case " ${DIRS[*]} " in *" $MULTIARCH "*) ;; *) DIRS+=("$MULTIARCH") ;; esac

# run_case NAME ADD_FAKE_LIBCLANG CHROMIUM [MODE [HIDE]]: runs system-deps.sh in a namespace and
# leaves the apt log; CHROMIUM is `hidden` (every chromium on PATH whited out) or `fake` (one on
# PATH); MODE is `--tests` (the default) or `build` (no argument, as scripts/run.sh calls it);
# HIDE names more commands to white out on PATH the same way (`ip`).
run_case() {
  local name="$1" add_fake="$2" chromium="$3" mode="${4:---tests}" hide="${5:-}"
  [ "$mode" = build ] && mode=""
  local dir="$WORK/$name"
  mkdir -p "$dir/fakebin"
  : >"$dir/apt.log"
  if [ "$chromium" = fake ]; then
    printf '#!/bin/sh\nexit 0\n' >"$dir/fakebin/chromium"
    chmod +x "$dir/fakebin/chromium"
  fi
  # The inner script runs as root in its own mount namespace: nothing it mounts is seen outside.
  APT_LOG="$dir/apt.log" MULTIARCH="$MULTIARCH" PATH="$dir/fakebin:$WORK/bin:$PATH" ADD_FAKE="$add_fake" \
    CHROMIUM="$chromium" CASE_DIR="$dir" MODE="$mode" HIDE="$hide" \
    unshare --mount --propagation private bash -euo pipefail -c '
      i=0
      hide="$HIDE"
      [ "$CHROMIUM" = hidden ] && hide="chromium $hide"
      # One overlay per PATH directory holding any of them, a whiteout for each there.
      seen=" "
      IFS=: read -ra path_dirs <<<"$PATH"
      for d in "${path_dirs[@]}"; do
        [ -d "$d" ] || continue
        real="$(realpath "$d")"
        case "$seen" in *" $real "*) continue ;; esac
        names=()
        for c in $hide; do [ -e "$real/$c" ] && names+=("$c"); done
        [ "${#names[@]}" -gt 0 ] || continue
        seen="$seen$real "
        i=$((i+1)); up="$CASE_DIR/up$i"; wk="$CASE_DIR/wk$i"; mkdir -p "$up" "$wk"
        for c in "${names[@]}"; do mknod "$up/$c" c 0 0; done
        mount -t overlay overlay -o "lowerdir=$real,upperdir=$up,workdir=$wk" "$real"
      done
      for c in $hide; do ! command -v "$c" >/dev/null; done
      for d in "$@"; do
        i=$((i+1)); up="$CASE_DIR/up$i"; wk="$CASE_DIR/wk$i"; mkdir -p "$up" "$wk"
        for f in "$d"/libclang.so* "$d"/libclang-[0-9]*.so*; do
          [ -e "$f" ] || [ -L "$f" ] || continue
          case "$(basename "$f")" in libclang-cpp*) continue ;; esac
          mknod "$up/$(basename "$f")" c 0 0   # overlayfs whiteout: hides the file
        done
        mount -t overlay overlay -o "lowerdir=$d,upperdir=$up,workdir=$wk" "$d"
      done
      if [ "$ADD_FAKE" = 1 ]; then : >"$MULTIARCH/libclang.so.1"; fi
      unset LIBCLANG_PATH
      ls /usr/lib/*-linux-gnu/libclang-cpp.so* >/dev/null   # a fresh image keeps this one
      bash scripts/system-deps.sh $MODE
    ' _ "${DIRS[@]}" >"$dir/out.txt" 2>&1
}

passed=0; failed=0
check() { if "$@"; then passed=$((passed+1)); else failed=$((failed+1)); fi; }

case_hidden() {
  run_case hidden 0 hidden >/dev/null || true   # the fake apt-get installs nothing, so it exits 1
  if grep -q 'install.*libclang-dev' "$WORK/hidden/apt.log" && grep -q 'install.*chromium' "$WORK/hidden/apt.log"; then
    echo "ok: only libclang-cpp present, no chromium -> apt-get install libclang-dev chromium"
  else
    echo "FAIL: only libclang-cpp present and no chromium, but apt-get was not asked for both:"
    cat "$WORK/hidden/apt.log" "$WORK/hidden/out.txt"; return 1
  fi
}
case_present() {
  if run_case present 1 fake && [ ! -s "$WORK/present/apt.log" ] && ! grep -q 'installing' "$WORK/present/out.txt"; then
    echo "ok: libclang.so.1 and chromium present -> no install"
  else
    echo "FAIL: libclang and chromium present, but system-deps.sh tried to install:"
    cat "$WORK/present/apt.log" "$WORK/present/out.txt"; return 1
  fi
}
case_chromium_only() {
  run_case chromium-only 1 hidden >/dev/null || true
  local log="$WORK/chromium-only/apt.log"
  if grep -q 'install.*chromium' "$log" && ! grep -q 'libclang-dev' "$log" \
    && grep -q 'installing chromium (the status page test)$' "$WORK/chromium-only/out.txt"; then
    echo "ok: libclang present, no chromium -> apt-get install chromium only"
  else
    echo "FAIL: libclang present and no chromium, but apt-get was not asked for chromium alone:"
    cat "$log" "$WORK/chromium-only/out.txt"; return 1
  fi
}
case_build_without_chromium() {
  if run_case build 1 hidden build && [ ! -s "$WORK/build/apt.log" ]; then
    echo "ok: the build's deps (scripts/run.sh), libclang present, no chromium -> no install"
  else
    echo "FAIL: the build's deps with libclang present asked apt-get for something:"
    cat "$WORK/build/apt.log" "$WORK/build/out.txt"; return 1
  fi
}
case_build_says_what_it_installs() {
  run_case build-hidden 0 hidden build >/dev/null || true
  local log="$WORK/build-hidden/apt.log" said
  said="$(grep 'installing' "$WORK/build-hidden/out.txt" || true)"
  if grep -q 'install.*libclang-dev' "$log" && ! grep -q chromium "$log" \
    && [[ "$said" == *libclang-dev* ]] && [[ "$said" != *chromium* ]] && [[ "$said" != *iproute2* ]]; then
    echo "ok: the build's deps on a fresh machine -> installs libclang-dev, and says only that"
  else
    echo "FAIL: the build's deps on a fresh machine: apt-get or the message named another package:"
    cat "$log" "$WORK/build-hidden/out.txt"; return 1
  fi
}
case_ip_only() {
  run_case ip-only 1 fake --tests ip >/dev/null || true
  local log="$WORK/ip-only/apt.log"
  if grep -q 'install.*iproute2' "$log" && ! grep -qE 'libclang-dev|chromium' "$log"; then
    echo "ok: libclang and chromium present, no ip -> apt-get install iproute2 only"
  else
    echo "FAIL: no ip, but apt-get was not asked for iproute2 alone:"
    cat "$log" "$WORK/ip-only/out.txt"; return 1
  fi
}
case_build_without_ip() {
  if run_case build-ip 1 fake build ip && [ ! -s "$WORK/build-ip/apt.log" ]; then
    echo "ok: the build's deps, no ip -> no install (only the tests need it)"
  else
    echo "FAIL: the build's deps without ip asked apt-get for something:"
    cat "$WORK/build-ip/apt.log" "$WORK/build-ip/out.txt"; return 1
  fi
}
check case_hidden
check case_present
check case_chromium_only
check case_build_without_chromium
check case_build_says_what_it_installs
check case_ip_only
check case_build_without_ip
echo "system-deps: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
