//! End to end with the real binary: `agentnet up --config node.toml` hosting A2A agents,
//! called by the official Python SDK client (a2a-sdk) over both bindings, anonymously and with
//! requests signed by the official ANP SDK (PyPI `anp`), and by the official JavaScript SDK
//! client (`@a2a-js/sdk`); tasks surviving a killed node.
//!
//! Needs the interop venv (`bash interop/setup.sh`); fails (never skips) without it. The JS
//! test needs `node` and `interop/node/node_modules`: without them it skips, except under
//! `scripts/test.sh` (`AGENTNET_INTEROP_REQUIRED`), where it fails.

use crate::common;
#[path = "../../a2a/tests/common/sdk_client.rs"]
mod sdk_client;

use std::path::{Path, PathBuf};
use std::process::Command;

use agentnet_did::{httpsig, SecretKey};
use common::{agentnet, json_of, p, stderr, stdout};
use serde_json::{json, Value};

const CONFIG: &str = r#"
[node]
mdns = false
listen = ["/ip4/127.0.0.1/tcp/0"]

[[agent]]
id = "echo"
kind = "echo"
tags = ["e2e-echo"]

[[agent]]
id = "ask"
kind = "ask"
work_ms = 300
publish = false

[[agent]]
id = "open-echo"
kind = "echo"
policy = "open"
publish = false

[[agent]]
id = "open-ask"
kind = "ask"
policy = "open"
work_ms = 300
publish = false
"#;

// A running `agentnet up --config`.
use common::UpNode as Node;

/// What this module adds to the shared [`Node`] fixture.
trait A2aNodeExt {
    fn start(dir: &Path) -> Node;
    fn start_with(dir: &Path, config: &str) -> Node;
    fn start_args(dir: &Path, config: &str, extra: &[&str]) -> Node;
    fn agent(&self, id: &str) -> String;
}

impl A2aNodeExt for Node {
    /// `agentnet up --config <dir>/node.toml --http 127.0.0.1:0` (the flag overrides the file).
    fn start(dir: &Path) -> Node {
        Node::start_with(dir, CONFIG)
    }

    /// [`Node::start`] with `config` as the configuration file.
    fn start_with(dir: &Path, config: &str) -> Node {
        Node::start_args(dir, config, &[])
    }

    /// [`Node::start_with`], with more flags for `agentnet up`.
    fn start_args(dir: &Path, config: &str, extra: &[&str]) -> Node {
        let mut args = vec!["--http", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        Node::with_config_args(dir, config, &args)
    }

    /// The A2A endpoint of the hosted agent `id`.
    fn agent(&self, id: &str) -> String {
        format!("{}/a2a/{id}", self.http_url())
    }
}

fn python() -> PathBuf {
    let py = common::venv_python();
    assert!(
        py.is_file(),
        "no interop venv at {}; run bash interop/setup.sh",
        py.display()
    );
    py
}

/// A caller identity: a did:key with its key file and DID document on disk.
fn caller(dir: &Path) -> (SecretKey, PathBuf, PathBuf) {
    let home = dir.join("caller");
    let out = json_of(&["init", "--data-dir", p(&home), "--json"]);
    let did = out["did"].as_str().unwrap();
    let resolved = json_of(&["resolve", did, "--json"]);
    let doc = dir.join("caller-doc.json");
    std::fs::write(&doc, resolved["didDocument"].to_string()).unwrap();
    let key_file = PathBuf::from(out["keyFile"].as_str().unwrap());
    (SecretKey::load(&key_file).unwrap(), key_file, doc)
}

#[test]
fn python_sdk_calls_hosted_agents_anonymously_and_signed_by_anp() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(&dir.path().join("node"));
    let (_, key, doc) = caller(dir.path());
    let script = std::path::PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("interop/python/a2a_node_client.py");
    for binding in ["JSONRPC", "HTTP+JSON"] {
        let runs: [(&str, &str, Vec<&str>); 3] = [
            ("open-echo", "open-ask", vec![]),
            ("echo", "ask", vec!["--did-doc", p(&doc), "--key", p(&key)]),
            ("echo", "ask", vec!["--expect-401"]),
        ];
        for (echo, ask, extra) in runs {
            let out = Command::new(python())
                .arg(&script)
                .args([&node.agent(echo), &node.agent(ask), binding])
                .args(&extra)
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "{binding} {echo} {extra:?}: {text}\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let v: Value = serde_json::from_str(text.trim()).unwrap();
            let want = if binding == "JSONRPC" {
                "JsonRpcTransport"
            } else {
                "RestTransport"
            };
            assert_eq!(v["transport"], want, "{v}");
            let n = if extra.contains(&"--expect-401") {
                2
            } else {
                7
            };
            assert_eq!(v["checks"].as_array().unwrap().len(), n, "{v}");
        }
    }

    // The hosted echo agent was published: discovery by its skill finds its signed card, whose
    // interfaces point at the node.
    let found = json_of(&[
        "discover",
        "--skill",
        "e2e-echo",
        "--json",
        "--data-dir",
        p(&node.dir),
    ]);
    let card = &found[0]["card"];
    assert_eq!(
        card["supportedInterfaces"][0]["url"],
        node.agent("echo"),
        "{found}"
    );
    let served: Value = reqwest_blocking(&format!(
        "{}/.well-known/agent-card.json",
        node.agent("echo")
    ));
    assert_eq!(&served, card);
}

fn reqwest_blocking(url: &str) -> Value {
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        agentnet_did::http::get(url)
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    })
}

/// A signed `SendMessage` of `text` (message id `m-1`) to `url`: the id of the task it made.
fn new_task(key: &SecretKey, url: &str, text: &str) -> String {
    let msg =
        json!({"message": {"role": "ROLE_USER", "parts": [{"text": text}], "messageId": "m-1"}});
    let v = signed_rpc(key, url, "SendMessage", msg);
    v["result"]["task"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{v}"))
        .to_string()
}

/// POST a signed JSON-RPC request.
fn signed_rpc(key: &SecretKey, url: &str, method: &str, params: Value) -> Value {
    let body =
        serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
            .unwrap();
    let did = key.did_key();
    let kid = did.with_fragment(did.method_specific_id());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let h = httpsig::sign(key, &kid, "POST", url, &body, now, &httpsig::new_nonce()).unwrap();
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        agentnet_did::http::client()
            .post(url)
            .header("content-type", "application/a2a+json")
            .header("A2A-Version", "1.0")
            .header("content-digest", h.content_digest)
            .header("signature-input", h.signature_input)
            .header("signature", h.signature)
            .body(body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    })
}

#[test]
fn tasks_survive_a_killed_node() {
    let dir = tempfile::tempdir().unwrap();
    let node_dir = dir.path().join("node");
    let (key, _, _) = caller(dir.path());
    let node = Node::start(&node_dir);
    let id = new_task(&key, &node.agent("echo"), "remember me");
    let card_before = reqwest_blocking(&format!(
        "{}/.well-known/agent-card.json",
        node.agent("echo")
    ));
    // SIGKILL: no flush, no clean shutdown.
    drop(node);
    let node = Node::start(&node_dir);
    let v = signed_rpc(&key, &node.agent("echo"), "GetTask", json!({"id": id}));
    assert_eq!(
        v["result"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{v}"
    );
    assert_eq!(
        v["result"]["artifacts"][0]["parts"][0]["text"],
        "remember me"
    );
    // The agent keeps its identity across restarts.
    let card_after = reqwest_blocking(&format!(
        "{}/.well-known/agent-card.json",
        node.agent("echo")
    ));
    assert_eq!(
        card_before["signatures"][0]["protected"], card_after["signatures"][0]["protected"],
        "same kid"
    );
    // A bad config is refused with the key named.
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[[agent]]\nid = \"x\"\nkind = \"echo\"\ncolour = \"red\"\n",
    )
    .unwrap();
    let o = agentnet(&[
        "up",
        "--config",
        p(&bad),
        "--data-dir",
        p(&dir.path().join("bad")),
    ]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("colour"),
        "{}{}",
        stdout(&o),
        stderr(&o)
    );
}

/// Issue 15's critical attack, on disk: a task record the store wrote and cannot read back
/// (JSON nested past serde_json's 128 levels, as one message 124 levels deep made it), left
/// `WORKING` by a stopped node. Before the quarantine `agentnet up` refused to start ("corrupt
/// task record ...: recursion limit exceeded") and the owner's `ListTasks` answered 500. Now
/// the node starts, the record is quarantined (logged), `GetTask` finds no such task, and the
/// owner's other tasks are listed.
#[test]
fn an_unreadable_task_record_does_not_stop_the_node() {
    use agentnet_a2a::auth::Owner;
    use agentnet_a2a::store::TaskStore;
    let dir = tempfile::tempdir().unwrap();
    let node_dir = dir.path().join("node");
    let (key, _, _) = caller(dir.path());
    let node = Node::start(&node_dir);
    let kept = new_task(&key, &node.agent("echo"), "keep me");
    drop(node);
    {
        // The stopped node's store, opened with the library: an unreadable running task of
        // the same caller at the same agent.
        let (store, db) = agentnet_node::hosted::tasks::open_dir(
            &node_dir.join(agentnet_node::db::STORE_DIR),
            Default::default(),
        )
        .unwrap();
        let mut deep = Value::Null;
        for _ in 0..200 {
            deep = Value::Array(vec![deep]);
        }
        let task: agentnet_a2a::types::Task = serde_json::from_value(json!({
            "id": "deep-task",
            "contextId": "c",
            "status": {"state": "TASK_STATE_WORKING", "timestamp": "2026-01-01T00:00:00Z"},
        }))
        .unwrap();
        db.agent("echo")
            .put(&Owner::Caller(key.did_key().to_string()), &task)
            .unwrap();
        // The store refuses to write a record it could not read back, so the record is made
        // unreadable under it: its bytes replaced by the task nested past serde_json's limit.
        let mut record = serde_json::to_value(&task).unwrap();
        record["metadata"] = json!({"x": deep});
        let bytes = serde_json::to_vec(&record).unwrap();
        let tasks = store
            .family(agentnet_node::hosted::tasks::CF_TASKS)
            .unwrap();
        let mut keys = Vec::new();
        tasks
            .scan(b"", &[0xff; 8], 1000, |k, _| {
                if k.ends_with(b"deep-task") {
                    keys.push(k.to_vec());
                }
                true
            })
            .unwrap();
        assert_eq!(keys.len(), 1, "the record's key");
        tasks
            .write(vec![agentnet_discovery::store::FamilyOp::Put(
                keys.remove(0),
                bytes,
            )])
            .unwrap();
        store.flush().unwrap();
    }
    let node = Node::start(&node_dir);
    assert!(
        node.log().contains("quarantined"),
        "the quarantine is logged: {}",
        node.log()
    );
    let v = signed_rpc(
        &key,
        &node.agent("echo"),
        "GetTask",
        json!({"id": "deep-task"}),
    );
    assert_eq!(v["error"]["code"], -32001, "not found: {v}");
    let v = signed_rpc(&key, &node.agent("echo"), "ListTasks", json!({}));
    let ids: Vec<_> = v["result"]["tasks"]
        .as_array()
        .unwrap_or_else(|| panic!("{v}"))
        .iter()
        .map(|t| t["id"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(ids, [kept], "{v}");
    // And it serves new work.
    let msg =
        json!({"message": {"role": "ROLE_USER", "parts": [{"text": "after"}], "messageId": "m-2"}});
    let v = signed_rpc(&key, &node.agent("echo"), "SendMessage", msg);
    assert_eq!(
        v["result"]["task"]["artifacts"][0]["parts"][0]["text"], "after",
        "{v}"
    );
}

/// POST an unsigned JSON-RPC request from the loopback address `from` (127.0.0.0/8: each
/// address is its own network block); the HTTP status and the answer.
fn rpc_from(from: [u8; 4], url: &str, method: &str, params: Value) -> (u16, Value) {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let from = std::net::IpAddr::from(from).to_string();
    common::post_a2a_from(&from, url, body.to_string())
}

/// Issue 15, "Task bytes and disk" and "ListTasks amplification", against the binary over HTTP.
/// One network block sends ~900 KiB messages to an open echo agent: the store charges their
/// bytes to the block and refuses more past `max_per_source_mib` (before, it counted tasks
/// only and one client grew the store 39 MB/s); another block is still served. Then a signed
/// caller's eight ~900 KiB tasks, listed with `pageSize=100`, `historyLength=100` and
/// artifacts: a page stops at 4 MiB of records with a `nextPageToken` (before, one 400 MB
/// answer), and paging returns every task once.
#[test]
fn task_bytes_are_bounded_per_source_and_list_pages_by_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let node_dir = dir.path().join("node");
    let (key, _, _) = caller(dir.path());
    let config = format!("{CONFIG}\n[tasks]\nmax_per_source_mib = 16\n");
    let node = Node::start_with(&node_dir, &config);
    let big = |n: usize| {
        json!({"message": {"role": "ROLE_USER", "parts": [{"text": "z".repeat(900 << 10)}],
               "messageId": format!("m-{n}")}})
    };
    let mut refused = None;
    for n in 0..30 {
        let (status, v) = rpc_from(
            [127, 0, 0, 2],
            &node.agent("open-echo"),
            "SendMessage",
            big(n),
        );
        if v["error"]["code"] == -32000 || status == 429 {
            refused = Some((n, v));
            break;
        }
        assert!(v["result"]["task"]["id"].is_string(), "{status} {v}");
    }
    let (n, v) = refused.expect("a block's bytes are bounded");
    assert!(
        (6..=12).contains(&n),
        "refused after {n} tasks of 900 KiB: {v}"
    );
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("max_per_source_mib"),
        "{v}"
    );
    let (status, v) = rpc_from(
        [127, 0, 0, 3],
        &node.agent("open-echo"),
        "SendMessage",
        big(99),
    );
    assert!(
        v["result"]["task"]["id"].is_string(),
        "another block is served: {status} {v}"
    );

    let mut ids = Vec::new();
    for n in 0..8 {
        let v = signed_rpc(&key, &node.agent("echo"), "SendMessage", big(100 + n));
        ids.push(
            v["result"]["task"]["id"]
                .as_str()
                .unwrap_or_else(|| panic!("{v}"))
                .to_string(),
        );
    }
    let mut seen = Vec::new();
    let mut token = String::new();
    let mut pages = 0;
    loop {
        pages += 1;
        assert!(pages <= 8, "paging ends");
        let v = signed_rpc(
            &key,
            &node.agent("echo"),
            "ListTasks",
            json!({"pageSize": 100, "historyLength": 100, "includeArtifacts": true, "pageToken": token}),
        );
        let tasks = v["result"]["tasks"]
            .as_array()
            .unwrap_or_else(|| panic!("{v}"));
        assert!(
            !tasks.is_empty() && tasks.len() <= 3,
            "{} tasks in a page",
            tasks.len()
        );
        for t in tasks {
            assert_eq!(
                t["artifacts"][0]["parts"][0]["text"].as_str().map(str::len),
                Some(900 << 10)
            );
            seen.push(t["id"].as_str().unwrap().to_string());
        }
        token = v["result"]["nextPageToken"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if token.is_empty() {
            break;
        }
    }
    assert!(pages >= 3, "{pages} pages");
    seen.sort();
    ids.sort();
    assert_eq!(seen, ids, "every task once");
}

/// The official JavaScript SDK's client (`@a2a-js/sdk` 1.3.0, `interop/node/a2a_client.mjs`)
/// against the binary's hosted agents, over both bindings: the card fetched from the node,
/// send, get, list, unknown task, cancel, stream, the INPUT_REQUIRED round (a second message
/// with the task's id), subscribe and the lifecycle errors, checked by the same helper as the
/// a2a crate's interop tests. Twice per binding: anonymously against `open` agents (where the
/// list is empty: anonymous tasks are reachable by id only), and against `did` agents with
/// every request signed with a did:key (RFC 9421, by the script's fetch wrapper: the JS SDK
/// has no DID signing), where the list holds the caller's tasks.
#[test]
fn js_sdk_client_calls_hosted_agents_over_both_bindings() {
    let Some(js_dir) = common::interop_node_dir("@a2a-js/sdk") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start_with(
        &dir.path().join("node"),
        r#"
[node]
mdns = false
listen = ["/ip4/127.0.0.1/tcp/0"]

[[agent]]
id = "echo"
kind = "echo"
policy = "open"
publish = false

[[agent]]
id = "ask-name"
kind = "ask"
policy = "open"
work_ms = 500
publish = false

[[agent]]
id = "did-echo"
name = "echo"
kind = "echo"
publish = false

[[agent]]
id = "did-ask"
kind = "ask"
work_ms = 500
publish = false
"#,
    );
    let base = format!("http://{}/a2a", node.info["http"].as_str().unwrap());
    let key = SecretKey::generate();
    let did = key.did_key();
    let kid = did.with_fragment(did.method_specific_id()).to_string();
    let seed: String = key.seed().iter().map(|b| format!("{b:02x}")).collect();
    let rt = tokio::runtime::Runtime::new().unwrap();
    for (binding, transport) in [
        ("JSONRPC", "JsonRpcTransport"),
        ("HTTP+JSON", "_RestTransport"),
    ] {
        let runs: [(&str, &str, Vec<&str>); 2] = [
            ("echo", "ask-name", vec!["--anonymous"]),
            ("did-echo", "did-ask", vec!["--sign", &seed, &kid]),
        ];
        for (echo, ask, who) in runs {
            let mut cmd = tokio::process::Command::new("node");
            cmd.current_dir(&js_dir)
                .arg("a2a_client.mjs")
                .arg(&base)
                .arg(binding)
                .args(&who)
                .env("A2A_ECHO", echo)
                .env("A2A_ASK", ask);
            let what = format!("{binding} {}", who[0]);
            rt.block_on(sdk_client::assert_sdk_client_passes(cmd, &what, transport));
        }
    }
}

/// Serve `doc` to every GET on `listener` (plain HTTP/1.1, one request per connection); counts
/// the requests for `path`.
fn serve_document(
    listener: std::net::TcpListener,
    path: String,
    doc: Vec<u8>,
) -> std::sync::Arc<std::sync::atomic::AtomicUsize> {
    use std::io::{Read, Write};
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let h = hits.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut req = Vec::new();
            let mut buf = [0u8; 1024];
            while !req.windows(4).any(|w| w == b"\r\n\r\n") && req.len() < 16 * 1024 {
                match conn.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => req.extend_from_slice(&buf[..n]),
                }
            }
            let line = String::from_utf8_lossy(&req);
            let ok = line.starts_with(&format!("GET {path} "));
            if ok {
                h.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            let (status, body) = if ok {
                ("200 OK", doc.as_slice())
            } else {
                ("404 Not Found", &b""[..])
            };
            let _ = write!(
                conn,
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = conn.write_all(body);
        }
    });
    hits
}

/// `agentnet up` takes the resolver flags of `resolve` and `call`: without them its verifier
/// refuses a caller whose did:web document is on loopback (as on a public node, where that would
/// let callers make it fetch from its own host); with `--allow-http-loopback` (a local
/// testnet's setting) the same signed call is verified against the document, fetched from the
/// test's server.
#[test]
fn up_resolves_did_web_callers_on_loopback_only_with_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let node_dir = dir.path().join("node");
    let docs = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = docs.local_addr().unwrap().port();
    let id = json_of(&[
        "identity",
        "new",
        "--web",
        &format!("127.0.0.1%3A{port}:users:me"),
        "--data-dir",
        p(&node_dir),
        "--json",
    ]);
    let did = id["did"].as_str().unwrap().to_string();
    let doc = std::fs::read(id["documentFile"].as_str().unwrap()).unwrap();
    let hits = serve_document(docs, "/users/me/did.json".into(), doc);
    let call = |as_did: Option<&str>| {
        let mut args = vec![
            "call",
            "--skill",
            "e2e-echo",
            "hello",
            "--allow-private",
            "--json",
            "--timeout-secs",
            "20",
            "--data-dir",
            p(&node_dir),
        ];
        if let Some(d) = as_did {
            args.extend(["--as", d]);
        }
        agentnet(&args)
    };

    let node = Node::start(&node_dir);
    // The agent is found and answers its node's own did:key...
    let o = call(None);
    assert!(o.status.success(), "{}", stderr(&o));
    // ...but not a did:web on loopback, which this node does not resolve.
    let o = call(Some(&did));
    assert!(!o.status.success(), "{}", stdout(&o));
    assert!(stderr(&o).contains("401"), "{}", stderr(&o));
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 0);
    drop(node);

    let _node = Node::start_args(&node_dir, CONFIG, &["--allow-http-loopback"]);
    let o = call(Some(&did));
    assert!(o.status.success(), "{}", stderr(&o));
    let out: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    let t = &out["result"]["task"];
    assert_eq!(t["status"]["state"], json!("TASK_STATE_COMPLETED"), "{out}");
    assert_eq!(t["artifacts"][0]["parts"][0]["text"], json!("hello"));
    assert!(hits.load(std::sync::atomic::Ordering::SeqCst) >= 1);
}

/// The ANP SDK's own client (`DIDWbaAuthHeader`): it signs its first request, reads the access
/// token the node answers with, and sends its next requests with it, unsigned, to the same and
/// to another agent of the node; an altered token is refused. Its legacy mode
/// (`auth_mode="legacy_didwba"`) signs the host name without the port, and is refused by a node
/// on another port.
#[test]
fn anp_sdk_client_uses_the_access_token_the_node_gives() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(&dir.path().join("node"));
    let (_, key, doc) = caller(dir.path());
    let script = std::path::PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("interop/python/anp_token_client.py");
    let out = Command::new(python())
        .arg(&script)
        .args([&node.agent("echo"), &node.agent("ask")])
        .args(["--did-doc", p(&doc), "--key", p(&key)])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(v["checks"].as_array().unwrap().len(), 8, "{v}");
}

/// One request to a hosted agent from `client` with extra `headers`: status, response headers,
/// body as JSON (`Null` if it is not).
async fn raw_post(
    client: &reqwest::Client,
    url: &str,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let mut req = client
        .post(url)
        .header("content-type", "application/a2a+json")
        .header("A2A-Version", "1.0");
    for (k, v) in headers {
        req = req.header(k, v);
    }
    let r = req.body(body).send().await.unwrap();
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    (status, headers, r.json().await.unwrap_or(Value::Null))
}

fn rpc_body(method: &str, params: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
        .unwrap()
}

fn new_message(text: &str) -> Value {
    json!({"message": {"role": "ROLE_USER", "parts": [{"text": text}],
        "messageId": uuid_like()}})
}

fn uuid_like() -> String {
    httpsig::new_nonce()
}

fn unix_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// RFC 9421 headers of `key` (a did:key) for a POST of `body` to `url`.
fn rfc9421_headers(key: &SecretKey, url: &str, body: &[u8]) -> Vec<(String, String)> {
    let did = key.did_key();
    let kid = did.with_fragment(did.method_specific_id());
    let h = httpsig::sign(
        key,
        &kid,
        "POST",
        url,
        body,
        unix_secs(),
        &httpsig::new_nonce(),
    )
    .unwrap();
    vec![
        ("content-digest".into(), h.content_digest),
        ("signature-input".into(), h.signature_input),
        ("signature".into(), h.signature),
    ]
}

/// A legacy `Authorization: DIDWba` header of `key` for the audience `aud`.
fn legacy_header(key: &SecretKey, aud: &str) -> Vec<(String, String)> {
    let did = key.did_key();
    let auth = httpsig::sign_legacy(
        key,
        &did,
        did.method_specific_id(),
        aud,
        &httpsig::new_nonce(),
        &httpsig::format_utc_timestamp(unix_secs()),
    );
    vec![("authorization".into(), auth)]
}

fn has_token(h: &reqwest::header::HeaderMap) -> bool {
    h.contains_key("authentication-info") || h.contains_key("authorization")
}

/// Issue 15, the legacy DIDWba replay, played against the binary. The legacy header signs the
/// DID, a nonce, a timestamp and the server's authority only (no method, path or body). A
/// header the victim made for another port of this host (or for the host alone, as the ANP
/// SDK's legacy mode makes it) is refused; a header made for this node, captured and replayed
/// as ListTasks, GetTask or CancelTask on either binding, does not reach the victim's task;
/// no legacy header earns an access token. The one use left: starting a new task.
#[test]
fn a_captured_legacy_didwba_header_reads_nothing_and_earns_no_token() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(&dir.path().join("node"));
    let echo = node.agent("echo");
    let ask = node.agent("ask");
    let http = node.info["http"].as_str().unwrap().to_string();
    let victim = SecretKey::generate();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let c = agentnet_did::http::client();
        // The victim's task at the ask agent (it waits for input), signed properly.
        let body = rpc_body("SendMessage", new_message("hi"));
        let (s, h, v) = raw_post(&c, &ask, rfc9421_headers(&victim, &ask, &body), body).await;
        assert_eq!(s, 200, "{v}");
        assert!(has_token(&h), "an RFC 9421 signature earns a token");
        let task = v["result"]["task"]["id"].as_str().unwrap().to_string();
        assert_eq!(
            v["result"]["task"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
            "{v}"
        );

        // Made for another port of this host, or for the host alone: refused.
        let port: u16 = http.rsplit_once(':').unwrap().1.parse().unwrap();
        for aud in [format!("127.0.0.1:{}", port ^ 1), "127.0.0.1".to_string()] {
            let body = rpc_body("SendMessage", new_message("x"));
            let (s, h, v) = raw_post(&c, &echo, legacy_header(&victim, &aud), body).await;
            assert_eq!(s, 401, "a DIDWba header for {aud} was accepted here: {v}");
            assert!(!has_token(&h));
        }

        // Captured, replayed to read or change the victim's tasks: made for this node, or for
        // the host alone (which the node took before, on every route).
        let aud = httpsig::legacy_audience(&echo).unwrap();
        assert_eq!(aud, http);
        for aud in [aud.clone(), "127.0.0.1".to_string()] {
            let reads = [
                (ask.clone(), rpc_body("ListTasks", json!({}))),
                (ask.clone(), rpc_body("GetTask", json!({"id": task}))),
                (ask.clone(), rpc_body("CancelTask", json!({"id": task}))),
                (
                    ask.clone(),
                    rpc_body("SubscribeToTask", json!({"id": task})),
                ),
                (
                    ask.clone(),
                    rpc_body(
                        "SendMessage",
                        json!({"message": {"role": "ROLE_USER", "parts": [{"text": "Eve"}],
                            "messageId": "m-eve", "taskId": task}}),
                    ),
                ),
                (format!("{ask}/tasks/{task}:cancel"), Vec::new()),
            ];
            for (url, body) in reads {
                let what = String::from_utf8_lossy(&body).into_owned();
                let (s, h, v) = raw_post(&c, &url, legacy_header(&victim, &aud), body).await;
                assert_eq!(s, 401, "{aud} {url} {what}: {v}");
                assert!(!v.to_string().contains(&task), "{aud} {url} {what}: {v}");
                assert!(!has_token(&h), "{aud} {url} {what}: a token");
            }
            let r = c
                .get(format!("{ask}/tasks"))
                .header("A2A-Version", "1.0")
                .header("authorization", legacy_header(&victim, &aud)[0].1.clone())
                .send()
                .await
                .unwrap();
            assert_eq!(r.status().as_u16(), 401, "{aud}");
            assert!(!has_token(r.headers()));
            assert!(!r.text().await.unwrap().contains(&task));
        }

        // A new task: taken, owned by the signer, and no token.
        let body = rpc_body("SendMessage", new_message("legacy"));
        let (s, h, v) = raw_post(&c, &echo, legacy_header(&victim, &aud), body).await;
        assert_eq!(s, 200, "{v}");
        assert_eq!(
            v["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
            "{v}"
        );
        assert!(!has_token(&h), "a legacy header earned a token");

        // The victim's task is untouched, and still the victim's.
        let body = rpc_body("GetTask", json!({"id": task}));
        let (s, _, v) = raw_post(&c, &ask, rfc9421_headers(&victim, &ask, &body), body).await;
        assert_eq!(s, 200, "{v}");
        assert_eq!(
            v["result"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
            "{v}"
        );
    });
}

/// Issue 15, the signature nonce cache, played against the binary with a small cache
/// (`max_nonces = 64`, `per_source_nonces = 8`). Fresh did:keys from one address hold that
/// address's share only (before, from one address, enough DIDs filled the cache and every new
/// signer got 401 until their nonces expired). Then fresh did:keys from nine more addresses
/// (127.0.0.11 to .19) overfill the cache, and honest new signers from 127.0.0.2 still get in,
/// while the replay of a request whose nonce was forgotten to make room is refused. (Nonces
/// are ordered by their signature's `created`, in seconds: the pauses put the phases in
/// different seconds.)
#[test]
fn strangers_flooding_signed_requests_do_not_lock_out_a_new_signer() {
    let config = CONFIG.replacen(
        "[node]",
        "[auth]\nmax_nonces = 64\nper_source_nonces = 8\n\n[node]",
        1,
    );
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start_with(&dir.path().join("node"), &config);
    let echo = node.agent("echo");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let from = |last: u8| common::client_from(&format!("127.0.0.{last}"));
        let send = |c: reqwest::Client| {
            let echo = echo.clone();
            async move {
                let key = SecretKey::generate();
                let body = rpc_body("SendMessage", new_message("flood"));
                let h = rfc9421_headers(&key, &echo, &body);
                let (s, _, v) = raw_post(&c, &echo, h.clone(), body.clone()).await;
                (s, v, h, body)
            }
        };
        // One address, 20 fresh DIDs: 8 get in.
        let one = from(10);
        let mut ok = 0;
        let mut first = None;
        for _ in 0..20 {
            let (s, v, h, body) = send(one.clone()).await;
            if s == 200 {
                ok += 1;
                first.get_or_insert((h, body));
            } else {
                assert_eq!(s, 401, "{v}");
                assert!(v.to_string().contains("from 127.0.0.10"), "{v}");
            }
        }
        assert_eq!(ok, 8, "one address took more than its share");
        let (s, v, _, _) = send(from(2)).await;
        assert_eq!(s, 200, "a new signer elsewhere was locked out: {v}");

        // Nine more addresses, 72 nonces: more than the cache holds; the first phase's nine
        // make room, at least.
        std::thread::sleep(std::time::Duration::from_millis(1100));
        let mut flood = 0;
        for last in 11..=19 {
            let c = from(last);
            for _ in 0..8 {
                let (s, v, _, _) = send(c.clone()).await;
                if s == 200 {
                    flood += 1;
                } else {
                    assert_eq!(s, 401, "{v}");
                }
            }
        }
        assert!(flood >= 64, "the flood filled the cache: {flood}");
        // Honest new signers still get in: the cache makes room.
        std::thread::sleep(std::time::Duration::from_millis(1100));
        for _ in 0..3 {
            let (s, v, _, _) = send(from(2)).await;
            assert_eq!(s, 200, "a new signer was locked out by a full cache: {v}");
        }
        // The first request's nonce was forgotten to make room: its replay is refused.
        let (h, body) = first.unwrap();
        let (s, _, v) = raw_post(&from(3), &echo, h, body).await;
        assert_eq!(s, 401, "a replay was accepted: {v}");
    });
}

/// Signed requests arriving together verified in batches (`[auth] verify_batch = 16`,
/// docs/PROTOCOL.md "Batch verification"). The attacker mixes forged signatures (signed by its
/// own key under another DID's key id) and replays of honest requests into a stream of honest
/// ones: every honest request gets its task, every forgery and every second copy gets 401,
/// whichever batch each lands in.
#[test]
fn forged_and_replayed_signatures_among_concurrent_honest_ones_are_each_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = format!("{CONFIG}\n[auth]\nverify_batch = 16\n");
    let node = Node::start_with(&dir.path().join("node"), &config);
    let url = node.agent("echo");
    let keys: Vec<SecretKey> = (0..8u8)
        .map(|i| SecretKey::from_seed(&[i + 40; 32]))
        .collect();
    let thief = SecretKey::from_seed(&[99; 32]);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    // (status expected, body, signature headers), sent all at once; then the copies.
    let (mut requests, mut copies) = (Vec::new(), Vec::new());
    for i in 0..120usize {
        let body = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": i, "method": "SendMessage",
            "params": {"message": {"role": "ROLE_USER", "parts": [{"text": format!("n{i}")}],
            "messageId": format!("m-{i}")}}}))
        .unwrap();
        let owner = &keys[i % keys.len()];
        let did = owner.did_key();
        let kid = did.with_fragment(did.method_specific_id());
        let forged = i % 4 == 3;
        let signer = if forged { &thief } else { owner };
        let h = httpsig::sign(
            signer,
            &kid,
            "POST",
            &url,
            &body,
            now,
            &httpsig::new_nonce(),
        )
        .unwrap();
        if i % 5 == 0 && !forged {
            copies.push((401u16, body.clone(), h.clone()));
        }
        requests.push((if forged { 401u16 } else { 200 }, body, h));
    }
    let send_all = |batch: Vec<(u16, Vec<u8>, httpsig::SignatureHeaders)>| {
        let url = url.clone();
        async move {
            let client = agentnet_did::http::client();
            // 16 at a time: one source may hold 32 connections (`server::Limits`).
            let permits = std::sync::Arc::new(tokio::sync::Semaphore::new(16));
            let mut sends = tokio::task::JoinSet::new();
            for (want, body, h) in batch {
                let permits = permits.clone();
                let request = client
                    .post(&url)
                    .header("content-type", "application/a2a+json")
                    .header("A2A-Version", "1.0")
                    .header("content-digest", h.content_digest)
                    .header("signature-input", h.signature_input)
                    .header("signature", h.signature)
                    .body(body);
                sends.spawn(async move {
                    let _permit = permits.acquire().await.unwrap();
                    let r = request.send().await.unwrap();
                    let status = r.status().as_u16();
                    (want, status, r.text().await.unwrap())
                });
            }
            sends.join_all().await
        }
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut results = rt.block_on(send_all(requests));
    results.extend(rt.block_on(send_all(copies)));
    let (mut ok, mut refused) = (0, 0);
    for (want, got, body) in &results {
        assert_eq!(want, got, "{body}");
        if *got == 200 {
            assert!(body.contains("TASK_STATE_COMPLETED"), "{body}");
            ok += 1;
        } else {
            refused += 1;
        }
    }
    // 90 honest, 30 forged, 18 copies of honest ones (every fifth honest request but forged).
    assert_eq!((ok, refused), (90, 30 + 18));
}
