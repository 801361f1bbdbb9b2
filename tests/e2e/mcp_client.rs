//! The MCP client to verified endpoints (`agentnet tools`, `agentnet tool`,
//! `agentnet_node::call::mcp`) and the MCP endpoints of hosted agents (`/a2a/<id>/mcp`),
//! through the real binary: node A hosts two `echo` agents with `mcp = true` (policy `did` and
//! `open`), node B bootstraps from A and finds them; B's data directory lists and calls the
//! tools with signed requests. The endpoint refuses unsigned, replayed, tampered and
//! foreign-origin requests; the client refuses private URLs and cards signed by another DID
//! before sending anything; the official Python `mcp` SDK lists and calls the open agent's
//! tools.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentnet_did::{card, httpsig, Resolver, SecretKey};
use agentnet_node::call::mcp::{Error, Remote};
use agentnet_node::call::{CallError, CallOptions, Caller, DidSigner};
use agentnet_node::identity::Identity;
use serde_json::{json, Value};
use tokio::process::{Child, Command};

use crate::common;
use common::*;

const CONFIG: &str = r#"
[[agent]]
id = "echo"
kind = "echo"
policy = "did"
mcp = true
tags = ["mcp-echo"]

[[agent]]
id = "open"
kind = "echo"
policy = "open"
mcp = true
tags = ["mcp-open"]
"#;

/// `agentnet up` on loopback; killed when dropped.
struct Node {
    _child: Child,
    dir: tempfile::TempDir,
    info: Value,
}

impl Node {
    async fn start(config: Option<&str>, bootstrap: Option<&str>) -> Node {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = up_command(dir.path(), config);
        if let Some(b) = bootstrap {
            cmd.args(["--bootstrap", b]);
        }
        let (child, info) = start_up(cmd).await;
        Node {
            _child: child,
            dir,
            info,
        }
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn http(&self) -> String {
        self.info["http"].as_str().unwrap().to_owned()
    }

    fn listen(&self) -> String {
        self.info["listen"][0].as_str().unwrap().to_owned()
    }

    fn mcp_url(&self, agent: &str) -> String {
        format!("http://{}/a2a/{agent}/mcp", self.http())
    }

    async fn card(&self, agent: &str) -> Value {
        agentnet_did::http::get(format!(
            "http://{}/a2a/{agent}/.well-known/agent-card.json",
            self.http()
        ))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
    }
}

/// Run the binary off the async runtime.
async fn run(args: Vec<String>) -> std::process::Output {
    tokio::task::spawn_blocking(move || {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        agentnet(&a)
    })
    .await
    .unwrap()
}

fn args(a: &[&str], data: &Path) -> Vec<String> {
    let mut v: Vec<String> = a.iter().map(|s| s.to_string()).collect();
    v.extend(["--data-dir".into(), p(data).into()]);
    v
}

/// B's node finds the agent with `tag` (gossip, then the DHT); its DID.
async fn discover(b: &Node, tag: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let o = run(args(&["discover", "--skill", tag, "--json"], &b.data())).await;
        if o.status.success() {
            let v: Value = serde_json::from_str(&stdout(&o)).unwrap_or(Value::Null);
            if let Some(did) = v[0]["did"].as_str() {
                return did.to_owned();
            }
        }
        assert!(Instant::now() < deadline, "B never found {tag}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_and_tool_from_another_data_dir_with_signed_requests() {
    let a = Node::start(Some(CONFIG), None).await;
    let b = Node::start(None, Some(&a.listen())).await;
    let did = discover(&b, "mcp-echo").await;
    let card = a.card("echo").await;
    let ext = card["capabilities"]["extensions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["uri"] == "urn:agentnet:mcp:v1")
        .cloned()
        .expect("the card advertises its MCP endpoint");
    assert_eq!(ext["required"], false);
    assert_eq!(ext["params"]["url"], a.mcp_url("echo"));
    assert_eq!(ext["params"]["transport"], "streamable-http");

    // tools: the echo tool, with its schemas.
    let o = run(args(
        &["tools", "--did", &did, "--allow-private", "--json"],
        &b.data(),
    ))
    .await;
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["did"], did);
    assert_eq!(v["url"], a.mcp_url("echo"));
    let tools = v["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 1, "{v}");
    assert_eq!(tools[0]["name"], "echo");
    assert_eq!(tools[0]["inputSchema"]["type"], "object");
    assert!(tools[0]["outputSchema"].is_object(), "{v}");
    assert!(stderr(&o).contains("verified"), "{}", stderr(&o));

    // tool: the text comes back, structured and as text.
    let o = run(args(
        &[
            "tool",
            "echo",
            "--args",
            r#"{"text": "héllo, MCP"}"#,
            "--did",
            &did,
            "--allow-private",
            "--json",
        ],
        &b.data(),
    ))
    .await;
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["tool"], "echo");
    assert_eq!(v["result"]["isError"], false, "{v}");
    assert_eq!(v["result"]["structuredContent"]["text"], "héllo, MCP");
    let o = run(args(
        &[
            "tool",
            "echo",
            "--args",
            r#"{"text": "plain"}"#,
            "--did",
            &did,
            "--allow-private",
        ],
        &b.data(),
    ))
    .await;
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("plain"), "{}", stdout(&o));

    // Arguments that do not fit the tool's schema: the tool's error, exit 1.
    let o = run(args(
        &[
            "tool",
            "echo",
            "--args",
            r#"{"text": 5}"#,
            "--did",
            &did,
            "--allow-private",
        ],
        &b.data(),
    ))
    .await;
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    // Arguments that are not an object: refused before anything.
    let o = run(args(
        &[
            "tool",
            "echo",
            "--args",
            "[1]",
            "--did",
            &did,
            "--allow-private",
        ],
        &b.data(),
    ))
    .await;
    assert!(!o.status.success());
    assert!(stderr(&o).contains("JSON object"), "{}", stderr(&o));

    // Signing as an identity the data directory does not hold: refused, nothing printed.
    let stranger = SecretKey::generate().did_key().to_string();
    let o = run(args(
        &["tools", "--did", &did, "--allow-private", "--as", &stranger],
        &b.data(),
    ))
    .await;
    assert!(!o.status.success());
    assert!(stdout(&o).is_empty(), "{}", stdout(&o));

    // Without --allow-private the loopback http endpoint is refused.
    let o = run(args(&["tools", "--did", &did], &b.data())).await;
    assert!(!o.status.success());
    assert!(stderr(&o).contains("refusing"), "{}", stderr(&o));
    // ... with what to do, as `call` says it.
    assert!(
        stderr(&o).contains("needs --local (or a node started with `agentnet up --local`)"),
        "{}",
        stderr(&o)
    );
    assert!(stdout(&o).is_empty(), "{}", stdout(&o));

    // An agent whose card advertises no MCP endpoint: said so.
    let plain = Node::start(
        Some("[[agent]]\nid = \"plain\"\nkind = \"echo\"\ntags = [\"no-mcp\"]\n"),
        Some(&a.listen()),
    )
    .await;
    let _ = &plain;
    let plain_did = discover(&b, "no-mcp").await;
    let o = run(args(
        &["tools", "--did", &plain_did, "--allow-private"],
        &b.data(),
    ))
    .await;
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("advertises no MCP endpoint"),
        "{}",
        stderr(&o)
    );
}

/// A 2026-07-28 `tools/list` request body.
fn list_body() -> Vec<u8> {
    serde_json::to_vec(&json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/list",
        "params": {"_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        }},
    }))
    .unwrap()
}

fn post(url: &str, body: Vec<u8>) -> reqwest::RequestBuilder {
    agentnet_did::http::client()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-method", "tools/list")
        .header("mcp-protocol-version", "2026-07-28")
        .body(body)
}

/// RFC 9421 headers of `method url body`, signed by `id`.
fn signed(id: &Identity, method: &str, url: &str, body: &[u8]) -> reqwest::header::HeaderMap {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let h = httpsig::sign(
        id.key(),
        id.kid(),
        method,
        url,
        body,
        now,
        &httpsig::new_nonce(),
    )
    .unwrap();
    let mut out = reqwest::header::HeaderMap::new();
    h.apply(&mut out);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_endpoint_verifies_every_request() {
    let a = Node::start(Some(CONFIG), None).await;
    let url = a.mcp_url("echo");
    let me = Identity::did_key(SecretKey::generate());

    // Unsigned: 401, whatever the method.
    let r = post(&url, list_body()).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert!(r.text().await.unwrap().contains("signed"));
    let r = agentnet_did::http::client()
        .get(&url)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = agentnet_did::http::client()
        .delete(&url)
        .header("mcp-session-id", "x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);

    // Signed: served.
    let body = list_body();
    let headers = signed(&me, "POST", &url, &body);
    let r = post(&url, body.clone())
        .headers(headers.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["result"]["tools"][0]["name"], "echo", "{v}");

    // The same request again (a replay): 401.
    let r = post(&url, body.clone())
        .headers(headers)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert!(r.text().await.unwrap().contains("replay"));

    // Signed for another body, or another URL: 401.
    let other = signed(&me, "POST", &url, b"{}");
    let r = post(&url, body.clone())
        .headers(other)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let elsewhere = signed(&me, "POST", &a.mcp_url("open"), &body);
    let r = post(&url, body.clone())
        .headers(elsewhere)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);

    // Signed, from a browser page of another origin: 403.
    let r = post(&url, body.clone())
        .headers(signed(&me, "POST", &url, &body))
        .header("origin", "https://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);

    // Oversized: 413 before any signature work.
    let big = vec![b' '; agentnet_node::hosted::mcp::MAX_BODY + 1];
    let r = post(&url, big).send().await.unwrap();
    assert_eq!(r.status(), 413);

    // The open agent serves unsigned requests, and refuses foreign origins too.
    let open = a.mcp_url("open");
    let r = post(&open, list_body()).send().await.unwrap();
    assert_eq!(r.status(), 200);
    // A signature that does not verify is refused there too (as on the A2A routes); one that
    // does is served.
    let bad = signed(&me, "POST", &open, b"{}");
    let r = post(&open, list_body()).headers(bad).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let good = signed(&me, "POST", &open, &list_body());
    let r = post(&open, list_body()).headers(good).send().await.unwrap();
    assert_eq!(r.status(), 200);
    for origin in [
        "https://evil.example",
        "http://127.0.0.1.evil.example",
        "null",
    ] {
        let r = post(&open, list_body())
            .header("origin", origin)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403, "{origin}");
    }
    // A page of the agent's own origin (its public URL's, here on loopback), or of a loopback
    // origin on another port, is served, as `/mcp` serves it (before: 403 for every Origin).
    let own = format!("http://{}", a.http());
    for origin in [own.as_str(), "http://localhost:5173", "http://[::1]:3000"] {
        let r = post(&open, list_body())
            .header("origin", origin)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{origin}");
    }
    let r = post(&url, body.clone())
        .headers(signed(&me, "POST", &url, &body))
        .header("origin", &own)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "signed, from the agent's own origin");

    // Our client in the 2025-11-25 era (a session: initialize, initialized, the GET stream,
    // tools/list, tools/call, DELETE): every request is signed and accepted by the DID agent.
    let caller = caller(&me, true);
    let remote = Remote {
        did: me.did().clone(),
        signers: vec![],
        endpoint: agentnet_node::call::mcp::Endpoint {
            url: url.parse().unwrap(),
            versions: vec!["2025-11-25"],
        },
        addrs: vec![a.http().parse().unwrap()],
    };
    let tools = remote.list_tools(&caller).await.unwrap();
    assert_eq!(tools[0].name, "echo");
    let r = remote
        .call_tool(&caller, "echo", json!({"text": "in a session"}))
        .await
        .unwrap();
    assert_eq!(
        r.structured_content,
        Some(json!({"text": "in a session"})),
        "{r:?}"
    );
    // Unsigned, the same client is refused.
    let anonymous = Caller::new(
        None,
        Resolver::new(Default::default()).unwrap(),
        None,
        caller.options().clone(),
    );
    let e = remote.list_tools(&anonymous).await.unwrap_err();
    assert!(matches!(e, Error::Connect { .. }), "{e}");
}

/// A caller without a node, verifying cards in hand.
fn caller(me: &Identity, allow_private: bool) -> Caller {
    let mut opts = CallOptions::default();
    opts.allow_private = allow_private;
    opts.timeout = Duration::from_secs(20);
    Caller::new(
        None,
        Resolver::new(Default::default()).unwrap(),
        Some(Arc::new(DidSigner::new(me.clone()))),
        opts,
    )
}

fn card_with_mcp(agent: &Identity, signer: &Identity, mcp_url: &str) -> Value {
    let c = json!({
        "name": "t", "description": "t", "version": "1",
        "supportedInterfaces": [
            {"url": "https://93.184.215.14/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        ],
        "capabilities": {"extensions": [agentnet_node::hosted::mcp::extension(mcp_url)]},
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "t", "name": "t", "description": "t", "tags": ["t"]}],
    });
    let _ = agent;
    card::sign(&c, signer.key(), signer.kid()).unwrap()
}

/// Whether anyone connected to `l` (it is non-blocking; nothing waits).
fn connected(l: &std::net::TcpListener) -> bool {
    l.accept().is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_send_nothing_and_what_is_sent_is_signed() {
    let agent = Identity::did_key(SecretKey::generate());
    let other = Identity::did_key(SecretKey::generate());
    let me = Identity::did_key(SecretKey::generate());
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.set_nonblocking(true).unwrap();
    let port = l.local_addr().unwrap().port();
    let did = agent.did().to_string();
    let mut quiet = |_| {};

    // A private address without allow_private (https, so only the address is wrong).
    let c = card_with_mcp(&agent, &agent, &format!("https://127.0.0.1:{port}/mcp"));
    let e = Remote::find(&caller(&me, false), &did, Some(c), &mut quiet)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Call(CallError::Address { .. })), "{e}");
    assert!(e.to_string().contains("not a public address"), "{e}");

    // A card validly signed, by another DID: not the agent's.
    let http_url = format!("http://127.0.0.1:{port}/mcp");
    let c = card_with_mcp(&agent, &other, &http_url);
    let e = Remote::find(&caller(&me, true), &did, Some(c), &mut quiet)
        .await
        .unwrap_err();
    assert!(
        matches!(e, Error::Call(CallError::NotTheAgents { .. })),
        "{e}"
    );

    // Tampered after signing (the endpoint moved): the signature breaks.
    let mut c = card_with_mcp(&agent, &agent, "http://127.0.0.1:1/mcp");
    c["capabilities"]["extensions"][0]["params"]["url"] = json!(http_url);
    let e = Remote::find(&caller(&me, true), &did, Some(c), &mut quiet)
        .await
        .unwrap_err();
    assert!(
        matches!(e, Error::Call(CallError::CardSignature { .. })),
        "{e}"
    );
    assert!(!connected(&l), "a refused card led to a connection");

    // The control: the agent's own card, allow_private. The first request reaches the
    // listener, signed by `me` over its body.
    let c = card_with_mcp(&agent, &agent, &http_url);
    let caller = caller(&me, true);
    let remote = Remote::find(&caller, &did, Some(c), &mut quiet)
        .await
        .unwrap();
    let server = tokio::spawn(async move {
        use tokio::io::AsyncReadExt as _;
        let l = tokio::net::TcpListener::from_std(l).unwrap();
        let (mut s, _) = l.accept().await.unwrap();
        let mut buf = vec![0u8; 64 * 1024];
        let mut n = 0;
        while !String::from_utf8_lossy(&buf[..n]).contains("\r\n\r\n") {
            let k = s.read(&mut buf[n..]).await.unwrap();
            assert!(k > 0);
            n += k;
        }
        String::from_utf8_lossy(&buf[..n]).to_lowercase()
    });
    let e = remote.list_tools(&caller).await.unwrap_err();
    let head = server.await.unwrap();
    assert!(head.starts_with("post /mcp "), "{head}");
    assert!(head.contains("signature-input: "), "{head}");
    let keyid = format!("keyid=\"{}#", me.did()).to_lowercase();
    assert!(head.contains(&keyid), "{head}");
    assert!(head.contains("content-digest: sha-256=:"), "{head}");
    assert!(!head.contains("authorization:"), "{head}");
    assert!(matches!(e, Error::Connect { .. }), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_lists_and_calls_the_tools_of_an_open_agents_endpoint() {
    let Some(python) = venv_python_with("mcp") else {
        assert!(
            std::env::var_os("AGENTNET_INTEROP_REQUIRED").is_none(),
            "the Python mcp SDK is missing although scripts/test.sh installed it"
        );
        eprintln!("SKIPPED: no Python venv with mcp (run interop/setup.sh)");
        return;
    };
    let a = Node::start(Some(CONFIG), None).await;
    let script = std::path::PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("interop/python/mcp_client.py");
    for era in ["2026-07-28", "2025-11-25"] {
        let o = Command::new(&python)
            .arg(&script)
            .args(["--era", era, "--url", &a.mcp_url("open")])
            .args(["--call", "echo", r#"{"text": "from Python"}"#])
            .stdin(Stdio::null())
            .output()
            .await
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "{era}: {out}\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let v: Value = serde_json::from_str(out.trim()).unwrap();
        assert_eq!(v["ok"], true, "{v}");
        assert_eq!(v["protocolVersion"], era, "{v}");
        assert_eq!(v["tools"], json!(["echo"]), "{v}");
        assert_eq!(v["calls"][0]["isError"], false, "{v}");
        assert_eq!(
            v["calls"][0]["structuredContent"]["text"], "from Python",
            "{v}"
        );
    }
    // The DID-policy agent refuses the SDK's unsigned requests.
    let o = Command::new(&python)
        .arg(&script)
        .args(["--era", "2026-07-28", "--url", &a.mcp_url("echo")])
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    assert!(!o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("401"), "{out}");
}

/// Agents of other kinds than `echo` offer `send_message` on their MCP endpoint: one turn of
/// the agent, as the verified caller. The `ask` agent's question comes back as
/// state `input-required` with its task id, and the same caller's next call with that id
/// completes it (the task is the caller's: the engine finds it only for that DID); a command
/// agent's output comes back as text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_kinds_offer_a_turn_of_work_as_the_send_message_tool() {
    const KINDS: &str = r#"
[[agent]]
id = "ask"
kind = "ask"
work_ms = 50
mcp = true
tags = ["mcp-ask"]

[[agent]]
id = "shout"
kind = "command"
command = ["tr", "a-z", "A-Z"]
policy = "open"
mcp = true
tags = ["mcp-shout"]
"#;
    let a = Node::start(Some(KINDS), None).await;
    let b = Node::start(None, Some(&a.listen())).await;
    let tool = |did: &str, json_args: &str| {
        args(
            &[
                "tool",
                "send_message",
                "--args",
                json_args,
                "--did",
                did,
                "--allow-private",
                "--json",
            ],
            &b.data(),
        )
    };
    let ask = discover(&b, "mcp-ask").await;
    let o = run(args(
        &["tools", "--did", &ask, "--allow-private", "--json"],
        &b.data(),
    ))
    .await;
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["tools"][0]["name"], "send_message", "{v}");

    let o = run(tool(&ask, r#"{"text": "hello"}"#)).await;
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let r = &v["result"]["structuredContent"];
    assert_eq!(r["state"], "input-required", "{v}");
    assert!(r["question"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
    assert!(r.get("task").is_none(), "the raw task only with full: {v}");
    let task = r["task_id"].as_str().unwrap().to_string();
    // Another DID (node A's own, from A's data directory) cannot answer B's task: for it the
    // task does not exist (the tool's error, exit 1), and the task still waits for B.
    let o = run(args(
        &[
            "tool",
            "send_message",
            "--args",
            &json!({"text": "Eve", "task_id": task}).to_string(),
            "--did",
            &ask,
            "--allow-private",
            "--json",
        ],
        &a.data(),
    ))
    .await;
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap_or(Value::Null);
    assert_eq!(v["result"]["isError"], true, "{}{}", stdout(&o), stderr(&o));
    assert!(v.to_string().contains("not found"), "{v}");
    let o = run(tool(
        &ask,
        &json!({"text": "Ada", "task_id": task}).to_string(),
    ))
    .await;
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let r = &v["result"]["structuredContent"];
    assert_eq!(r["state"], "completed", "{v}");
    assert_eq!(r["task_id"], json!(task));
    assert!(
        r["texts"].to_string().contains("Ada"),
        "the answer names the caller: {v}"
    );
    // Over A2A the task is B's, the DID that signed the MCP calls, and no one else's.
    let b_id =
        Identity::did_key(SecretKey::load(&agentnet_node::data_dir::key_file(&b.data())).unwrap());
    let a2a = format!("http://{}/a2a/ask", a.http());
    let get = serde_json::to_vec(
        &json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task}}),
    )
    .unwrap();
    for (who, found) in [
        (&b_id, true),
        (&Identity::did_key(SecretKey::generate()), false),
    ] {
        let v: Value = agentnet_did::http::client()
            .post(&a2a)
            .header("content-type", "application/a2a+json")
            .header("A2A-Version", "1.0")
            .headers(signed(who, "POST", &a2a, &get))
            .body(get.clone())
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(v["result"]["id"] == json!(task), found, "{v}");
    }
    // The task is done: another message to it is the tool's error (exit 1).
    let o = run(tool(
        &ask,
        &json!({"text": "again", "task_id": task}).to_string(),
    ))
    .await;
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));

    // By skill: the first agent with the tag whose verified card advertises an endpoint.
    let o = run(args(
        &["tools", "--skill", "mcp-shout", "--allow-private", "--json"],
        &b.data(),
    ))
    .await;
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["tools"][0]["name"], "send_message", "{v}");
    let o = run(args(
        &["tools", "--skill", "no-such-tag", "--allow-private"],
        &b.data(),
    ))
    .await;
    assert!(!o.status.success());
    assert!(stderr(&o).contains("no-such-tag"), "{}", stderr(&o));
    let shout = discover(&b, "mcp-shout").await;
    assert_eq!(v["did"], json!(shout));
    let o = run(tool(&shout, r#"{"text": "quiet words"}"#)).await;
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(
        v["result"]["structuredContent"]["texts"],
        json!(["QUIET WORDS"]),
        "{v}"
    );
}

/// A 2025-11-25 `initialize` at `url`, signed by `id` or anonymous: the status, the session
/// id, the body.
async fn open_session(
    http: &reqwest::Client,
    url: &str,
    init: &[u8],
    id: Option<&Identity>,
) -> (u16, Option<String>, String) {
    let (status, headers, body) = initialize(http, url, init, id).await;
    let session = headers
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_owned());
    (status, session, body)
}

/// The same: the status, the headers, the body.
async fn initialize(
    http: &reqwest::Client,
    url: &str,
    init: &[u8],
    id: Option<&Identity>,
) -> (u16, reqwest::header::HeaderMap, String) {
    let mut req = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    if let Some(id) = id {
        req = req.headers(signed(id, "POST", url, init));
    }
    let r = req.body(init.to_vec()).send().await.unwrap();
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    (status, headers, r.text().await.unwrap_or_default())
}

/// A refusal for a full share of sessions: 429 with `Retry-After` (the seconds until an idle
/// session closes) and a JSON-RPC error that says why and when to come back.
fn assert_overloaded(status: u16, headers: &reqwest::header::HeaderMap, body: &str, why: &str) {
    assert_eq!(status, 429, "{body}");
    let after: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=300).contains(&after), "Retry-After: {after}");
    assert!(!headers.contains_key("mcp-session-id"));
    let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert_eq!(v["jsonrpc"], "2.0", "{v}");
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("too many MCP sessions"), "{v}");
    assert!(message.contains(why), "{v}");
    assert!(message.contains(&format!("{after} s")), "{v}");
    assert_eq!(v["error"]["data"]["retryAfter"], after, "{v}");
}

/// The attacker: one DID opens 2025-11-25 sessions at a hosted endpoint as fast as it can
/// (before, one DID took all 256 of the agent in 4 s); then fresh DIDs from the same address.
/// Now one DID holds at most 16, one address 16 whatever DIDs it signs with: the rest are
/// refused with the reason; a caller from another address (127.0.0.2) still gets a session,
/// and a closed session gives its share back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosted_sessions_are_shared_out_per_did_and_per_address() {
    use agentnet_node::mcp::http::{MAX_SESSIONS_PER_OWNER, MAX_SESSIONS_PER_SOURCE};
    let a = Node::start(Some(CONFIG), None).await;
    let url = a.mcp_url("echo");
    let init = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}}))
    .unwrap();
    let from = client_from;
    let here = from("127.0.0.1");
    let greedy = Identity::did_key(SecretKey::generate());
    let mut ids = Vec::new();
    for _ in 0..MAX_SESSIONS_PER_OWNER {
        let (s, id, text) = open_session(&here, &url, &init, Some(&greedy)).await;
        assert_eq!(s, 200, "{text}");
        ids.push(id.unwrap());
    }
    let (s, h, text) = initialize(&here, &url, &init, Some(&greedy)).await;
    assert_overloaded(s, &h, &text, "for your DID");
    // Fresh DIDs from the same address: its share is taken too.
    assert_eq!(MAX_SESSIONS_PER_SOURCE, MAX_SESSIONS_PER_OWNER);
    let fresh = Identity::did_key(SecretKey::generate());
    let (s, h, text) = initialize(&here, &url, &init, Some(&fresh)).await;
    assert_overloaded(s, &h, &text, "from your address");
    // Another address is served.
    let (s, id, text) = open_session(
        &from("127.0.0.2"),
        &url,
        &init,
        Some(&Identity::did_key(SecretKey::generate())),
    )
    .await;
    assert_eq!(s, 200, "{text}");
    assert!(id.is_some());
    // A closed session gives its share back.
    let r = here
        .delete(&url)
        .header("mcp-session-id", &ids[0])
        .header("mcp-protocol-version", "2025-11-25")
        .headers(signed(&greedy, "DELETE", &url, b""))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let (s, _, text) = open_session(&here, &url, &init, Some(&greedy)).await;
    assert_eq!(s, 200, "{text}");
}

/// An anonymous caller at an open agent's endpoint that has used its address's share of
/// sessions is told it is an overload and when to come back (429, `Retry-After`, a JSON-RPC
/// error), not that the node failed (it was a bare 500), nor that its DID holds them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anonymous_caller_past_its_share_of_sessions_is_told_when_to_come_back() {
    use agentnet_node::mcp::http::MAX_SESSIONS_PER_SOURCE;
    let a = Node::start(Some(CONFIG), None).await;
    let url = a.mcp_url("open");
    let init = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}}))
    .unwrap();
    let http = agentnet_did::http::client_builder()
        .no_proxy()
        .build()
        .unwrap();
    for _ in 0..MAX_SESSIONS_PER_SOURCE {
        let (s, id, text) = open_session(&http, &url, &init, None).await;
        assert_eq!(s, 200, "{text}");
        assert!(id.is_some());
    }
    let (s, h, text) = initialize(&http, &url, &init, None).await;
    assert_overloaded(s, &h, &text, "from your address");
    assert!(!text.contains("your DID"), "{text}");
}
