# Sourced by the benchmark scripts: judge what wrk received, not only one request sent by curl.
#
# wrk exits 0 when its Lua script fails to load (it prints the error and sends its defaults) and
# when every answer is an error (it counts them under "Non-2xx or 3xx responses"), so a run that
# measured refusals would otherwise print a throughput. `wrk_failures FILE` prints why the wrk
# output in FILE (stdout and stderr together) is not a measurement, one reason a line, and
# returns 1; it prints nothing and returns 0 for a clean run.
wrk_failures() {
  local out=$1 bad=0 n
  if grep -qE '\.lua:[0-9]+: |^PANIC: unprotected error in call to Lua API' "$out"; then
    echo "wrk's Lua script failed: $(grep -m1 -E '\.lua:[0-9]+: |^PANIC' "$out")"
    bad=1
  fi
  n=$(awk '/Non-2xx or 3xx responses:/ {print $NF}' "$out")
  if [ -n "$n" ] && [ "$n" != 0 ]; then
    echo "$n answers were not 2xx"
    bad=1
  fi
  n=$(awk '/^answers failed:/ {print $NF}' "$out")
  if [ -n "$n" ] && [ "$n" != 0 ]; then
    echo "$n answers were errors or not what the load asked for (the script's response check)"
    bad=1
  fi
  n=$(awk '/Socket errors:/ {sub(/^ *Socket errors: */, ""); print}' "$out")
  if [ -n "$n" ]; then
    echo "socket errors: $n"
    bad=1
  fi
  n=$(awk '/ requests in / {print $1}' "$out")
  if [ -z "$n" ] || [ "$n" = 0 ]; then
    echo "no request completed"
    bad=1
  fi
  return "$bad"
}

# `wrk_checked FILE -- WRK ARGS...`: run wrk, keep its output in FILE, and exit 1 with the
# reasons when wrk_failures finds any. A script that defines response() and prints
# "answers failed: N" from done() has its count checked too (HTTP 200 can carry an error).
wrk_checked() {
  local out=$1 why
  shift 2
  wrk "$@" >"$out" 2>&1 || { cat "$out" >&2; echo "wrk failed" >&2; exit 1; }
  if ! why=$(wrk_failures "$out"); then
    cat "$out" >&2
    echo "FAIL: this run measured failures, not answers: $why" >&2
    exit 1
  fi
}
