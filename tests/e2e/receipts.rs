//! Signed task receipts and the audit log (issue 18, part 2) through the real binary on
//! loopback: `agentnet call` verifies the receipt of the task it followed and its node logs
//! it; `agentnet audit verify` names a changed or removed entry; a `proxy` agent's receipt
//! names the receipt of the upstream task it ran, which the proxy's node logs.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common;
use common::*;

/// Longest wait for an advertisement to reach another node.
const PATIENCE: Duration = Duration::from_secs(60);

/// A node on loopback hosting the agents of `config`, with more flags `extra`.
fn start(dir: &Path, config: &str, extra: &[&str]) -> UpNode {
    let mut args = LOOPBACK.to_vec();
    args.extend_from_slice(extra);
    UpNode::with_config_args(dir, config, &args)
}

/// The node's public HTTP base URL.
fn http(n: &UpNode) -> String {
    n.http_url()
}

/// `agentnet call --skill <tag> <text> --json` from `dir`'s node, retried (bounded) while the
/// agent is not found yet.
fn call(dir: &Path, tag: &str, text: &str) -> Value {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let o = call_skill(dir, tag, text);
        if o.status.success() {
            return serde_json::from_str(stdout(&o).trim()).unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "call --skill {tag}: {}",
            stderr(&o)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn audit(dir: &Path) -> Value {
    json_of(&["audit", "--json", "--data-dir", p(dir)])
}

const ECHO: &str = r#"
[[agent]]
id = "echo"
kind = "echo"
tags = ["receipt-echo"]
"#;

/// One call, one entry: the receipt in the task's metadata verifies, names the task, the
/// agent and the caller, and the log holds it once; `audit verify` and an export check out.
/// Then, the node stopped, one byte of the stored entry is flipped (an attacker with the
/// disk): `audit verify` names entry 1 and exits non-zero; a removed entry is named too.
#[test]
fn a_call_logs_its_verified_receipt_and_verify_names_a_changed_entry() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("node");
    let node = start(&dir, ECHO, &[]);
    let me = node.info["did"].as_str().unwrap().to_string();

    let out = call(&dir, "receipt-echo", "hello receipts");
    let task = &out["result"]["task"];
    let task_id = task["id"].as_str().unwrap();
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{out}");
    let jws = task["metadata"]["signed-receipts/v1"]
        .as_str()
        .unwrap_or_else(|| panic!("no receipt in the task's metadata: {out}"));
    assert_eq!(out["receipt"]["status"], "logged", "{out}");

    // The receipt, checked here with the did crate, as any party would.
    let agent = out["did"].as_str().unwrap();
    let resolver = agentnet_did::Resolver::new(Default::default()).unwrap();
    let asked = agentnet_did::receipt::digest_json(&task["history"][0]);
    let expect = agentnet_did::receipt::Expected {
        task_id,
        agent,
        caller: Some(&me),
        message: Some(&asked),
    };
    let r = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(agentnet_did::receipt::verify(jws, &resolver, &expect))
        .expect("the receipt verifies");
    assert_eq!(r.state, "TASK_STATE_COMPLETED");
    assert_eq!(r.messages.len(), 1, "{r:?}");
    assert_eq!(r.artifacts.len(), 1, "{r:?}");

    let log = audit(&dir);
    let entries = log["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{log}");
    assert_eq!(entries[0]["taskId"], task_id);
    assert_eq!(entries[0]["agent"], agent);
    assert_eq!(entries[0]["caller"], json!(me));
    assert_eq!(entries[0]["receipt"], jws);
    assert_eq!(entries[0]["writer"], "call");
    let o = agentnet(&["audit", "verify", "--data-dir", p(&dir)]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));

    // Export, verified offline (no node needed).
    let file = tmp.path().join("audit.jsonl");
    let o = agentnet(&["audit", "export", p(&file), "--data-dir", p(&dir)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = agentnet(&[
        "audit",
        "verify",
        "--file",
        p(&file),
        "--data-dir",
        p(&tmp.path().join("none")),
    ]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));

    // A second call: two entries, chained.
    call(&dir, "receipt-echo", "again");
    let log = audit(&dir);
    let entries = log["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 2, "{log}");
    drop(node);

    // The attacker edits the stopped node's store: one byte of entry 1.
    {
        let (_store, log) = agentnet_node::audit::open_dir(&dir.join("store")).unwrap();
        let (_, mut bytes) = log.raw_page(0, 1).unwrap().remove(0);
        let at = bytes
            .windows(8)
            .position(|w| w == b"receipts")
            .expect("the request message is stored");
        bytes[at] = b'R';
        log.tamper(1, Some(bytes)).unwrap();
    }
    let o = agentnet(&["audit", "verify", "--json", "--data-dir", p(&dir)]);
    assert!(
        !o.status.success(),
        "a changed entry verified: {}",
        stdout(&o)
    );
    let report: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(report["badEntry"], json!(1), "{report}");
    let o = agentnet(&["audit", "verify", "--data-dir", p(&dir)]);
    assert!(stderr(&o).contains("audit entry 1"), "{}", stderr(&o));

    // The export taken before still verifies; one entry removed from it is named.
    let text = std::fs::read_to_string(&file).unwrap();
    let header = text.lines().next().unwrap();
    let cut = tmp.path().join("cut.jsonl");
    std::fs::write(&cut, format!("{header}\n")).unwrap();
    let o = agentnet(&["audit", "verify", "--file", p(&cut), "--json"]);
    assert!(!o.status.success(), "{}", stdout(&o));
    let report: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(report["badEntry"], json!(1), "{report}");
}

/// A caller's node (C) calls a `proxy` agent on node A whose upstream is an echo agent on node
/// B. A's proxy verifies B's receipt and logs it (A's log: writer `proxy`), and A's receipt
/// lists its digest in `subReceipts`; C's log entry holds A's receipt, which names it.
#[test]
fn a_proxy_s_receipt_names_the_upstream_receipt_its_node_logged() {
    let tmp = tempfile::tempdir().unwrap();
    let b = start(&tmp.path().join("b"), ECHO, &[]);
    let proxy = format!(
        r#"
[[agent]]
id = "via"
kind = "proxy"
upstream = "{}/a2a/echo"
allow_private = true
tags = ["receipt-proxy"]
"#,
        http(&b)
    );
    let a = start(&tmp.path().join("a"), &proxy, &[]);
    let a_addr = a.info["listen"][0].as_str().unwrap().to_string();
    let c = start(&tmp.path().join("c"), "", &["--bootstrap", &a_addr]);

    let out = call(&c.dir, "receipt-proxy", "through the proxy");
    assert_eq!(out["receipt"]["status"], "logged", "{out}");
    let c_log = audit(&c.dir);
    let c_entries = c_log["entries"].as_array().unwrap();
    assert_eq!(c_entries.len(), 1, "{c_log}");
    let subs = c_entries[0]["subReceipts"].as_array().unwrap();
    assert_eq!(
        subs.len(),
        1,
        "the proxy's receipt names one sub-receipt: {c_log}"
    );

    let a_log = audit(&a.dir);
    let a_entries = a_log["entries"].as_array().unwrap();
    assert_eq!(a_entries.len(), 1, "{a_log}");
    assert_eq!(a_entries[0]["writer"], "proxy");
    assert_eq!(a_entries[0]["receiptDigest"], subs[0], "{a_log}");
    assert_eq!(
        a_entries[0]["caller"], out["did"],
        "the proxy signs as its own DID (the agent C called)"
    );
    for n in [&a, &c] {
        let o = agentnet(&["audit", "verify", "--data-dir", p(&n.dir)]);
        assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    }
}

/// `interop/node/receipt.mjs`, an independent verifier (the did:key reference driver, `jose`,
/// `canonicalize`), checks the receipt of a task our hosted agent ran: the signature with the
/// key from the did:key, the payload's RFC 8785 bytes, and the task, agent and caller; and it
/// refuses the same receipt for another task and one with a changed payload byte.
#[test]
fn an_independent_jws_and_jcs_implementation_verifies_our_receipt() {
    let Some(js_dir) = interop_node_dir("canonicalize") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("node");
    let node = start(&dir, ECHO, &[]);
    let me = node.info["did"].as_str().unwrap().to_string();
    let out = call(&dir, "receipt-echo", "checked elsewhere");
    let task = &out["result"]["task"];
    let task_id = task["id"].as_str().unwrap();
    let agent = out["did"].as_str().unwrap();
    let jws = task["metadata"]["signed-receipts/v1"].as_str().unwrap();
    let verify = |jws: &str, task: &str| {
        let f = tmp.path().join("receipt.jws");
        std::fs::write(&f, jws).unwrap();
        let o = std::process::Command::new("node")
            .arg(js_dir.join("receipt.mjs"))
            .args([p(&f), task, agent, &me])
            .current_dir(&js_dir)
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)));
        (o.status.success(), v)
    };
    let (ok, v) = verify(jws, task_id);
    assert!(ok, "{v}");
    assert_eq!(v["payload"]["state"], "TASK_STATE_COMPLETED", "{v}");
    assert_eq!(v["payload"]["contextId"], task["contextId"], "{v}");
    let (ok, v) = verify(jws, "another-task");
    assert!(
        !ok && v["error"].as_str().unwrap().contains("another-task"),
        "{v}"
    );
    // One byte of the payload changed (its base64url): the signature no longer verifies.
    let forged = forge_payload(&jws, 10);
    let (ok, v) = verify(&forged, task_id);
    assert!(!ok, "{v}");
}

/// What a relay does to each answer's body before passing it on.
type Rewrite = std::sync::Arc<dyn Fn(String) -> String + Send + Sync>;

/// A relay in front of a node's public listener (the node's `public_url` names it, so its
/// agents' cards do): it forwards every request to `upstream` and passes each answer's body
/// through `rewrite`. The attacker on the path, or an agent lying about its work. Its port.
fn relay(upstream: std::sync::Arc<std::sync::Mutex<String>>, rewrite: Rewrite) -> u16 {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(l.local_addr().unwrap().port()).unwrap();
            let http = agentnet_did::http::client_builder()
                .no_proxy()
                .build()
                .unwrap();
            let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
                let (http, upstream, rewrite) = (http.clone(), upstream.clone(), rewrite.clone());
                async move {
                    let (parts, body) = req.into_parts();
                    let body = axum::body::to_bytes(body, 1 << 20).await.unwrap();
                    let url = format!(
                        "{}{}",
                        upstream.lock().unwrap(),
                        parts
                            .uri
                            .path_and_query()
                            .map(|p| p.as_str())
                            .unwrap_or("/")
                    );
                    let mut headers = parts.headers.clone();
                    headers.remove(http::header::HOST);
                    headers.remove(http::header::CONTENT_LENGTH);
                    let r = http
                        .request(parts.method, url)
                        .headers(headers)
                        .body(body)
                        .send()
                        .await
                        .unwrap();
                    let status = r.status();
                    let mut headers = r.headers().clone();
                    headers.remove(http::header::CONTENT_LENGTH);
                    headers.remove(http::header::TRANSFER_ENCODING);
                    let text = rewrite(r.text().await.unwrap());
                    let mut resp = axum::response::Response::new(axum::body::Body::from(text));
                    *resp.status_mut() = status;
                    *resp.headers_mut() = headers;
                    resp
                }
            });
            axum::serve(l, app).await.unwrap();
        });
    });
    rx.recv().unwrap()
}

/// The attacker replays the receipt of an earlier task (same agent, same caller, a valid
/// signature) as the receipt of a new one. `agentnet call` refuses it by name (a warning, and
/// `receipt.status = refused` in --json), the call itself succeeds, and nothing is logged.
#[test]
fn a_replayed_receipt_is_refused_and_not_logged() {
    use std::sync::{Arc, Mutex};
    let upstream = Arc::new(Mutex::new(String::new()));
    let replay: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
    let old_receipt = replay.clone();
    // Once `replay` holds a receipt, it takes the place of any receipt in the answers.
    let port = relay(
        upstream.clone(),
        Arc::new(move |text: String| {
            let Some(old) = old_receipt.lock().unwrap().clone() else {
                return text;
            };
            let key = "\"signed-receipts/v1\":\"";
            let mut out = String::new();
            let mut rest = text.as_str();
            while let Some(i) = rest.find(key) {
                let start = i + key.len();
                let end = start + rest[start..].find('"').unwrap();
                out.push_str(&rest[..start]);
                out.push_str(&old);
                rest = &rest[end..];
            }
            out.push_str(rest);
            out
        }),
    );
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("node");
    let config = format!("[node]\npublic_url = \"http://127.0.0.1:{port}\"\n{ECHO}");
    let node = start(&dir, &config, &[]);
    *upstream.lock().unwrap() = http(&node);

    let first = call(&dir, "receipt-echo", "first");
    assert_eq!(first["receipt"]["status"], "logged", "{first}");
    let old = first["result"]["task"]["metadata"]["signed-receipts/v1"]
        .as_str()
        .unwrap()
        .to_string();
    *replay.lock().unwrap() = Some(old.clone());

    let o = agentnet(&[
        "call",
        "--skill",
        "receipt-echo",
        "second",
        "--allow-private",
        "--json",
        "--data-dir",
        p(&dir),
    ]);
    assert!(
        o.status.success(),
        "the user's work does not fail: {}",
        stderr(&o)
    );
    let out: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(
        out["result"]["task"]["metadata"]["signed-receipts/v1"],
        old.as_str()
    );
    assert_ne!(out["result"]["task"]["id"], first["result"]["task"]["id"]);
    assert_eq!(out["receipt"]["status"], "refused", "{out}");
    let reason = out["receipt"]["reason"].as_str().unwrap();
    assert!(reason.contains("task id"), "{reason}");
    assert!(stderr(&o).contains("warning"), "{}", stderr(&o));
    let log = audit(&dir);
    assert_eq!(log["entries"].as_array().unwrap().len(), 1, "{log}");
}

/// Every task in `v` (an answer body, any binding) that carries a receipt: `forge` changes the
/// task and returns the user messages the new receipt lists, and the receipt is signed again
/// with `key` (the agent's own key: the agent lies, the signature is valid).
fn resign_receipts(
    v: &mut Value,
    key: &agentnet_did::SecretKey,
    forge: &dyn Fn(&mut Value) -> Vec<Value>,
) {
    use agentnet_did::receipt;
    match v {
        Value::Object(o) => {
            let jws = o
                .get("metadata")
                .and_then(|m| m.get(receipt::METADATA_KEY))
                .and_then(Value::as_str)
                .map(str::to_string);
            if let Some(jws) = jws {
                let parsed = receipt::parse(&jws).unwrap();
                let mut task = Value::Object(o.clone());
                let messages = forge(&mut task);
                let mut r = parsed.receipt;
                r.messages = messages.iter().map(receipt::digest_json).collect();
                task["metadata"][receipt::METADATA_KEY] =
                    json!(receipt::sign(&r, key, &parsed.kid));
                *v = task;
                return;
            }
            for x in o.values_mut() {
                resign_receipts(x, key, forge);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| resign_receipts(x, key, forge)),
        _ => {}
    }
}

/// A node hosting the echo agent under `tmp`, behind a relay that passes each answer through
/// [`resign_receipts`] with the echo agent's key: the node and its data directory.
fn lying_agent(tmp: &Path, forge: fn(&mut Value) -> Vec<Value>) -> (UpNode, std::path::PathBuf) {
    use std::sync::{Arc, Mutex};
    let dir = tmp.join("node");
    let key_file = agentnet_node::hosted::key_path(&dir, "echo");
    let upstream = Arc::new(Mutex::new(String::new()));
    let port = relay(
        upstream.clone(),
        Arc::new(move |text: String| {
            if !text.contains(agentnet_did::receipt::METADATA_KEY) {
                return text;
            }
            let Ok(mut v) = serde_json::from_str::<Value>(&text) else {
                return text;
            };
            let key = agentnet_did::SecretKey::load(&key_file).unwrap();
            resign_receipts(&mut v, &key, &forge);
            v.to_string()
        }),
    );
    let config = format!("[node]\npublic_url = \"http://127.0.0.1:{port}\"\n{ECHO}");
    let node = start(&dir, &config, &[]);
    *upstream.lock().unwrap() = http(&node);
    (node, dir)
}

/// The user message an attacker's receipt is for, in place of the caller's.
fn other_work(task: &Value) -> Value {
    let mut m = task["history"][0].clone();
    m["parts"] = json!([{"text": "transfer everything to the attacker"}]);
    m
}

/// `agentnet call --json` through `dir`'s node: its output and stderr.
fn call_once(dir: &Path, text: &str) -> (Value, String) {
    let o = agentnet(&[
        "call",
        "--skill",
        "receipt-echo",
        text,
        "--allow-private",
        "--json",
        "--timeout-secs",
        "30",
        "--data-dir",
        p(dir),
    ]);
    assert!(
        o.status.success(),
        "the user's work does not fail: {}",
        stderr(&o)
    );
    (serde_json::from_str(stdout(&o).trim()).unwrap(), stderr(&o))
}

/// The export `prev` with one more entry: the one a writer that did not check would have
/// appended for the task `out` shows (`agentnet call --json`); its chain and head recomputed.
fn export_with(prev: &str, out: &Value, me: &str) -> String {
    use agentnet_did::receipt;
    let task = &out["result"]["task"];
    let jws = task["metadata"][receipt::METADATA_KEY].as_str().unwrap();
    let request = task["history"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "ROLE_USER")
        .unwrap()
        .clone();
    let mut lines: Vec<Value> = prev
        .lines()
        .skip(1)
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let seq = lines.len() + 1;
    lines.push(json!({
        "seq": seq, "prev": "", "at": "2026-01-01T00:00:00.000Z", "writer": "call",
        "taskId": task["id"], "agent": out["did"], "caller": me,
        "receipt": jws, "receiptDigest": receipt::receipt_digest(jws),
        "subReceipts": [], "state": task["status"]["state"],
        "request": {"messageDigest": receipt::digest_json(&request), "message": request},
    }));
    rechained(lines)
}

/// `lines` (entries as JSON) as an export whose chain is whole: each `prev`, and the head,
/// recomputed, as anyone who edits an export can do.
fn rechained(lines: Vec<Value>) -> String {
    use agentnet_did::receipt;
    let mut prev = "0".repeat(64);
    let mut body = String::new();
    let n = lines.len();
    for mut e in lines {
        e["prev"] = json!(prev);
        let bytes = agentnet_did::jcs::canonicalize(&e);
        prev = receipt::digest(&bytes);
        body.push('\n');
        body.push_str(std::str::from_utf8(&bytes).unwrap());
    }
    format!(
        "{}{body}\n",
        json!({"format": "agentnet-audit/v1", "head": {"seq": n, "digest": prev}})
    )
}

/// `agentnet audit verify --file` on `text`: it must refuse it, naming entry `seq` and that its
/// receipt does not cover the request.
fn verify_refuses(tmp: &Path, text: &str, seq: u64) {
    let file = tmp.join(format!("edited-{seq}.jsonl"));
    std::fs::write(&file, text).unwrap();
    let o = agentnet(&["audit", "verify", "--file", p(&file), "--json"]);
    assert!(
        !o.status.success(),
        "an entry whose receipt covers other work verified: {}",
        stdout(&o)
    );
    let report: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(report["badEntry"], json!(seq), "{report}");
    let why = report["reason"].as_str().unwrap_or_default();
    assert!(why.contains("does not cover"), "{report}");
    let o = agentnet(&["audit", "verify", "--file", p(&file)]);
    assert!(
        stderr(&o).contains(&format!("audit entry {seq}")),
        "{}",
        stderr(&o)
    );
}

/// The agent answers the caller's message but returns a receipt, validly signed with its own
/// key, whose `messages` are the digest of another message (the task's history unchanged).
/// `agentnet call` refuses it by name and logs nothing; an export holding the entry that an
/// unchecking writer would have appended (chain recomputed) is refused by `audit verify`,
/// which names the entry.
#[test]
fn a_receipt_for_another_message_is_not_logged_and_verify_refuses_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (node, dir) = lying_agent(tmp.path(), |task| vec![other_work(task)]);
    let me = node.info["did"].as_str().unwrap().to_string();
    let (out, err) = call_once(&dir, "pay the invoice");
    let task = &out["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{out}");
    assert_eq!(task["history"][0]["parts"][0]["text"], "pay the invoice");
    assert_eq!(out["receipt"]["status"], "refused", "{out}");
    let reason = out["receipt"]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("does not cover the request"), "{reason}");
    assert!(err.contains("warning"), "{err}");
    assert!(!err.contains("receipt verified"), "{err}");
    let log = audit(&dir);
    assert_eq!(
        log["entries"].as_array().unwrap().len(),
        0,
        "a receipt for other work was logged: {log}"
    );
    let empty = "{\"format\":\"agentnet-audit/v1\"}\n";
    verify_refuses(tmp.path(), &export_with(empty, &out, &me), 1);
}

/// The agent also rewrites the task's history so that it holds the message its receipt is
/// for: the receipt covers the history, but not the message the caller sent. `agentnet call`
/// holds the history against what it sent, refuses the receipt and logs nothing.
#[test]
fn a_receipt_over_a_rewritten_history_is_not_logged() {
    let tmp = tempfile::tempdir().unwrap();
    let (_node, dir) = lying_agent(tmp.path(), |task| {
        let m = other_work(task);
        task["history"][0] = m.clone();
        vec![m]
    });
    let (out, err) = call_once(&dir, "pay the invoice");
    assert_eq!(out["receipt"]["status"], "refused", "{out}");
    let reason = out["receipt"]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("not the message sent"), "{reason}");
    assert!(err.contains("warning"), "{err}");
    let log = audit(&dir);
    assert_eq!(log["entries"].as_array().unwrap().len(), 0, "{log}");
}

/// Two honest entries; the export is edited by hand so that each entry's request is the
/// other's (the chain and head recomputed: no key needed). Each receipt is valid and names
/// its task, but covers the other request: `audit verify` refuses the export at entry 1.
/// Then entry 1's receipt is signed again by the agent over entry 2's messages: refused too.
#[test]
fn an_export_whose_receipts_and_requests_were_swapped_is_refused() {
    use agentnet_did::receipt;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("node");
    let _node = start(&dir, ECHO, &[]);
    call(&dir, "receipt-echo", "first request");
    call(&dir, "receipt-echo", "second request");
    let file = tmp.path().join("audit.jsonl");
    let o = agentnet(&["audit", "export", p(&file), "--data-dir", p(&dir)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .skip(1)
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{text}");
    // Recomputing the chain alone changes nothing a verifier objects to.
    let o = agentnet(&["audit", "verify", "--file", p(&file)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let same = tmp.path().join("same.jsonl");
    std::fs::write(&same, rechained(lines.clone())).unwrap();
    let o = agentnet(&["audit", "verify", "--file", p(&same)]);
    assert!(o.status.success(), "{}", stderr(&o));

    let mut swapped = lines.clone();
    swapped[0]["request"] = lines[1]["request"].clone();
    swapped[1]["request"] = lines[0]["request"].clone();
    verify_refuses(tmp.path(), &rechained(swapped), 1);

    // The agent's key signs entry 1's receipt again with entry 2's messages.
    let key =
        agentnet_did::SecretKey::load(&agentnet_node::hosted::key_path(&dir, "echo")).unwrap();
    let jws = lines[0]["receipt"].as_str().unwrap();
    let parsed = receipt::parse(jws).unwrap();
    let theirs = receipt::parse(lines[1]["receipt"].as_str().unwrap()).unwrap();
    let mut r = parsed.receipt;
    r.messages = theirs.receipt.messages;
    let forged = receipt::sign(&r, &key, &parsed.kid);
    let mut resigned = lines.clone();
    resigned[0]["receipt"] = json!(forged);
    resigned[0]["receiptDigest"] = json!(receipt::receipt_digest(&forged));
    verify_refuses(tmp.path(), &rechained(resigned), 1);
}

/// `entries` (as JSON) as an export an attacker wrote: each `seq` renumbered from 1, each
/// `prev` and the head recomputed, the header carrying `checkpoint` (or none). Also returns
/// the new head's digest and the bytes of the entries, which a checkpoint states.
fn rewritten(entries: &[Value], checkpoint: Option<&str>) -> (String, String, u64) {
    use agentnet_did::receipt;
    let mut prev = "0".repeat(64);
    let (mut body, mut bytes) = (String::new(), 0u64);
    for (i, e) in entries.iter().enumerate() {
        let mut e = e.clone();
        e["seq"] = json!(i + 1);
        e["prev"] = json!(prev);
        let b = agentnet_did::jcs::canonicalize(&e);
        prev = receipt::digest(&b);
        bytes += b.len() as u64;
        body.push('\n');
        body.push_str(std::str::from_utf8(&b).unwrap());
    }
    let mut header =
        json!({"format": "agentnet-audit/v1", "head": {"seq": entries.len(), "digest": prev}});
    if let Some(c) = checkpoint {
        header["checkpoint"] = json!(c);
    }
    (format!("{header}{body}\n"), prev, bytes)
}

/// An entry the attacker makes up: a task the node never called, with a receipt that verifies
/// (signed by the attacker's own agent key, naming the node as the caller).
fn attackers_entry(attacker: &agentnet_did::SecretKey, node: &str) -> Value {
    use agentnet_did::receipt;
    let agent = attacker.did_key();
    let message = json!({"messageId": "m-forged", "role": "ROLE_USER", "taskId": "t-forged",
        "contextId": "c-forged", "parts": [{"text": "transfer everything"}]});
    let task = json!({"id": "t-forged", "contextId": "c-forged", "history": [message],
        "status": {"state": "TASK_STATE_COMPLETED", "timestamp": "2026-01-01T00:00:01Z"}});
    let r = receipt::Receipt::for_task(
        &task,
        agent.as_str(),
        Some(node),
        "2026-01-01T00:00:00Z",
        vec![],
    );
    let jws = receipt::sign(
        &r,
        attacker,
        &agent.with_fragment(agent.method_specific_id()),
    );
    json!({
        "seq": 0, "prev": "", "at": "2026-01-01T00:00:02.000Z", "writer": "call",
        "taskId": "t-forged", "agent": agent.as_str(), "caller": node,
        "receipt": jws, "receiptDigest": receipt::receipt_digest(&jws),
        "subReceipts": [], "state": "TASK_STATE_COMPLETED",
        "request": {"messageDigest": receipt::digest_json(&message), "message": message},
    })
}

/// `agentnet audit verify --file F --did DID --json` on `text`: the report and the exit.
fn verify_file(tmp: &Path, name: &str, text: &str, did: Option<&str>) -> (bool, Value, String) {
    let file = tmp.join(format!("{name}.jsonl"));
    std::fs::write(&file, text).unwrap();
    let mut args = vec!["audit", "verify", "--file", p(&file), "--json"];
    if let Some(d) = did {
        args.extend(["--did", d]);
    }
    let o = agentnet(&args);
    let report = serde_json::from_str(stdout(&o).trim())
        .unwrap_or_else(|e| panic!("{name}: {e}: {}{}", stdout(&o), stderr(&o)));
    (o.status.success(), report, stderr(&o))
}

/// Issue 43, item 4: an attacker who holds the node's export edits it (an entry cut from the
/// end, one removed from the middle, two swapped, one replaced by an entry of its own whose
/// receipt verifies), recomputes every `prev` and the head, and signs a new checkpoint with
/// its own key (or keeps the node's). `agentnet audit verify --file F --did <node DID>`
/// refuses each, saying why; the untouched export passes. Without `--did` the re-signed file
/// is only reported self-consistent, and the report says so.
#[test]
fn an_edited_export_is_refused_against_the_node_s_did() {
    use agentnet_did::checkpoint::{self, Checkpoint};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("node");
    let node = start(&dir, ECHO, &[]);
    let did = node.info["did"].as_str().unwrap().to_string();
    for i in 0..4 {
        call(&dir, "receipt-echo", &format!("request {i}"));
    }
    let file = tmp.path().join("audit.jsonl");
    let o = agentnet(&["audit", "export", p(&file), "--data-dir", p(&dir)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(&file).unwrap();

    // The untouched export verifies against the node's DID.
    let (ok, report, err) = verify_file(tmp.path(), "untouched", &text, Some(&did));
    assert!(ok, "the node's own export was refused: {report} {err}");
    assert_eq!(report["entries"], json!(4), "{report}");
    assert_eq!(report["signedBy"], json!(did), "{report}");
    let o = agentnet(&["audit", "verify", "--file", p(&file), "--did", &did]);
    assert!(o.status.success(), "{}", stderr(&o));

    let header: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let nodes_checkpoint = header["checkpoint"].as_str().expect("a signed checkpoint");
    let e: Vec<Value> = text
        .lines()
        .skip(1)
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(e.len(), 4);
    let attacker = agentnet_did::SecretKey::from_seed(&[66; 32]);
    let forged = attackers_entry(&attacker, &did);
    let edits: Vec<(&str, Vec<Value>)> = vec![
        ("cut", e[..3].to_vec()),
        ("removed", vec![e[0].clone(), e[2].clone(), e[3].clone()]),
        (
            "swapped",
            vec![e[0].clone(), e[2].clone(), e[1].clone(), e[3].clone()],
        ),
        (
            "replaced",
            vec![e[0].clone(), forged.clone(), e[2].clone(), e[3].clone()],
        ),
    ];
    let mallory = attacker.did_key();
    let kid = mallory.with_fragment(mallory.method_specific_id());
    for (what, entries) in edits {
        // The node's checkpoint kept: the chain does not end where it says.
        let (edited, digest, bytes) = rewritten(&entries, Some(nodes_checkpoint));
        let (ok, report, _) = verify_file(tmp.path(), what, &edited, Some(&did));
        assert!(!ok, "{what}: an edited export verified: {report}");
        let why = report["reason"].as_str().unwrap_or_default();
        assert!(why.contains("does not end where"), "{what}: {report}");

        // The checkpoint re-signed with the attacker's key over the new head.
        let c = Checkpoint::new(
            mallory.as_str(),
            entries.len() as u64,
            &digest,
            bytes,
            "2026-01-01T00:00:03.000Z",
        );
        let (resigned, _, _) = rewritten(&entries, Some(&checkpoint::sign(&c, &attacker, &kid)));
        let name = format!("{what}-resigned");
        let (ok, report, _) = verify_file(tmp.path(), &name, &resigned, Some(&did));
        assert!(
            !ok,
            "{what}: an export re-signed by another key verified: {report}"
        );
        let why = report["reason"].as_str().unwrap_or_default();
        assert!(
            why.contains("another key") && why.contains(&did),
            "{what}: {report}"
        );
        // Without --did the file only proves itself, and the report says so.
        let (ok, report, err) = verify_file(tmp.path(), &name, &resigned, None);
        assert!(ok, "{what}: {report} {err}");
        let note = report["note"].as_str().unwrap_or_default();
        assert!(note.contains("self-consistent"), "{what}: {report}");

        // No checkpoint at all: refused against the node's DID.
        let (bare, _, _) = rewritten(&entries, None);
        let (ok, report, _) = verify_file(tmp.path(), &format!("{what}-bare"), &bare, Some(&did));
        assert!(!ok, "{what}: an unsigned export verified: {report}");
        let why = report["reason"].as_str().unwrap_or_default();
        assert!(why.contains("no signed checkpoint"), "{what}: {report}");
    }
    // The refusal on the terminal says what is wrong.
    let (resigned, _, _) = rewritten(&e[..3], None);
    let cut = tmp.path().join("cut-text.jsonl");
    std::fs::write(&cut, resigned).unwrap();
    let o = agentnet(&["audit", "verify", "--file", p(&cut), "--did", &did]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("no signed checkpoint"),
        "{}",
        stderr(&o)
    );
    drop(node);
}

/// `SendMessage` of `text` to the A2A endpoint `url`, anonymously, from the loopback address
/// `from` (any 127.0.0.0/8 address binds on Linux): a stranger's call.
fn stranger_sends(from: &str, url: &str, text: &str) -> Value {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": {"role": "ROLE_USER", "parts": [{"text": text}],
            "messageId": format!("m-stranger-{n}")}}});
    let (status, answer) = post_a2a_from(from, url, body.to_string());
    assert_eq!(status, 200);
    answer
}

/// Issue 43, item 4: strangers (anonymous callers from four network blocks) call a hosted
/// `proxy` agent until the entries it writes on their behalf fill strangers' share of the
/// audit log (lowered in `[audit]` so that a few dozen calls do it). Their further entries are
/// refused, with a log line; the share is never exceeded; a stranger's large message is kept
/// as its digest only. The operator's own `agentnet call` afterwards still gets its receipt
/// logged, and the log verifies against the node's DID.
#[test]
fn strangers_fill_only_their_share_and_the_operator_s_receipts_are_still_logged() {
    let tmp = tempfile::tempdir().unwrap();
    let b = start(&tmp.path().join("b"), ECHO, &[]);
    let b_addr = b.info["listen"][0].as_str().unwrap().to_string();
    let share_kib = 16;
    let config = format!(
        r#"
[audit]
strangers_kib = {share_kib}
strangers_per_owner_kib = 8
strangers_per_source_kib = 8

[[agent]]
id = "via"
kind = "proxy"
policy = "open"
upstream = "{}/a2a/echo"
allow_private = true
publish = false
"#,
        http(&b)
    );
    let checked = tmp.path().join("a.toml");
    std::fs::write(&checked, &config).unwrap();
    let o = agentnet(&["config", "check", "--config", p(&checked)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let a = start(&tmp.path().join("a"), &config, &["--bootstrap", &b_addr]);
    let did = a.info["did"].as_str().unwrap().to_string();
    let url = format!("{}/a2a/via", http(&a));

    // A stranger's 40 KiB message: its entry keeps the digest.
    let big = "x".repeat(40 << 10);
    let v = stranger_sends("127.0.0.2", &url, &big);
    assert!(v.get("error").is_none(), "{v}");
    for i in 0..40 {
        let from = format!("127.0.0.{}", 2 + i % 4);
        let v = stranger_sends(&from, &url, &format!("stranger call {i}"));
        assert!(v.get("error").is_none(), "{v}");
    }
    let log = audit(&a.dir);
    let entries = log["entries"].as_array().unwrap();
    let strangers: Vec<&Value> = entries
        .iter()
        .filter(|e| e.get("onBehalf").is_some())
        .collect();
    assert!(
        !strangers.is_empty(),
        "no stranger's entry was logged: {log}"
    );
    assert!(
        strangers.len() < 41,
        "every stranger's entry was logged: the share did not bound them"
    );
    let bytes: usize = strangers
        .iter()
        .map(|e| agentnet_did::jcs::canonicalize(e).len())
        .sum();
    assert!(
        bytes <= share_kib << 10,
        "strangers' entries hold {bytes} bytes, over their {share_kib} KiB share"
    );
    let first = strangers[0];
    assert_eq!(first["request"]["message"], Value::Null, "{first}");
    assert_eq!(first["request"]["omitted"], "too large", "{first}");
    assert!(
        a.log()
            .contains("audit entry on behalf of a remote caller refused"),
        "no log line says a stranger's entry was refused: {}",
        a.log()
    );

    // With the share full, a stranger's next call is refused before the proxy calls its
    // upstream: the upstream node does no work the proxy could not log.
    let upstream_tasks =
        || json_of(&["status", "--json", "--data-dir", p(&b.dir)])["tasks"]["total"].clone();
    let before = upstream_tasks();
    assert!(before.as_u64().is_some_and(|n| n > 0), "{before}");
    let v = stranger_sends("127.0.0.3", &url, "one more stranger call");
    let task = &v["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_REJECTED", "{v}");
    assert!(
        task["status"]["message"]
            .to_string()
            .contains("not taking more work"),
        "{v}"
    );
    assert_eq!(
        upstream_tasks(),
        before,
        "the upstream was called for a refused stranger"
    );

    // The operator's own call is logged all the same.
    let out = call(&a.dir, "receipt-echo", "the operator's own call");
    assert_eq!(out["receipt"]["status"], "logged", "{out}");
    let log = audit(&a.dir);
    let last = log["entries"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["writer"], "call", "{last}");
    assert!(last.get("onBehalf").is_none(), "{last}");
    let o = agentnet(&["audit", "verify", "--did", &did, "--data-dir", p(&a.dir)]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
}
