#!/usr/bin/env bash
# Cross-checks the Python (a2a-sdk) and Node (@a2a-js/sdk) interop tools
# against each other. Run interop/setup.sh first.
#
#   bash interop/selftest.sh
#
# Ends with a line "N passed, N failed"; exit 0 only if nothing failed.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PY="${AGENTNET_VENV:-$HOME/.cache/agentnet/venv}/bin/python"
NODE_DIR="$HERE/node"
PYCARD="$HERE/python/a2a_card.py"
CARD="$HERE/fixtures/card.json"

[ -x "$PY" ] || { echo "selftest: $PY missing; run interop/setup.sh" >&2; exit 2; }
[ -d "$NODE_DIR/node_modules" ] || { echo "selftest: node_modules missing; run interop/setup.sh" >&2; exit 2; }

T="$(mktemp -d)"
trap 'rm -rf "$T"' EXIT

pass=0
fail=0
ok()  { pass=$((pass + 1)); echo "ok   - $*"; }
bad() { fail=$((fail + 1)); echo "FAIL - $*"; }

py()   { "$PY" "$PYCARD" "$@"; }
nodec() { (cd "$NODE_DIR" && node a2a_card.mjs "$@"); }
didk() { (cd "$NODE_DIR" && node didkey.mjs "$@"); }

# expect CODE DESCRIPTION -- COMMAND...
expect() {
  local want="$1" desc="$2"; shift 3
  local rc=0
  "$@" >"$T/out" 2>"$T/err" || rc=$?
  if [ "$rc" -eq "$want" ]; then ok "$desc (exit $rc)"; else
    bad "$desc: expected exit $want, got $rc"; sed 's/^/    /' "$T/err" | tail -5
  fi
}

# tamper IN OUT: change the description, keep the signatures
tamper() {
  "$PY" - "$1" "$2" <<'EOF'
import json, sys
card = json.load(open(sys.argv[1], encoding='utf-8'))
card['description'] = card['description'] + ' (tampered)'
json.dump(card, open(sys.argv[2], 'w', encoding='utf-8'), ensure_ascii=False)
EOF
}

kid_of() {  # first signature's kid
  "$PY" - "$1" <<'EOF'
import base64, json, sys
p = json.load(open(sys.argv[1], encoding='utf-8'))['signatures'][0]['protected']
print(json.loads(base64.urlsafe_b64decode(p + '=' * (-len(p) % 4)))['kid'])
EOF
}

# 0. both SDKs compute the same canonical payload for the fixture
py canonical "$CARD" >"$T/canon.py" 2>/dev/null
nodec canonical "$CARD" >"$T/canon.js"
if cmp -s "$T/canon.py" "$T/canon.js"; then ok "canonical payload identical (python vs node)"; else bad "canonical payload differs"; diff "$T/canon.py" "$T/canon.js" | head -5; fi

# 1. python signs -> node (and python) verify
expect 0 "python sign EdDSA" -- sh -c "'$PY' '$PYCARD' sign '$CARD' --alg EdDSA --out-key '$T/py-ed.jwk' > '$T/py-ed.json'"
expect 0 "python sign ES256" -- sh -c "'$PY' '$PYCARD' sign '$CARD' --alg ES256 --out-key '$T/py-es.jwk' > '$T/py-es.json'"
expect 0 "node verify python EdDSA (kid did:key)" -- nodec verify "$T/py-ed.json"
expect 0 "node verify python EdDSA (--jwk)" -- nodec verify "$T/py-ed.json" --jwk "$T/py-ed.jwk"
expect 0 "node verify python ES256 (--jwk)" -- nodec verify "$T/py-es.json" --jwk "$T/py-es.jwk"
expect 1 "node verify python ES256 with the wrong key" -- nodec verify "$T/py-es.json" --jwk "$T/py-ed.jwk"
expect 0 "python verify python EdDSA (kid did:key)" -- py verify "$T/py-ed.json"

# 2. node signs -> python (and node) verify
expect 0 "node sign EdDSA" -- sh -c "cd '$NODE_DIR' && node a2a_card.mjs sign '$CARD' --alg EdDSA --out-key '$T/js-ed.jwk' > '$T/js-ed.json'"
expect 0 "node sign ES256" -- sh -c "cd '$NODE_DIR' && node a2a_card.mjs sign '$CARD' --alg ES256 --out-key '$T/js-es.jwk' > '$T/js-es.json'"
expect 0 "python verify node EdDSA (kid did:key)" -- py verify "$T/js-ed.json"
expect 0 "python verify node EdDSA (--jwk)" -- py verify "$T/js-ed.json" --jwk "$T/js-ed.jwk"
expect 0 "python verify node ES256 (--jwk)" -- py verify "$T/js-es.json" --jwk "$T/js-es.jwk"
expect 1 "python verify node ES256 without a key (kid not did:key)" -- py verify "$T/js-es.json"
expect 0 "node verify node EdDSA (kid did:key)" -- nodec verify "$T/js-ed.json"

# 3. two signatures (python then node) on one card: both tools check every entry
expect 0 "node co-signs python-signed card" -- sh -c "cd '$NODE_DIR' && node a2a_card.mjs sign '$T/py-ed.json' --alg EdDSA --out-key '$T/both.jwk' > '$T/both.json'"
expect 0 "python verify 2-signature card" -- py verify "$T/both.json"
expect 0 "node verify 2-signature card" -- nodec verify "$T/both.json"

# 4. tampered cards fail with exit 1 in both tools
for src in py-ed js-ed both; do
  tamper "$T/$src.json" "$T/$src-tampered.json"
  expect 1 "python rejects tampered $src" -- py verify "$T/$src-tampered.json"
  expect 1 "node rejects tampered $src" -- nodec verify "$T/$src-tampered.json"
done
tamper "$T/py-es.json" "$T/py-es-tampered.json"
expect 1 "python rejects tampered py-es (--jwk)" -- py verify "$T/py-es-tampered.json" --jwk "$T/py-es.jwk"
expect 1 "node rejects tampered py-es (--jwk)" -- nodec verify "$T/py-es-tampered.json" --jwk "$T/py-es.jwk"

# 5. dropping an empty value does NOT break the signature (SDK clean-up)
"$PY" - "$T/py-ed.json" "$T/py-ed-trimmed.json" <<'EOF'
import json, sys
card = json.load(open(sys.argv[1], encoding='utf-8'))
del card['skills'][0]['examples']          # was []
del card['supportedInterfaces'][0]['tenant']  # was ""
json.dump(card, open(sys.argv[2], 'w', encoding='utf-8'), ensure_ascii=False)
EOF
expect 0 "python accepts card with empty fields removed" -- py verify "$T/py-ed-trimmed.json"
expect 0 "node accepts card with empty fields removed" -- nodec verify "$T/py-ed-trimmed.json"

# 6. did:key resolution of the signer's kid
kid="$(kid_of "$T/py-ed.json")"
did="${kid%%#*}"
if didk "$did" >"$T/did.json" 2>"$T/err" && "$PY" - "$T/did.json" "$did" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))[0]
did = sys.argv[2]
vm = doc['verificationMethod'][0]
assert doc['id'] == did and vm['type'] == 'Multikey', doc
assert vm['publicKeyMultibase'] == did[len('did:key:'):] and vm['id'] == did + '#' + vm['publicKeyMultibase']
assert 'keyAgreement' not in doc
EOF
then ok "didkey.mjs resolves signer did:key (Multikey, no keyAgreement)"; else bad "didkey.mjs multikey"; fi
if didk --suite 2020 "$did" >"$T/did2020.json" 2>"$T/err" && "$PY" - "$T/did2020.json" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))[0]
assert doc['verificationMethod'][0]['type'] == 'Ed25519VerificationKey2020', doc
assert doc['keyAgreement'][0]['type'] == 'X25519KeyAgreementKey2020', doc
assert doc['keyAgreement'][0]['publicKeyMultibase'].startswith('z6LS'), doc
EOF
then ok "didkey.mjs --suite 2020 adds X25519 keyAgreement"; else bad "didkey.mjs 2020"; fi
expect 1 "didkey.mjs rejects malformed did:key" -- didk did:key:z6MkBAD

# 7. usage errors exit 2
expect 2 "python usage error" -- py sign "$CARD"
expect 2 "node usage error" -- nodec sign "$CARD"
expect 2 "didkey usage error" -- didk

echo "selftest: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
