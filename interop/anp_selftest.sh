#!/usr/bin/env bash
# Round-trip self-test of interop/python/anp_{http,didwba}.py against the
# official ANP Python SDK (PyPI anp, pinned in interop/python/requirements.txt).
# Everything is SDK-to-SDK; no network is used after the venv exists.
# Usage: bash interop/anp_selftest.sh     (exit 0 = all passed)
set -u
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYDIR="$HERE/python"
FIX="$HERE/fixtures"
VENV="${AGENTNET_VENV:-$HOME/.cache/agentnet/venv}"
PY="$VENV/bin/python"

if [ ! -x "$PY" ]; then
  python3 -m venv "$VENV" || { echo "cannot create venv $VENV"; exit 2; }
fi
if ! "$PY" -c 'import anp.authentication' 2>/dev/null; then
  "$PY" -m pip install -q anp==1.0.7 jcs==0.2.1 base58==2.1.1 || { echo "pip install anp failed"; exit 2; }
fi

T="$(mktemp -d)"; trap 'rm -rf "$T"' EXIT
HTTP=("$PY" "$PYDIR/anp_http.py")
DIDWBA=("$PY" "$PYDIR/anp_didwba.py")
PASS=0; FAIL=0

# expect <want_rc> <name> <cmd...>  (stdout+stderr kept in $T/last.out)
expect() {
  local want="$1" name="$2"; shift 2
  "$@" >"$T/last.out" 2>&1; local rc=$?
  if [ "$rc" = "$want" ]; then PASS=$((PASS+1)); echo "ok   - $name"
  else FAIL=$((FAIL+1)); echo "FAIL - $name (rc=$rc, wanted $want)"; sed 's/^/       /' "$T/last.out" | head -20; fi
}
# expect_grep <pattern> <name>: checks the previous command's output
expect_grep() {
  if grep -q -- "$1" "$T/last.out"; then PASS=$((PASS+1)); echo "ok   - $2"
  else FAIL=$((FAIL+1)); echo "FAIL - $2 (no '$1' in output)"; sed 's/^/       /' "$T/last.out" | head -20; fi
}

URL='https://peer.agentnet.example:8443/anp/rpc?x=1'
printf '{"jsonrpc":"2.0","id":1,"method":"ping"}' >"$T/body"
printf '{"jsonrpc":"2.0","id":1,"method":"pong"}' >"$T/body2"

# --- did:wba creation -------------------------------------------------------
expect 0 "create e1 did:wba (with path)" "${DIDWBA[@]}" create --host agentnet.example --path agents a --out-doc "$T/a.json" --out-key "$T/a.jwk"
expect_grep 'e1_' "DID carries the e1_ key-fingerprint segment"
expect 0 "SDK accepts its own e1 binding + proof" "${DIDWBA[@]}" check --did-doc "$T/a.json"
expect 0 "create second DID" "${DIDWBA[@]}" create --host agentnet.example --path agents b --out-doc "$T/b.json" --out-key "$T/b.jwk"
expect 0 "fixture did_wba_e1.json passes SDK checks" "${DIDWBA[@]}" check --did-doc "$FIX/did_wba_e1.json"
"$PY" - "$T/a.json" "$T/a_bad.json" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1])); d["service"] = [{"id": d["id"] + "#x", "type": "X", "serviceEndpoint": "https://evil.example"}]
json.dump(d, open(sys.argv[2], "w"))
PYEOF
expect 1 "document edited after proof -> rejected" "${DIDWBA[@]}" check --did-doc "$T/a_bad.json"

# --- RFC 9421 ---------------------------------------------------------------
expect 0 "sign POST with body" "${HTTP[@]}" sign --did-doc "$T/a.json" --key "$T/a.jwk" --method POST --url "$URL" --body "$T/body"
cp "$T/last.out" "$T/post.json"
expect_grep 'content-digest' "POST covers content-digest"
expect 0 "verify POST (SDK verifier)" "${HTTP[@]}" verify --did-doc "$T/a.json" --method POST --url "$URL" --headers "$T/post.json" --body "$T/body"
expect 1 "tampered body -> reject" "${HTTP[@]}" verify --did-doc "$T/a.json" --method POST --url "$URL" --headers "$T/post.json" --body "$T/body2"
expect_grep 'Content-Digest verification failed' "tampered body reason is Content-Digest"
expect 1 "tampered URL -> reject" "${HTTP[@]}" verify --did-doc "$T/a.json" --method POST --url "${URL}&y=2" --headers "$T/post.json" --body "$T/body"
expect 1 "tampered method -> reject" "${HTTP[@]}" verify --did-doc "$T/a.json" --method PUT --url "$URL" --headers "$T/post.json" --body "$T/body"
expect 1 "replayed nonce (same verifier) -> reject" "${HTTP[@]}" verify --did-doc "$T/a.json" --method POST --url "$URL" --headers "$T/post.json" --body "$T/body" --repeat 2
expect_grep 'Invalid or expired nonce' "replay reason is nonce"
expect 1 "other DID's document -> reject" "${HTTP[@]}" verify --did-doc "$T/b.json" --method POST --url "$URL" --headers "$T/post.json" --body "$T/body"
expect 2 "sign with key not matching document -> usage error" "${HTTP[@]}" sign --did-doc "$T/a.json" --key "$T/b.jwk" --method GET --url "$URL"
expect 0 "sign GET (no body)" "${HTTP[@]}" sign --did-doc "$T/a.json" --key "$T/a.jwk" --method GET --url "$URL"
cp "$T/last.out" "$T/get.json"
if grep -q 'content-digest' "$T/get.json"; then FAIL=$((FAIL+1)); echo "FAIL - GET must not cover content-digest"; else PASS=$((PASS+1)); echo "ok   - GET does not cover content-digest"; fi
expect 0 "verify GET" "${HTTP[@]}" verify --did-doc "$T/a.json" --method GET --url "$URL" --headers "$T/get.json"
OLD=$(( $(date +%s) - 400 ))
expect 0 "sign with created=now-400" "${HTTP[@]}" sign --did-doc "$T/a.json" --key "$T/a.jwk" --method GET --url "$URL" --created "$OLD"
cp "$T/last.out" "$T/old.json"
expect 1 "stale created -> reject" "${HTTP[@]}" verify --did-doc "$T/a.json" --method GET --url "$URL" --headers "$T/old.json"
expect_grep 'expired or invalid' "stale reason is timestamp"
expect 0 "sign with fixture key" "${HTTP[@]}" sign --did-doc "$FIX/did_wba_e1.json" --key "$FIX/did_wba_e1.key.json" --method POST --url "$URL" --body "$T/body"
cp "$T/last.out" "$T/fix.json"
expect 0 "verify fixture-signed request" "${HTTP[@]}" verify --did-doc "$FIX/did_wba_e1.json" --method POST --url "$URL" --headers "$T/fix.json" --body "$T/body"

# --- legacy Authorization: DIDWba --------------------------------------------
expect 0 "sign-legacy" "${HTTP[@]}" sign-legacy --did-doc "$T/a.json" --key "$T/a.jwk" --url "$URL"
cp "$T/last.out" "$T/legacy.json"
expect_grep 'DIDWba v=' "legacy header format"
expect 0 "verify legacy" "${HTTP[@]}" verify --did-doc "$T/a.json" --method GET --url "$URL" --headers "$T/legacy.json"
expect 1 "legacy for another domain -> reject" "${HTTP[@]}" verify --did-doc "$T/a.json" --method GET --url "https://other.agentnet.example/" --headers "$T/legacy.json"
expect 1 "legacy replayed nonce -> reject" "${HTTP[@]}" verify --did-doc "$T/a.json" --method GET --url "$URL" --headers "$T/legacy.json" --repeat 2

# --- usage errors -------------------------------------------------------------
expect 2 "missing headers file -> usage error" "${HTTP[@]}" verify --did-doc "$T/a.json" --method GET --url "$URL" --headers "$T/nope.json"
expect 2 "missing required arg -> usage error" "${HTTP[@]}" verify --did-doc "$T/a.json"

echo "anp_selftest: $PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
