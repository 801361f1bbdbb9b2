//! The seed inputs of every target, made with the project's own signing code so that they pass
//! validation and a fuzzer starts from inputs that reach the deep checks (signatures, chains,
//! the engine). `cargo run -p agentnet-fuzz --bin seeds` writes them to `fuzz/corpus/`; they are
//! committed, and deterministic except for the fields the signing code draws at random (nonces,
//! credential ids), so rewriting them changes only those.

use agentnet_did::delegation::{self, Capability, Grant};
use agentnet_did::{httpsig, key, Did, DidUrl, SecretKey};
use serde_json::{json, Value};

use crate::{agent_key, agent_kid, wba_document, NOW};

/// A2A Agent Card fields of the seeds' agent.
pub fn card_json() -> Value {
    json!({
        "name": "Fuzz translator",
        "description": "Translates between languages",
        "version": "1.0.0",
        "supportedInterfaces": [
            {"url": "http://127.0.0.1:9/echo", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
        ],
        "capabilities": {"streaming": false},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "translate", "name": "Translate", "description": "Any pair",
                    "tags": ["translation", "language"]}]
    })
}

/// The card signed by `key`'s did:key.
pub fn signed_card(key: &SecretKey) -> Value {
    let did = key.did_key();
    let kid = did.with_fragment(did.method_specific_id());
    agentnet_did::card::sign(&card_json(), key, &kid).expect("the card signs")
}

/// A signed advertisement of `key`'s did:key, valid at `now` for a day.
#[cfg(feature = "node")]
pub fn advert_bytes(key: &SecretKey, seq: u64, now: u64) -> Vec<u8> {
    use agentnet_discovery::advert::{sign, Draft};
    let did = key.did_key();
    let kid = did.with_fragment(did.method_specific_id());
    let ad = sign(
        Draft {
            did,
            kid,
            card: signed_card(key),
            peer_id: "12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN".into(),
            addrs: vec!["/ip4/127.0.0.1/tcp/4001".into()],
            seq,
            issued_at: now,
            expires_at: now + 86_400,
        },
        key,
    );
    serde_json::to_vec(&ad).expect("an advertisement serializes")
}

fn request(method: &str, target: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut out = format!("{method} {target}\n").into_bytes();
    for (n, v) in headers {
        out.extend_from_slice(format!("{n}: {v}\n").as_bytes());
    }
    out.push(b'\n');
    out.extend_from_slice(body);
    out
}

fn signed_request(key: &SecretKey, kid: &agentnet_did::DidUrl, nonce: &str) -> Vec<u8> {
    let body = br#"{"jsonrpc":"2.0","id":1,"method":"send","params":{"text":"hi"}}"#;
    let uri = "https://agent.example/anp/rpc";
    let h = httpsig::sign(key, kid, "POST", uri, body, NOW - 10, nonce).expect("the request signs");
    request(
        "POST",
        uri,
        &[
            ("content-type", "application/json"),
            ("content-digest", &h.content_digest),
            ("signature-input", &h.signature_input),
            ("signature", &h.signature),
        ],
        body,
    )
}

fn chain() -> Value {
    let root = SecretKey::from_seed(&[3; 32]);
    let root_did = root.did_key();
    let root_vm = root_did.with_fragment(root_did.method_specific_id());
    let holder = agent_key();
    let cap = Capability {
        ops: vec!["send".into(), "get".into()],
        skills: Some(vec!["translation".into()]),
        depth: 1,
        ..Default::default()
    };
    let grant = Grant {
        audience: &holder.did_key(),
        capability: &cap,
        valid_from: NOW as i64 - 3600,
        valid_until: NOW as i64 + 10 * 365 * 86_400,
    };
    delegation::issue(&root, &root_vm, &grant, None).expect("the root link issues")
}

fn receipt_jws(caller: Option<&str>) -> String {
    use agentnet_did::receipt::{sign, Receipt};
    let key = agent_key();
    let task = json!({
        "id": "task-1", "contextId": "ctx-1",
        "status": {"state": "TASK_STATE_COMPLETED", "timestamp": "2027-01-15T08:00:00Z"},
        "history": [{"role": "ROLE_USER", "messageId": "m1", "parts": [{"text": "hi"}]}],
        "artifacts": [{"artifactId": "a1", "parts": [{"text": "hello"}]}]
    });
    let r = Receipt::for_task(
        &task,
        key.did_key().as_str(),
        caller,
        "2027-01-15T07:59:00Z",
        vec![],
    );
    sign(&r, &key, &agent_kid())
}

/// Where a target's seeds go: `add(target, file name, bytes)`.
type Add<'a> = dyn FnMut(&'static str, &'static str, Vec<u8>) + 'a;

/// Every seed: (target, file name, bytes).
pub fn all() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    let key = agent_key();
    let kid = agent_kid();
    let mut out: Vec<(&'static str, &'static str, Vec<u8>)> = Vec::new();
    let mut add = |t, n, b: Vec<u8>| out.push((t, n, b));
    jcs_seeds(&key, &mut add);
    did_document_seeds(&key, &mut add);
    httpsig_seeds(&key, &kid, &mut add);
    card_seeds(&key, &mut add);
    delegation_seeds(&key, &kid, &mut add);
    receipt_seeds(&mut add);
    endorsement_seeds(&key, &mut add);
    a2a_jsonrpc_seeds(&mut add);
    // advert: a did:key advertisement.
    #[cfg(feature = "node")]
    add("advert", "did_key.json", advert_bytes(&key, 7, NOW));
    anp_jsonrpc_seeds(&mut add);
    ard_query_seeds(&key, &mut add);
    out
}

/// jcs: numbers at the edges of RFC 8785's rules, escapes, nesting.
fn jcs_seeds(key: &SecretKey, add: &mut Add<'_>) {
    add(
        "jcs",
        "numbers.json",
        br#"[0,-0,1e21,1e-7,123456789012345678901234,0.1,-1.5e-300,9007199254740993,5e-324]"#
            .to_vec(),
    );
    add(
        "jcs",
        "strings.json",
        "{\"b\":\"\\u00e9\\ud83d\\ude00\\n\\t\",\"a\":[\"\u{20ac}\",\"\\\\\"],\"\u{e9}\":null}"
            .as_bytes()
            .to_vec(),
    );
    add(
        "jcs",
        "card.json",
        serde_json::to_vec(&signed_card(key)).unwrap(),
    );
}

/// did_document: did:wba with its proof, did:key, did:web.
fn did_document_seeds(key: &SecretKey, add: &mut Add<'_>) {
    add(
        "did_document",
        "wba.json",
        serde_json::to_vec(&wba_document().to_json()).unwrap(),
    );
    add(
        "did_document",
        "key.json",
        serde_json::to_vec(
            &agentnet_did::didkey::document(&key.public(), Default::default()).to_json(),
        )
        .unwrap(),
    );
    let mk = key::encode_multikey(&key.public());
    add(
        "did_document",
        "web.json",
        serde_json::to_vec(&json!({
            "@context": ["https://www.w3.org/ns/did/v1"],
            "id": "did:web:example.com:agents:fuzz",
            "verificationMethod": [{
                "id": "did:web:example.com:agents:fuzz#k1", "type": "Multikey",
                "controller": "did:web:example.com:agents:fuzz", "publicKeyMultibase": mk}],
            "authentication": ["#k1"],
            "assertionMethod": ["did:web:example.com:agents:fuzz#k1"]
        }))
        .unwrap(),
    );
}

/// httpsig: RFC 9421 by a did:key and by the pinned did:wba, and the legacy header.
fn httpsig_seeds(key: &SecretKey, kid: &DidUrl, add: &mut Add<'_>) {
    add(
        "httpsig",
        "rfc9421_key.txt",
        signed_request(key, kid, "n-1"),
    );
    let wba = wba_document();
    let wba_vm = agentnet_did::DidUrl::parse(&wba.verification_method[0].id).unwrap();
    add(
        "httpsig",
        "rfc9421_wba.txt",
        signed_request(key, &wba_vm, "n-2"),
    );
    let did = Did::parse("did:wba:example.com:agents:fuzz").unwrap();
    let fragment = wba_vm.fragment().unwrap_or("key-1").to_owned();
    let auth = httpsig::sign_legacy(
        key,
        &did,
        &fragment,
        "agent.example",
        "n-3",
        &httpsig::format_utc_timestamp(NOW - 10),
    );
    add(
        "httpsig",
        "legacy_didwba.txt",
        request(
            "POST",
            "https://agent.example/anp/rpc",
            &[("authorization", &auth)],
            b"{}",
        ),
    );
}

/// card: the card signed, and unsigned.
fn card_seeds(key: &SecretKey, add: &mut Add<'_>) {
    add(
        "card",
        "signed.json",
        serde_json::to_vec(&signed_card(key)).unwrap(),
    );
    add(
        "card",
        "unsigned.json",
        serde_json::to_vec(&card_json()).unwrap(),
    );
}

/// delegation: a root link, and the chain handed off one level.
fn delegation_seeds(key: &SecretKey, kid: &DidUrl, add: &mut Add<'_>) {
    let c = chain();
    add("delegation", "root.json", serde_json::to_vec(&c).unwrap());
    let agent = SecretKey::from_seed(&[4; 32]).did_key();
    if let Ok(Some(two)) = delegation::hand_off(key, kid, &c, &agent) {
        add(
            "delegation",
            "handed_off.json",
            serde_json::to_vec(&two).unwrap(),
        );
    }
}

/// receipt: a task receipt for an anonymous caller, and for a signed one.
fn receipt_seeds(add: &mut Add<'_>) {
    add("receipt", "anonymous.jws", receipt_jws(None).into_bytes());
    let caller = SecretKey::from_seed(&[5; 32]).did_key();
    add(
        "receipt",
        "signed_caller.jws",
        receipt_jws(Some(caller.as_str())).into_bytes(),
    );
}

/// endorsement: an endorsement and a revocation.
fn endorsement_seeds(key: &SecretKey, add: &mut Add<'_>) {
    use agentnet_did::endorsement::{sign, Endorsement};
    let sub = SecretKey::from_seed(&[6; 32]).did_key();
    let e = Endorsement::new(
        key.did_key().as_str(),
        sub.as_str(),
        vec!["translation".into()],
        NOW - 60,
        NOW + 86_400,
    );
    add("endorsement", "endorse.jws", sign(&e, key).into_bytes());
    let r = Endorsement::revocation(key.did_key().as_str(), sub.as_str(), NOW - 60, NOW + 86_400);
    add("endorsement", "revoke.jws", sign(&r, key).into_bytes());
}

/// a2a_jsonrpc: the JSON-RPC binding (bare body to /echo/) and the HTTP+JSON binding.
fn a2a_jsonrpc_seeds(add: &mut Add<'_>) {
    let send = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": {"role": "ROLE_USER", "messageId": "m1", "parts": [{"text": "hello"}],
                    "metadata": {"k": "v"}},
        "configuration": {"acceptedOutputModes": ["text/plain"], "historyLength": 2}}});
    add(
        "a2a_jsonrpc",
        "send.json",
        serde_json::to_vec(&send).unwrap(),
    );
    add(
        "a2a_jsonrpc",
        "get_task.json",
        br#"{"jsonrpc":"2.0","id":"x","method":"GetTask","params":{"id":"t1","historyLength":1}}"#
            .to_vec(),
    );
    add(
        "a2a_jsonrpc",
        "list_tasks.json",
        br#"{"jsonrpc":"2.0","id":2,"method":"ListTasks","params":{"pageSize":5,"status":"TASK_STATE_WORKING"}}"#
            .to_vec(),
    );
    add(
        "a2a_jsonrpc",
        "rest_send.txt",
        request(
            "POST",
            "/ask-name/message:send",
            &[
                ("content-type", "application/a2a+json"),
                ("a2a-version", "1.0"),
            ],
            br#"{"message":{"role":"ROLE_USER","messageId":"m2","parts":[{"text":"hi"}]}}"#,
        ),
    );
    add(
        "a2a_jsonrpc",
        "rest_list.txt",
        request("GET", "/echo/tasks?pageSize=3&A2A-Version=1.0", &[], b""),
    );
}

/// anp_jsonrpc: `send` and `getTask`.
fn anp_jsonrpc_seeds(add: &mut Add<'_>) {
    add(
        "anp_jsonrpc",
        "send.json",
        br#"{"jsonrpc":"2.0","id":1,"method":"send","params":{"text":"hello","contextId":"c1"}}"#
            .to_vec(),
    );
    add(
        "anp_jsonrpc",
        "get_task.json",
        br#"{"jsonrpc":"2.0","id":"2","method":"getTask","params":{"taskId":"t1"}}"#.to_vec(),
    );
}

/// ard_query: search with a filter, facets, list with an EBNF filter, lookup.
fn ard_query_seeds(key: &SecretKey, add: &mut Add<'_>) {
    add(
        "ard_query",
        "search.json",
        br#"{"query":{"text":"translation","filter":{"tags":["language"],"type":"a2a"}},"pageSize":5}"#
            .to_vec(),
    );
    add(
        "ard_query",
        "explore.txt",
        request(
            "POST",
            "/explore",
            &[("content-type", "application/json")],
            br#"{"query":{"text":"lang"},"resultType":{"facets":[{"field":"tags","limit":3,"minCount":1}]}}"#,
        ),
    );
    add(
        "ard_query",
        "list.txt",
        request(
            "GET",
            "/agents?filter=tags%3D%22language%22%20AND%20version%3E%3D%221.0%22&orderBy=displayName&pageSize=2",
            &[],
            b"",
        ),
    );
    let urn_id = format!("/agents/{}", key.did_key());
    add("ard_query", "lookup.txt", request("GET", &urn_id, &[], b""));
}
