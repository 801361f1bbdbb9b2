//! Signed task receipts and the audit log (issue 18, part 2) through the real binary on
//! loopback: `agentnet call` verifies the receipt of the task it followed and its node logs
//! it; `agentnet audit verify` names a changed or removed entry; a `proxy` agent's receipt
//! names the receipt of the upstream task it ran, which the proxy's node logs.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

mod common;
use common::*;

/// Longest wait for an advertisement to reach another node.
const PATIENCE: Duration = Duration::from_secs(60);

fn start(dir: &Path, config: &str, extra: &[&str]) -> UpNode {
    std::fs::create_dir_all(dir).unwrap();
    let cfg = dir.join("node.toml");
    std::fs::write(&cfg, config).unwrap();
    let mut args = vec!["--config", p(&cfg)];
    args.extend_from_slice(&LOOPBACK);
    args.extend_from_slice(extra);
    UpNode::spawn(dir, &args)
}

fn http(n: &UpNode) -> String {
    format!("http://{}", n.info["http"].as_str().unwrap())
}

/// `agentnet call --skill <tag> <text> --json` from `dir`'s node, retried (bounded) while the
/// agent is not found yet.
fn call(dir: &Path, tag: &str, text: &str) -> Value {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let o = agentnet(&[
            "call",
            "--skill",
            tag,
            text,
            "--allow-private",
            "--json",
            "--timeout-secs",
            "30",
            "--data-dir",
            p(dir),
        ]);
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
    let expect = agentnet_did::receipt::Expected {
        task_id,
        agent,
        caller: Some(&me),
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
    let Some(js_dir) = interop_node_dir() else {
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
    let parts: Vec<&str> = jws.split('.').collect();
    let mut payload = parts[1].to_string().into_bytes();
    payload[10] = if payload[10] == b'A' { b'B' } else { b'A' };
    let forged = format!(
        "{}.{}.{}",
        parts[0],
        String::from_utf8(payload).unwrap(),
        parts[2]
    );
    let (ok, v) = verify(&forged, task_id);
    assert!(!ok, "{v}");
}

/// A relay in front of a node's public listener (the node's `public_url` names it, so its
/// agents' cards do): it forwards every request to `upstream` and, once `replay` holds a
/// receipt, puts that receipt in place of any receipt in the answers. The attacker on the
/// path, or an agent lying about its work. Its port.
fn relay(
    upstream: std::sync::Arc<std::sync::Mutex<String>>,
    replay: std::sync::Arc<std::sync::Mutex<Option<String>>>,
) -> u16 {
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
                let (http, upstream, replay) = (http.clone(), upstream.clone(), replay.clone());
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
                    let mut text = r.text().await.unwrap();
                    if let Some(old) = replay.lock().unwrap().clone() {
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
                        text = out;
                    }
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
    let replay = Arc::new(Mutex::new(None));
    let port = relay(upstream.clone(), replay.clone());
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
