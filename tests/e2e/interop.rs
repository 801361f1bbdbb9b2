//! Interoperability of the real `agentnet` binary and the `agentnet-did` library with independent
//! implementations: the A2A SDKs (Python `a2a-sdk`, JS `@a2a-js/sdk`), the did:key reference
//! driver (`@digitalbazaar/did-method-key`) and the official ANP Python SDK (`anp`).
//!
//! The independent side runs as subprocesses through the scripts in `interop/` (see
//! `interop/NOTES.md`, `interop/ANP_NOTES.md`). They must be installed with
//! `bash interop/setup.sh`; these tests fail (never skip) when they are missing.

use crate::common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use agentnet_did::httpsig::{self, AuthError, Scheme, Verifier, VerifyOptions};
use agentnet_did::key::Jwk;
use agentnet_did::{a2a, wba, Did, Document, Resolver, SecretKey};
use serde_json::{json, Value};

/// Longest any single subprocess may run.
const TIMEOUT: Duration = Duration::from_secs(120);
const SETUP_HINT: &str = "run `bash interop/setup.sh` first (scripts/test.sh does it)";

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

struct Tools {
    python: PathBuf,
    interop: PathBuf,
    node_dir: PathBuf,
}

/// The venv python and the interop directories; panics with the setup hint if missing.
fn tools() -> &'static Tools {
    static TOOLS: OnceLock<Tools> = OnceLock::new();
    TOOLS.get_or_init(|| {
        let interop = std::path::PathBuf::from(
            std::env::var_os("CARGO_MANIFEST_DIR")
                .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
        )
        .join("interop");
        let interop = interop
            .canonicalize()
            .unwrap_or_else(|e| panic!("{}: {e}; {SETUP_HINT}", interop.display()));
        let python = common::venv_python();
        assert!(
            python.is_file(),
            "no interop venv python at {}; {SETUP_HINT}",
            python.display()
        );
        let node_dir = interop.join("node");
        for pkg in ["@a2a-js/sdk", "@digitalbazaar/did-method-key", "jose"] {
            let p = node_dir.join("node_modules").join(pkg);
            assert!(p.is_dir(), "missing {}; {SETUP_HINT}", p.display());
        }
        Tools {
            python,
            interop,
            node_dir,
        }
    })
}

/// A finished subprocess.
struct Out {
    what: String,
    code: i32,
    stdout: String,
    stderr: String,
}

impl Out {
    /// Assert the exit code, showing everything the process said if it differs.
    fn expect(self, code: i32) -> Self {
        assert_eq!(
            self.code, code,
            "{}: exit {} (wanted {code})\n--- stdout\n{}\n--- stderr\n{}",
            self.what, self.code, self.stdout, self.stderr
        );
        self
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "{}: stdout is not JSON ({e}):\n{}\n--- stderr\n{}",
                self.what, self.stdout, self.stderr
            )
        })
    }
}

/// Run `cmd` to completion with [`TIMEOUT`], capturing its output.
fn run(mut cmd: Command) -> Out {
    let what = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {what}: {e}; {SETUP_HINT}"));
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut buf);
            }
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let out = drain(child.stdout.take().map(|s| Box::new(s) as _));
    let err = drain(child.stderr.take().map(|s| Box::new(s) as _));
    let deadline = Instant::now() + TIMEOUT;
    let status = loop {
        if let Some(s) = child.try_wait().expect("waiting for a subprocess") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: timed out after {TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Out {
        what,
        code: status.code().unwrap_or(-1),
        stdout: out.join().expect("stdout reader"),
        stderr: err.join().expect("stderr reader"),
    }
}

fn args_of<S: AsRef<std::ffi::OsStr>>(cmd: &mut Command, args: &[S]) {
    for a in args {
        cmd.arg(a);
    }
}

/// Run `interop/python/<script>` with the venv python.
fn python<S: AsRef<std::ffi::OsStr>>(script: &str, args: &[S]) -> Out {
    let t = tools();
    let mut cmd = Command::new(&t.python);
    cmd.arg(t.interop.join("python").join(script))
        .current_dir(t.interop.join("python"));
    args_of(&mut cmd, args);
    run(cmd)
}

/// Run `interop/node/<script>` with node.
fn node<S: AsRef<std::ffi::OsStr>>(script: &str, args: &[S]) -> Out {
    let t = tools();
    let mut cmd = Command::new("node");
    cmd.arg(t.node_dir.join(script)).current_dir(&t.node_dir);
    args_of(&mut cmd, args);
    run(cmd)
}

/// Run the real `agentnet` binary.
fn agentnet<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Out {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentnet"));
    cmd.env_remove("AGENTNET_DATA_DIR");
    args_of(&mut cmd, args);
    run(cmd)
}

/// The two A2A SDK scripts, run the same way.
#[derive(Clone, Copy, Debug)]
enum Sdk {
    Python,
    Js,
}

impl Sdk {
    const ALL: [Sdk; 2] = [Sdk::Python, Sdk::Js];

    fn a2a_card<S: AsRef<std::ffi::OsStr>>(self, args: &[S]) -> Out {
        match self {
            Sdk::Python => python("a2a_card.py", args),
            Sdk::Js => node("a2a_card.mjs", args),
        }
    }
}

fn write_file(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap_or_else(|e| panic!("writing {}: {e}", p.display()));
    p
}

fn write_temp_json(dir: &Path, name: &str, v: &Value) -> PathBuf {
    write_file(dir, name, &serde_json::to_vec_pretty(v).unwrap())
}

fn read_json(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

fn fixture(name: &str) -> PathBuf {
    tools().interop.join("fixtures").join(name)
}

fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn b64url_json(s: &str) -> Value {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s)
        .unwrap_or_else(|e| panic!("{s:?} is not base64url: {e}"));
    serde_json::from_slice(&bytes).unwrap()
}

/// Paths at which two JSON values differ (for readable failure messages).
fn json_diff(a: &Value, b: &Value, path: &str, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<_> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let p = format!("{path}.{k}");
                match (x.get(k), y.get(k)) {
                    (Some(u), Some(v)) => json_diff(u, v, &p, out),
                    (u, v) => out.push(format!("{p}: {u:?} vs {v:?}")),
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (u, v)) in x.iter().zip(y).enumerate() {
                json_diff(u, v, &format!("{path}[{i}]"), out);
            }
        }
        _ if a != b => out.push(format!("{path}: {a} vs {b}")),
        _ => {}
    }
}

fn assert_json_eq(ours: &Value, theirs: &Value, what: &str) {
    let mut diff = Vec::new();
    json_diff(ours, theirs, "$", &mut diff);
    assert!(
        diff.is_empty(),
        "{what}: ours vs reference differ at\n  {}\n--- ours\n{}\n--- reference\n{}",
        diff.join("\n  "),
        serde_json::to_string_pretty(ours).unwrap(),
        serde_json::to_string_pretty(theirs).unwrap()
    );
}

/// A copy of a signed card with `description` changed.
fn tampered(card: &Value) -> Value {
    let mut c = card.clone();
    c["description"] = json!("tampered description");
    c
}

// ---------------------------------------------------------------------------------------------
// 1-3: A2A Agent Card signatures
// ---------------------------------------------------------------------------------------------

/// Every SDK verifies the card at `good` (signed with `kid`) and refuses the tampered copy at
/// `bad`. No --jwk: each script resolves the did:key kid itself.
fn sdks_accept_and_refuse_tampered(good: &Path, bad: &Path, kid: &str) {
    for sdk in Sdk::ALL {
        let out = sdk
            .a2a_card(&["verify".as_ref(), good.as_os_str()])
            .expect(0);
        assert_sdk_verdict(&out, true, kid);
        let out = sdk
            .a2a_card(&["verify".as_ref(), bad.as_os_str()])
            .expect(1);
        assert_sdk_verdict(&out, false, kid);
    }
}

/// Check a script's `verify` JSON: overall `ok` and each signature entry.
fn assert_sdk_verdict(out: &Out, ok: bool, kid: &str) {
    let v = out.json();
    assert_eq!(v["ok"], json!(ok), "{}: {v}", out.what);
    let sigs = v["signatures"].as_array().expect("signatures list");
    assert_eq!(sigs.len(), 1, "{}: {v}", out.what);
    assert_eq!(sigs[0]["ok"], json!(ok), "{}: {v}", out.what);
    assert_eq!(sigs[0]["kid"], json!(kid), "{}: {v}", out.what);
    assert_eq!(sigs[0]["alg"], json!("EdDSA"), "{}: {v}", out.what);
}

#[test]
fn a2a_card_signed_by_agentnet_verifies_in_both_sdks() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let init = agentnet(&["init", "--data-dir", data.to_str().unwrap(), "--json"])
        .expect(0)
        .json();
    let did = init["did"]
        .as_str()
        .expect("init prints the DID")
        .to_owned();
    assert!(did.starts_with("did:key:z6Mk"), "{init}");
    let kid = format!("{did}#{}", &did["did:key:".len()..]);

    let signed = agentnet(&[
        "card".as_ref(),
        "sign".as_ref(),
        fixture("card.json").as_os_str(),
        "--data-dir".as_ref(),
        data.as_os_str(),
    ])
    .expect(0)
    .json();
    let sigs = signed["signatures"].as_array().expect("signed card");
    assert_eq!(sigs.len(), 1);
    let header = b64url_json(sigs[0]["protected"].as_str().unwrap());
    assert_eq!(header["kid"], json!(kid));
    assert_eq!(header["alg"], json!("EdDSA"));
    assert_eq!(header["typ"], json!("JOSE"), "the JS SDK requires typ");

    let good = write_temp_json(dir.path(), "signed.json", &signed);
    let bad = write_temp_json(dir.path(), "tampered.json", &tampered(&signed));
    sdks_accept_and_refuse_tampered(&good, &bad, &kid);
    agentnet(&["card".as_ref(), "verify".as_ref(), good.as_os_str()]).expect(0);
    let out = agentnet(&[
        "card".as_ref(),
        "verify".as_ref(),
        bad.as_os_str(),
        "--json".as_ref(),
    ])
    .expect(1);
    assert_eq!(out.json()["ok"], json!(false), "{}", out.stdout);
}

/// The node's own card advertises no interface (none exists yet): it must still be an A2A 1.0
/// card both SDKs parse and verify.
#[test]
fn the_node_card_without_interfaces_verifies_in_both_sdks() {
    let dir = tempfile::tempdir().unwrap();
    let key = SecretKey::from_seed(&[7; 32]);
    let did = key.did_key().to_string();
    let kid = format!("{did}#{}", &did["did:key:".len()..]);
    let served = agentnet_node::http::WellKnown::new(&key).unwrap();
    let card: Value = serde_json::from_str(served.card_json()).unwrap();
    assert_eq!(card["supportedInterfaces"], json!([]), "{card}");
    let good = write_temp_json(dir.path(), "node-card.json", &card);
    let bad = write_temp_json(dir.path(), "tampered.json", &tampered(&card));
    sdks_accept_and_refuse_tampered(&good, &bad, &kid);
}

#[test]
fn a2a_cards_signed_by_both_sdks_verify_in_agentnet() {
    let dir = tempfile::tempdir().unwrap();
    let card = fixture("card.json");
    for sdk in Sdk::ALL {
        for alg in ["ES256", "EdDSA"] {
            let name = format!("{sdk:?}-{alg}");
            let jwk = dir.path().join(format!("{name}.pub.jwk"));
            let signed = sdk
                .a2a_card(&[
                    "sign".as_ref(),
                    card.as_os_str(),
                    "--alg".as_ref(),
                    alg.as_ref(),
                    "--out-key".as_ref(),
                    jwk.as_os_str(),
                ])
                .expect(0)
                .json();
            let header = b64url_json(signed["signatures"][0]["protected"].as_str().unwrap());
            assert_eq!(header["alg"], json!(alg), "{name}: {header}");
            let kid = header["kid"].as_str().expect("kid").to_owned();
            let good = write_temp_json(dir.path(), &format!("{name}.json"), &signed);
            let bad = write_temp_json(dir.path(), &format!("{name}.bad.json"), &tampered(&signed));

            let verify = |card: &Path, jwk: Option<&Path>, code: i32| {
                let mut args = vec!["card".as_ref(), "verify".as_ref(), card.as_os_str()];
                if let Some(j) = jwk {
                    args.extend(["--jwk".as_ref(), j.as_os_str()]);
                }
                args.push("--json".as_ref());
                let out = agentnet(&args).expect(code);
                let v = out.json();
                assert_eq!(v["ok"], json!(code == 0), "{name}: {v}");
                if code == 0 {
                    assert_eq!(
                        v["signatures"],
                        json!([{"kid": kid, "alg": alg}]),
                        "{name}: {v}"
                    );
                }
            };
            verify(&good, Some(&jwk), 0);
            verify(&bad, Some(&jwk), 1);
            if alg == "EdDSA" {
                assert!(kid.starts_with("did:key:z6Mk"), "{name}: kid {kid}");
                verify(&good, None, 0);
                verify(&bad, None, 1);
            }
        }
    }
}

/// Cards that exercise the canonicalization rules: see `interop/NOTES.md`.
fn edge_cards() -> Vec<(&'static str, Value)> {
    vec![
        (
            "unknown fields",
            json!({
                "name": "U", "description": "unknown fields are dropped", "extraField": {"x": 1},
                "provider": {"organization": "o", "url": "https://o.example", "country": "NL"},
                "capabilities": {"streaming": true, "stateTransitionHistory": true},
                "skills": [{"id": "s", "name": "S", "description": "d", "tags": ["t"],
                            "unknownSkillField": "z"}],
                "signatures": [{"protected": "e30", "signature": "AA", "header": {"kid": "x"}}]
            }),
        ),
        (
            "snake_case names",
            json!({
                "name": "S", "description": "snake", "documentation_url": "https://d.example",
                "icon_url": "https://i.example/icon.png",
                "default_input_modes": ["text/plain"], "default_output_modes": ["application/json"],
                "supported_interfaces": [{"url": "https://a.example", "protocol_binding": "JSONRPC",
                                          "protocol_version": "1.0"}],
                "capabilities": {"push_notifications": true, "extended_agent_card": false},
                "security_schemes": {"k": {"api_key_security_scheme": {"location": "header",
                                                                      "name": "X-Key"}}},
                "security_requirements": [{"schemes": {"k": {"list": ["read"]}}}],
                "skills": [{"id": "s", "name": "S", "description": "d", "tags": ["t"],
                            "input_modes": ["text/plain"]}]
            }),
        ),
        (
            "required:false and pkceRequired:false",
            json!({
                "name": "R", "description": "bools without presence",
                "capabilities": {"streaming": false, "pushNotifications": false,
                                 "extendedAgentCard": false,
                    "extensions": [
                        {"uri": "https://e.example/1", "required": false},
                        {"uri": "https://e.example/2", "required": true, "params": {}},
                        {"uri": "https://e.example/3", "description": "", "required": false,
                         "params": {"flag": false, "zero": 0}}
                    ]},
                "securitySchemes": {
                    "o1": {"oauth2SecurityScheme": {"flows": {"authorizationCode": {
                        "authorizationUrl": "https://a.example/auth", "tokenUrl": "https://a.example/t",
                        "scopes": {"read": "Read", "none": ""}, "pkceRequired": false}}}},
                    "o2": {"oauth2SecurityScheme": {"flows": {"authorizationCode": {
                        "authorizationUrl": "https://b.example/auth", "tokenUrl": "https://b.example/t",
                        "scopes": {}, "pkceRequired": true}}}}
                }
            }),
        ),
        (
            "nested empties",
            json!({
                "name": "E", "description": "", "version": "", "skills": [], "defaultInputModes": [],
                "provider": {"organization": "", "url": ""},
                "supportedInterfaces": [{"url": "", "protocolBinding": "", "tenant": ""}],
                "securityRequirements": [{"schemes": {"a": {"list": []}}}, {"schemes": {}}],
                "capabilities": {"extensions": [{"uri": "https://e.example", "params": {
                    "a": {"b": {"c": []}}, "d": [{}, [], "", null, 0, false, [[{}]]],
                    "e": {"f": null}, "g": " ", "h": [[[]]], "i": {"j": {}, "k": 1}
                }}]}
            }),
        ),
        (
            "numbers in params",
            json!({
                "name": "N", "description": "numbers",
                "capabilities": {"extensions": [{"uri": "https://e.example", "params": {
                    "one": 1.0, "big": 1e21, "tenth": 0.1, "negzero": -0.0, "small": 1e-7,
                    "int": 123456789012u64, "max_safe": 9007199254740991u64,
                    "beyond_safe": 9007199254740993u64, "neg": -1.5e-300, "third": 0.3333333333333333,
                    "e20": 1e20, "list": [1.0, 2.50, 3e0, -7, 5e-324]
                }}]}
            }),
        ),
        (
            "strings",
            json!({
                "name": "K \u{1F680}", "description": "tab\there\nnewline \"quoted\" back\\slash /slash \u{7f} \u{1}\u{1f}",
                "capabilities": {"extensions": [{"uri": "https://e.example", "params": {
                    "\u{e9}": "e-acute", "Z": 1, "a": 2, "ctl": "\u{0}\u{8}\u{c}\u{b}",
                    "html": "<a href='x'>&amp;</a>", "u2028": "\u{2028}\u{2029}"
                }}]}
            }),
        ),
        (
            // RFC 8785 sorts keys by UTF-16 code units: U+10000 (D800 DC00) before U+FB01, "a"
            // before its extensions "a " and "a!", "\n" (U+000A) before "A".
            "key order (UTF-16 code units)",
            json!({
                "name": "O", "description": "key order",
                "capabilities": {"extensions": [{"uri": "https://e.example", "params": {
                    "\u{10000}": "astral", "\u{fb01}": "ligature",
                    "a": 1, "a ": 2, "a!": 3, "A": 4, "\n": 5, "q\"": 6, "q#": 7
                }}]}
            }),
        ),
    ]
}

#[test]
fn a2a_canonical_bytes_match_both_sdks() {
    let dir = tempfile::tempdir().unwrap();
    let fixture_card = read_json(&fixture("card.json"));
    let mut cards = vec![("fixtures/card.json", fixture_card)];
    cards.extend(edge_cards());
    let mut failures = Vec::new();
    for (i, (name, card)) in cards.iter().enumerate() {
        let path = write_temp_json(dir.path(), &format!("card{i}.json"), card);
        let ours = String::from_utf8(a2a::canonical_bytes(card).unwrap()).unwrap();
        for sdk in Sdk::ALL {
            let out = sdk
                .a2a_card(&["canonical".as_ref(), path.as_os_str()])
                .expect(0);
            let theirs = out.stdout.strip_suffix('\n').unwrap_or(&out.stdout);
            if ours != theirs {
                failures.push(format!(
                    "{name} ({sdk:?}):\n  ours:   {ours}\n  theirs: {theirs}"
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "canonical bytes differ:\n{}",
        failures.join("\n")
    );
}

// ---------------------------------------------------------------------------------------------
// 4: did:key documents
// ---------------------------------------------------------------------------------------------

#[test]
fn did_key_documents_match_the_reference_driver() {
    let mut keys: Vec<SecretKey> = [0x00u8, 0x01, 0x05]
        .iter()
        .map(|b| SecretKey::from_seed(&[*b; 32]))
        .collect();
    keys.extend((0..3).map(|_| SecretKey::generate()));
    let dids: Vec<String> = keys.iter().map(|k| k.did_key().to_string()).collect();
    assert_eq!(
        dids[0], "did:key:z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooWp",
        "seed 0x00.. gives the well-known did:key"
    );

    let suites: [(&str, &[&str]); 2] = [
        ("multikey", &[]),
        ("2020", &["--key-format", "2020", "--key-agreement"]),
    ];
    for (suite, flags) in suites {
        let mut args = vec!["--suite", suite];
        args.extend(dids.iter().map(String::as_str));
        let reference = node("didkey.mjs", &args).expect(0).json();
        let reference = reference.as_array().expect("didkey.mjs prints an array");
        assert_eq!(reference.len(), dids.len());
        for (did, theirs) in dids.iter().zip(reference) {
            let mut args = vec!["resolve", did.as_str()];
            args.extend_from_slice(flags);
            let ours = agentnet(&args).expect(0).json();
            assert_json_eq(&ours, theirs, &format!("did:key {suite} document of {did}"));
            // The resolution-result form carries the same document.
            args.push("--json");
            let result = agentnet(&args).expect(0).json();
            assert_json_eq(
                &result["didDocument"],
                theirs,
                &format!("--json didDocument ({suite}) of {did}"),
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 5-6: ANP (did:wba, RFC 9421 and legacy DIDWba)
// ---------------------------------------------------------------------------------------------

const ANP_URL: &str = "https://peer.agents.example:8443/anp/rpc?x=1";
const ANP_DOMAIN: &str = "peer.agents.example";
const BODY: &[u8] = br#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"text":"caf\u00e9"}}"#;
const OTHER_BODY: &[u8] = br#"{"jsonrpc":"2.0","id":1,"method":"pong"}"#;

/// A did:wba document and its key, made by the ANP SDK.
fn sdk_did_wba(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let doc = dir.join(format!("{name}.json"));
    let key = dir.join(format!("{name}.jwk"));
    let out = python(
        "anp_didwba.py",
        &[
            "create".as_ref(),
            "--host".as_ref(),
            "agents.example".as_ref(),
            "--path".as_ref(),
            "agents".as_ref(),
            name.as_ref(),
            "--out-doc".as_ref(),
            doc.as_os_str(),
            "--out-key".as_ref(),
            key.as_os_str(),
        ],
    )
    .expect(0)
    .json();
    let did = out["did"].as_str().unwrap();
    assert!(
        did.starts_with(&format!("did:wba:agents.example:agents:{name}:e1_")),
        "{out}"
    );
    (doc, key)
}

fn header_map(headers: &Value) -> http::HeaderMap {
    let mut map = http::HeaderMap::new();
    for (k, v) in headers.as_object().expect("headers object") {
        map.insert(
            http::HeaderName::from_bytes(k.to_ascii_lowercase().as_bytes()).unwrap(),
            http::HeaderValue::from_str(v.as_str().unwrap()).unwrap(),
        );
    }
    map
}

fn verifier_for(doc: &Path) -> Verifier {
    let resolver = Resolver::new(Default::default()).unwrap();
    let doc = Document::from_json(&std::fs::read(doc).unwrap()).expect("SDK document parses");
    resolver
        .pin(doc)
        .expect("SDK did:wba document passes our checks");
    Verifier::new(resolver, VerifyOptions::default())
}

#[tokio::test]
async fn anp_requests_signed_by_the_sdk_verify_in_agentnet() {
    let dir = tempfile::tempdir().unwrap();
    let (doc, key) = sdk_did_wba(dir.path(), "alice");
    let did = read_json(&doc)["id"].as_str().unwrap().to_owned();
    let body = write_file(dir.path(), "body", BODY);
    let anp = |args: &[&std::ffi::OsStr]| {
        let (cmd, args) = args.split_first().expect("a subcommand");
        let mut all: Vec<&std::ffi::OsStr> = vec![
            cmd,
            "--did-doc".as_ref(),
            doc.as_os_str(),
            "--key".as_ref(),
            key.as_os_str(),
        ];
        all.extend_from_slice(args);
        python("anp_http.py", &all).expect(0).json()
    };

    // RFC 9421, POST with a body.
    let mut post = vec!["sign".as_ref(), "--method".as_ref(), "POST".as_ref()];
    post.extend([
        "--url".as_ref(),
        ANP_URL.as_ref(),
        "--body".as_ref(),
        body.as_os_str(),
    ]);
    let post = anp(&post);
    let headers = header_map(&post["headers"]);
    assert!(headers.contains_key("content-digest"), "{post}");
    let verifier = verifier_for(&doc);
    let ok = verifier
        .verify("POST", ANP_URL, &headers, BODY, now_unix())
        .await
        .expect("SDK-signed POST accepted");
    assert_eq!(ok.did.as_str(), did);
    assert_eq!(ok.key_id, format!("{did}#key-1"));
    assert_eq!(ok.scheme, Scheme::HttpSignature);
    let replay = verifier
        .verify("POST", ANP_URL, &headers, BODY, now_unix())
        .await;
    assert!(matches!(replay, Err(AuthError::Replay(_))), "{replay:?}");
    let tampered = verifier_for(&doc)
        .verify("POST", ANP_URL, &headers, OTHER_BODY, now_unix())
        .await;
    assert!(
        matches!(tampered, Err(AuthError::DigestMismatch)),
        "{tampered:?}"
    );

    // RFC 9421, GET without a body (no Content-Digest covered).
    let get = anp(&[
        "sign".as_ref(),
        "--method".as_ref(),
        "GET".as_ref(),
        "--url".as_ref(),
        ANP_URL.as_ref(),
    ]);
    assert!(post["headers"].get("Content-Digest").is_some());
    assert!(get["headers"].get("Content-Digest").is_none(), "{get}");
    let ok = verifier
        .verify(
            "GET",
            ANP_URL,
            &header_map(&get["headers"]),
            b"",
            now_unix(),
        )
        .await
        .expect("SDK-signed GET accepted");
    assert_eq!(ok.scheme, Scheme::HttpSignature);

    // Legacy Authorization: DIDWba. The SDK signs the host name without the port, so its
    // header verifies at the host's default port only, not at the port of the URL it was
    // made for (it signs no port: accepted there, it would be accepted at every port).
    let legacy = anp(&["sign-legacy".as_ref(), "--url".as_ref(), ANP_URL.as_ref()]);
    assert_eq!(legacy["service_domain"], json!(ANP_DOMAIN));
    let headers = header_map(&legacy["headers"]);
    let at_port = verifier_for(&doc)
        .verify("POST", ANP_URL, &headers, BODY, now_unix())
        .await;
    assert!(
        matches!(at_port, Err(AuthError::BadSignature(_))),
        "{at_port:?}"
    );
    let default_port = ANP_URL.replace(":8443", "");
    let ok = verifier
        .verify("POST", &default_port, &headers, BODY, now_unix())
        .await
        .expect("SDK legacy DIDWba header accepted");
    assert_eq!(ok.did.as_str(), did);
    assert_eq!(ok.scheme, Scheme::LegacyDidWba);
    let replay = verifier
        .verify("POST", &default_port, &headers, BODY, now_unix())
        .await;
    assert!(matches!(replay, Err(AuthError::Replay(_))), "{replay:?}");
    let other_host = verifier_for(&doc)
        .verify(
            "POST",
            "https://evil.example/anp/rpc",
            &headers,
            BODY,
            now_unix(),
        )
        .await;
    assert!(
        matches!(other_host, Err(AuthError::BadSignature(_))),
        "{other_host:?}"
    );
}

/// Check one of our requests with the SDK verifier: accepted once, the replay (`--repeat 2`)
/// refused for its nonce, and (with a body) a different body refused for its digest.
fn sdk_verifies(dir: &Path, doc: &Path, headers: &Value, body: Option<&[u8]>, scheme: &str) {
    let did = read_json(doc)["id"].as_str().unwrap().to_owned();
    let hdr = write_temp_json(dir, "headers.json", headers);
    let good = write_file(dir, "req.body", body.unwrap_or_default());
    let bad = write_file(dir, "req.bad.body", OTHER_BODY);
    let verify = |body: Option<&Path>, repeat: &str, code: i32| {
        let mut args = vec![
            "verify".as_ref(),
            "--did-doc".as_ref(),
            doc.as_os_str(),
            "--method".as_ref(),
            "POST".as_ref(),
            "--url".as_ref(),
            ANP_URL.as_ref(),
            "--headers".as_ref(),
            hdr.as_os_str(),
            "--repeat".as_ref(),
            repeat.as_ref(),
        ];
        if let Some(b) = body {
            args.extend(["--body".as_ref(), b.as_os_str()]);
        }
        python("anp_http.py", &args).expect(code).json()
    };
    let body_path = body.map(|_| good.as_path());

    let ok = verify(body_path, "1", 0);
    assert_eq!(ok["ok"], json!(true), "{ok}");
    assert_eq!(ok["did"], json!(did), "{ok}");
    assert_eq!(ok["auth_scheme"], json!(scheme), "{ok}");

    let replay = verify(body_path, "2", 1);
    assert_eq!(replay["attempts"][0]["ok"], json!(true), "{replay}");
    assert_eq!(replay["attempts"][1]["ok"], json!(false), "{replay}");
    let reason = replay["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("nonce"), "replay refused for {reason:?}");

    if body.is_some() {
        let tampered = verify(Some(&bad), "1", 1);
        let reason = tampered["reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains("Content-Digest"),
            "tampered body refused for {reason:?}"
        );
    }
}

#[test]
fn anp_requests_signed_by_agentnet_verify_in_the_sdk() {
    let dir = tempfile::tempdir().unwrap();
    let now = now_unix();

    // Our did:wba document (W3C-encoded eddsa-jcs-2022 proof) and the SDK's own, with its key.
    let ours = SecretKey::generate();
    let our_did = wba::did_for("agents.example", None, &["agents", "bob"], &ours.public()).unwrap();
    let our_doc = wba::document_for(&our_did, &ours, &httpsig::format_utc_timestamp(now));
    let our_doc = write_temp_json(dir.path(), "bob.json", &our_doc.to_json());
    let check = python(
        "anp_didwba.py",
        &["check".as_ref(), "--did-doc".as_ref(), our_doc.as_os_str()],
    )
    .expect(0)
    .json();
    assert_eq!(check["binding_ok"], json!(true), "{check}");
    assert_eq!(check["proof_ok"], json!(true), "{check}");

    let (sdk_doc, sdk_key) = sdk_did_wba(dir.path(), "carol");
    let jwk: Jwk = serde_json::from_value(read_json(&sdk_key)).unwrap();
    let sdk_key = SecretKey::from_jwk(&jwk).unwrap();
    let sdk_did = Did::parse(read_json(&sdk_doc)["id"].as_str().unwrap()).unwrap();

    for (key, did, doc) in [(&ours, &our_did, &our_doc), (&sdk_key, &sdk_did, &sdk_doc)] {
        let keyid = did.with_fragment("key-1");
        let signed = httpsig::sign(
            key,
            &keyid,
            "POST",
            ANP_URL,
            BODY,
            now,
            &httpsig::new_nonce(),
        )
        .unwrap();
        let headers = json!({
            "Signature-Input": signed.signature_input,
            "Signature": signed.signature,
            "Content-Digest": signed.content_digest,
        });
        sdk_verifies(dir.path(), doc, &headers, Some(BODY), "http_signatures");

        let auth = httpsig::sign_legacy(
            key,
            did,
            "key-1",
            ANP_DOMAIN,
            &httpsig::new_nonce(),
            &httpsig::format_utc_timestamp(now),
        );
        sdk_verifies(
            dir.path(),
            doc,
            &json!({"Authorization": auth}),
            None,
            "legacy_didwba",
        );
    }
}
