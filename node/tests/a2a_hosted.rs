//! Hosted A2A agents on a real node (RocksDB files, the bounded public HTTP server, the DID
//! verifier), attacked and used over real HTTP on loopback.

use std::path::Path;
use std::time::Duration;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use agentnet_did::httpsig;
use agentnet_did::resolver::Options as ResolverOptions;
use agentnet_did::web::HttpOptions;
use agentnet_did::{DidUrl, SecretKey};
use agentnet_node::config::FileConfig;
use agentnet_node::daemon::{self, Options, Running};
use agentnet_node::identity::{self, DomainSpec, Identity};
use serde_json::{json, Value};

const CONFIG: &str = r#"
[auth]
per_did_nonces = 5

[[agent]]
id = "echo"
kind = "echo"
tags = ["echo-did"]
publish = false

[[agent]]
id = "open-echo"
kind = "echo"
policy = "open"
publish = false

[[agent]]
id = "ask"
kind = "ask"
work_ms = 1500
publish = false

[[agent]]
id = "shout"
kind = "command"
command = ["tr", "a-z", "A-Z"]
policy = "open"
publish = false
"#;

async fn start(dir: &Path, request_timeout: Option<Duration>) -> Running {
    let mut o = Options::local(dir.to_path_buf());
    o.hosted = toml_config(CONFIG);
    if let Some(t) = request_timeout {
        o.http_limits.request_timeout = t;
    }
    daemon::start(o).await.expect("the node starts")
}

/// The configuration as `agentnet up --config` reads it, from a file of its own (tests run in
/// parallel in one process: a path per process was shared between them).
fn toml_config(s: &str) -> FileConfig {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("node.toml");
    std::fs::write(&path, s).unwrap();
    FileConfig::read(&path).unwrap()
}

struct Caller {
    key: SecretKey,
    kid: DidUrl,
}

impl Caller {
    /// A fresh did:key caller.
    fn new() -> Self {
        let key = SecretKey::generate();
        let did = key.did_key();
        let kid = did.with_fragment(did.method_specific_id());
        Caller { key, kid }
    }

    /// A caller signing as a domain identity (did:web, did:wba).
    fn of(id: &Identity) -> Self {
        Caller {
            key: SecretKey::from_seed(&id.key().seed()),
            kid: id.kid().clone(),
        }
    }

    fn did(&self) -> String {
        self.kid.did().to_string()
    }

    fn headers(&self, method: &str, url: &str, body: &[u8], nonce: &str) -> Vec<(String, String)> {
        self.headers_at(method, url, body, nonce, unix_now())
    }

    /// Signature headers as if signed at `now` (Unix seconds).
    fn headers_at(
        &self,
        method: &str,
        url: &str,
        body: &[u8],
        nonce: &str,
        now: u64,
    ) -> Vec<(String, String)> {
        let h = httpsig::sign(&self.key, &self.kid, method, url, body, now, nonce).unwrap();
        vec![
            ("content-digest".into(), h.content_digest),
            ("signature-input".into(), h.signature_input),
            ("signature".into(), h.signature),
        ]
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn send_body(text: &str, task_id: Option<&str>) -> Vec<u8> {
    let mut msg = json!({"role": "ROLE_USER", "parts": [{"text": text}], "messageId": uuid()});
    if let Some(t) = task_id {
        msg["taskId"] = json!(t);
    }
    serde_json::to_vec(
        &json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": msg}}),
    )
    .unwrap()
}

fn rpc_body(method: &str, params: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 2, "method": method, "params": params}))
        .unwrap()
}

fn uuid() -> String {
    format!("{:032x}", rand_u128())
}

fn rand_u128() -> u128 {
    let mut b = [0u8; 16];
    rand_core::RngCore::fill_bytes(&mut rand_core::OsRng, &mut b);
    u128::from_le_bytes(b)
}

/// POST a JSON-RPC body, signed by `caller` if given (with `nonce`, fresh if `None`).
async fn post(url: &str, body: Vec<u8>, caller: Option<(&Caller, Option<&str>)>) -> (u16, Value) {
    let mut req = agentnet_did::http::client()
        .post(url)
        .header("content-type", "application/a2a+json")
        .header("A2A-Version", "1.0");
    if let Some((c, nonce)) = caller {
        let n = nonce.map(str::to_owned).unwrap_or_else(httpsig::new_nonce);
        for (k, v) in c.headers("POST", url, &body, &n) {
            req = req.header(k, v);
        }
    }
    let resp = req.body(body).send().await.unwrap();
    let status = resp.status().as_u16();
    let v = resp.json().await.unwrap_or(Value::Null);
    (status, v)
}

fn base(r: &Running) -> String {
    format!("http://{}", r.info.http)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn did_policy_ownership_replay_and_flood() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), None).await;
    let url = format!("{}/a2a/echo", base(&node));

    // The card is public, signed, and declares the DID scheme.
    let card: Value = agentnet_did::http::get(format!("{url}/.well-known/agent-card.json"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(card["supportedInterfaces"][0]["url"], url);
    assert_eq!(
        card["supportedInterfaces"][1]["protocolBinding"],
        "HTTP+JSON"
    );
    assert_eq!(
        card["capabilities"]["extensions"][0]["uri"],
        agentnet_node::hosted::DID_AUTH_EXTENSION
    );
    assert!(card["signatures"][0]["protected"].is_string());
    assert!(card["securitySchemes"]["agentnetDid"].is_object());

    // No identity: 401.
    let (s, _) = post(&url, send_body("hi", None), None).await;
    assert_eq!(s, 401);

    // A bad signature: 401 (signed for another body).
    let alice = Caller::new();
    let body = send_body("hi", None);
    let mut req = agentnet_did::http::client()
        .post(&url)
        .header("content-type", "application/a2a+json")
        .header("A2A-Version", "1.0");
    for (k, v) in alice.headers("POST", &url, b"another body", &httpsig::new_nonce()) {
        req = req.header(k, v);
    }
    let resp = req.body(body).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 401);

    // A signature for another server (another authority) does not verify here.
    let other_url = "http://203.0.113.9:7878/a2a/echo";
    let body = send_body("hi", None);
    let mut req = agentnet_did::http::client()
        .post(&url)
        .header("content-type", "application/a2a+json")
        .header("A2A-Version", "1.0");
    for (k, v) in alice.headers("POST", other_url, &body, &httpsig::new_nonce()) {
        req = req.header(k, v);
    }
    assert_eq!(req.body(body).send().await.unwrap().status().as_u16(), 401);

    // Signed: the task completes with its artifact.
    let (s, v) = post(&url, send_body("hello", None), Some((&alice, None))).await;
    assert_eq!(s, 200, "{v}");
    let task = &v["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{v}");
    assert_eq!(task["artifacts"][0]["parts"][0]["text"], "hello");
    let id = task["id"].as_str().unwrap().to_string();

    // Replayed nonce: refused.
    let nonce = httpsig::new_nonce();
    let (s, _) = post(
        &url,
        rpc_body("GetTask", json!({"id": id})),
        Some((&alice, Some(&nonce))),
    )
    .await;
    assert_eq!(s, 200);
    let (s, v) = post(
        &url,
        rpc_body("GetTask", json!({"id": id})),
        Some((&alice, Some(&nonce))),
    )
    .await;
    assert_eq!(s, 401, "{v}");

    // Another DID: the task does not exist for it.
    let bob = Caller::new();
    let (s, v) = post(
        &url,
        rpc_body("GetTask", json!({"id": id})),
        Some((&bob, None)),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(v["error"]["code"], -32001, "{v}");
    let (s, v) = post(
        &url,
        rpc_body("CancelTask", json!({"id": id})),
        Some((&bob, None)),
    )
    .await;
    assert_eq!((s, v["error"]["code"].clone()), (200, json!(-32001)));
    // Nor over HTTP+JSON.
    let rest = format!("{url}/tasks/{id}");
    let mut req = agentnet_did::http::client()
        .get(&rest)
        .header("A2A-Version", "1.0");
    for (k, v) in bob.headers("GET", &rest, b"", &httpsig::new_nonce()) {
        req = req.header(k, v);
    }
    assert_eq!(req.send().await.unwrap().status().as_u16(), 404);
    // Bob's list is empty; Alice's has her task.
    let (_, v) = post(&url, rpc_body("ListTasks", json!({})), Some((&bob, None))).await;
    assert_eq!(v["result"]["tasks"], json!([]), "{v}");

    // A message to a terminal task is refused.
    let (_, v) = post(&url, send_body("again", Some(&id)), Some((&alice, None))).await;
    assert_eq!(v["error"]["code"], -32004, "{v}");

    // Flood: Alice signs until her nonce quota (5 in this config) is used up; she is then
    // refused, and another DID is not.
    let mut refused = None;
    for i in 0..6 {
        let (s, v) = post(&url, send_body("flood", None), Some((&alice, None))).await;
        if s == 401 {
            refused = Some((i, v));
            break;
        }
    }
    let (i, v) = refused.expect("the flood is refused");
    assert!(i <= 3, "refused after {i} more requests");
    assert!(v.to_string().contains("too many"), "{v}");
    let carol = Caller::new();
    let (s, v) = post(&url, send_body("still here", None), Some((&carol, None))).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        v["result"]["task"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    let _ = (alice.did(), bob.did());

    // The open agent serves anonymous callers; a bad signature there is still 401.
    let open = format!("{}/a2a/open-echo", base(&node));
    let (s, v) = post(&open, send_body("anon", None), None).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        v["result"]["task"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );

    // The command agent: stdin in, stdout out.
    let shout = format!("{}/a2a/shout", base(&node));
    let (_, v) = post(&shout, send_body("quiet please", None), None).await;
    assert_eq!(
        v["result"]["task"]["artifacts"][0]["parts"][0]["text"], "QUIET PLEASE",
        "{v}"
    );

    // The admin API is not on the public listener.
    let r = agentnet_did::http::get(format!("{}/v1/peers", base(&node)))
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 404);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_keeps_tasks_and_fails_the_working_ones() {
    let dir = tempfile::tempdir().unwrap();
    let alice = Caller::new();
    let (done_id, working_id, waiting_id);
    {
        let node = start(dir.path(), None).await;
        let echo = format!("{}/a2a/echo", base(&node));
        let ask = format!("{}/a2a/ask", base(&node));
        let (_, v) = post(&echo, send_body("keep me", None), Some((&alice, None))).await;
        done_id = v["result"]["task"]["id"].as_str().unwrap().to_string();
        // One task waiting for input (the first turn ends after 1.5 s)...
        let (_, v) = post(&ask, send_body("greet me", None), Some((&alice, None))).await;
        assert_eq!(
            v["result"]["task"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
            "{v}"
        );
        waiting_id = v["result"]["task"]["id"].as_str().unwrap().to_string();
        // ... and one working when the node stops.
        let body = serde_json::to_vec(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
            "message": {"role": "ROLE_USER", "parts": [{"text": "slow"}], "messageId": uuid()},
            "configuration": {"returnImmediately": true}}}),
        )
        .unwrap();
        let (_, v) = post(&ask, body, Some((&alice, None))).await;
        working_id = v["result"]["task"]["id"].as_str().unwrap().to_string();
        assert_ne!(
            v["result"]["task"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
            "{v}"
        );
        node.shutdown().await;
    }
    let node = start(dir.path(), None).await;
    let echo = format!("{}/a2a/echo", base(&node));
    let ask = format!("{}/a2a/ask", base(&node));
    let (_, v) = post(
        &echo,
        rpc_body("GetTask", json!({"id": done_id})),
        Some((&alice, None)),
    )
    .await;
    let t = &v["result"];
    assert_eq!(t["status"]["state"], "TASK_STATE_COMPLETED", "{v}");
    assert_eq!(t["artifacts"][0]["parts"][0]["text"], "keep me");
    assert_eq!(t["history"][0]["parts"][0]["text"], "keep me");
    let (_, v) = post(
        &ask,
        rpc_body("GetTask", json!({"id": working_id})),
        Some((&alice, None)),
    )
    .await;
    assert_eq!(v["result"]["status"]["state"], "TASK_STATE_FAILED", "{v}");
    assert_eq!(
        v["result"]["status"]["message"]["parts"][0]["text"],
        agentnet_node::hosted::tasks::RESTART_MESSAGE
    );
    // The waiting task goes on where it was.
    let (_, v) = post(
        &ask,
        send_body("Ada", Some(&waiting_id)),
        Some((&alice, None)),
    )
    .await;
    assert_eq!(
        v["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{v}"
    );
    assert!(v["result"]["task"]["artifacts"][0]["parts"][0]["text"]
        .as_str()
        .unwrap()
        .contains("Hello, Ada! You asked: greet me"));
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_outlives_the_request_timeout() {
    let dir = tempfile::tempdir().unwrap();
    // Requests must answer within 1 s; the ask agent's turn takes 1.5 s.
    let node = start(dir.path(), Some(Duration::from_secs(1))).await;
    let ask = format!("{}/a2a/ask", base(&node));
    let alice = Caller::new();
    let body = serde_json::to_vec(
        &json!({"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": {
        "message": {"role": "ROLE_USER", "parts": [{"text": "stream"}], "messageId": uuid()}}}),
    )
    .unwrap();
    let mut req = agentnet_did::http::client()
        .post(&ask)
        .header("content-type", "application/a2a+json")
        .header("accept", "text/event-stream")
        .header("A2A-Version", "1.0");
    for (k, v) in alice.headers("POST", &ask, &body, &httpsig::new_nonce()) {
        req = req.header(k, v);
    }
    let started = std::time::Instant::now();
    let resp = req.body(body).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let text = resp.text().await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(1400));
    assert!(text.contains("TASK_STATE_INPUT_REQUIRED"), "{text}");
    node.shutdown().await;
}

/// Command agents are bounded: a command that outlives `timeout_secs` is killed and its task
/// FAILED; one that writes more than `max_output_bytes` is cut off and its task FAILED; neither
/// leaves a task WORKING.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_agents_are_killed_at_their_timeout_and_output_cap() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = Options::local(dir.path().to_path_buf());
    o.hosted = toml_config(
        r#"
[[agent]]
id = "slow"
kind = "command"
command = ["sleep", "600"]
timeout_secs = 1
policy = "open"
publish = false

[[agent]]
id = "loud"
kind = "command"
command = ["yes"]
max_output_bytes = 4096
policy = "open"
publish = false
"#,
    );
    let node = daemon::start(o).await.expect("the node starts");
    for id in ["slow", "loud"] {
        let url = format!("{}/a2a/{id}", base(&node));
        let (status, v) = post(&url, send_body("anything", None), None).await;
        assert_eq!(status, 200, "{id}: {v}");
        let task = &v["result"]["task"];
        assert_eq!(task["status"]["state"], "TASK_STATE_FAILED", "{id}: {v}");
        assert!(
            task["artifacts"].as_array().is_none_or(|a| a.is_empty()),
            "{id}: a cut-off output is not an artifact: {v}"
        );
    }
    node.shutdown().await;
}

/// ANP's legacy `Authorization: DIDWba` header authenticates a caller too (older ANP clients
/// send it), tasks then belong to that DID like with RFC 9421; a header signed for another
/// server, or replayed, is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_legacy_didwba_header_authenticates_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), None).await;
    let url = format!("{}/a2a/echo", base(&node));
    let key = SecretKey::generate();
    let did = key.did_key();
    let now = httpsig::format_utc_timestamp(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs(),
    );
    let send = |auth: String| {
        let url = url.clone();
        async move {
            let r = agentnet_did::http::client()
                .post(&url)
                .header("content-type", "application/a2a+json")
                .header("A2A-Version", "1.0")
                .header("authorization", auth)
                .body(send_body("legacy", None))
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            (status, r.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let nonce = httpsig::new_nonce();
    // The audience: this node's host and port.
    let aud = httpsig::legacy_audience(&url).unwrap();
    let good = httpsig::sign_legacy(&key, &did, did.method_specific_id(), &aud, &nonce, &now);
    let (status, v) = send(good.clone()).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{v}"
    );
    // The same header again: a replay.
    let (status, v) = send(good).await;
    assert_eq!(status, 401, "a replayed DIDWba header was accepted: {v}");
    // Signed for another server.
    let other = httpsig::sign_legacy(
        &key,
        &did,
        did.method_specific_id(),
        "elsewhere.example",
        &httpsig::new_nonce(),
        &now,
    );
    let (status, v) = send(other).await;
    assert_eq!(
        status, 401,
        "a DIDWba header for another server was accepted: {v}"
    );
    node.shutdown().await;
}

/// A `proxy` agent forwards each turn to its upstream A2A agent (here another node's hosted
/// agents) and answers with the upstream's result, the INPUT_REQUIRED round included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_agent_forwards_turns_to_its_upstream() {
    let up_dir = tempfile::tempdir().unwrap();
    let upstream = start(up_dir.path(), None).await;
    // Upstream: another node's `shout` (a command agent, policy open) and `ask` (policy did).
    // Proxies sign as the node (the upstream sees the node, not the caller), so `ask` serves
    // them too (before: unsigned, refused, the proxied task failed).
    let dir = tempfile::tempdir().unwrap();
    let mut o = Options::local(dir.path().to_path_buf());
    o.hosted = toml_config(&format!(
        r#"
[[agent]]
id = "via-shout"
kind = "proxy"
upstream = "{base}/a2a/shout"
allow_private = true
policy = "open"
publish = false

[[agent]]
id = "via-ask"
kind = "proxy"
upstream = "{base}/a2a/ask"
allow_private = true
policy = "open"
publish = false
"#,
        base = base(&upstream)
    ));
    let node = daemon::start(o).await.expect("the node starts");
    let (status, v) = post(
        &format!("{}/a2a/via-shout", base(&node)),
        send_body("through the proxy", None),
        None,
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let task = &v["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{v}");
    assert_eq!(
        task["artifacts"][0]["parts"][0]["text"], "THROUGH THE PROXY",
        "the upstream's artifact comes back: {v}"
    );
    // The upstream's DID agent serves the proxy, which signs as the node: it asks for a name.
    let (status, v) = post(
        &format!("{}/a2a/via-ask", base(&node)),
        send_body("hello", None),
        None,
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v["result"]["task"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{v}"
    );
    node.shutdown().await;
    upstream.shutdown().await;
}

/// The attacker: an upstream (or whoever controls its name) answers the proxy's card request
/// with a redirect to an address of its choice, here another local server; and an operator's
/// upstream that resolves to a private address. Before, the proxy's client followed redirects
/// and checked no address. Now the redirect is not followed (the task fails, the target saw
/// nothing) and a private upstream is refused unless `allow_private = true` (no connection).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_agent_follows_no_redirect_and_checks_its_upstream_addresses() {
    use axum::response::Redirect;
    use axum::routing::get;
    let target_hits = Arc::new(AtomicUsize::new(0));
    let hits = target_hits.clone();
    let target = axum::Router::new().fallback(move || {
        let hits = hits.clone();
        async move {
            hits.fetch_add(1, Ordering::SeqCst);
            "{}"
        }
    });
    let tl = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target_addr = tl.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(tl, target).await });
    let to = format!("http://{target_addr}/card");
    let redirecting = axum::Router::new().route(
        "/up/.well-known/agent-card.json",
        get(move || {
            let to = to.clone();
            async move { Redirect::temporary(&to) }
        }),
    );
    let rl = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let redirect_addr = rl.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(rl, redirecting).await });
    // An https upstream on loopback that counts connections.
    let private = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let private_addr = private.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let acc = accepted.clone();
    tokio::spawn(async move {
        while let Ok((_s, _)) = private.accept().await {
            acc.fetch_add(1, Ordering::SeqCst);
        }
    });

    let dir = tempfile::tempdir().unwrap();
    let mut o = Options::local(dir.path().to_path_buf());
    o.hosted = toml_config(&format!(
        r#"
[[agent]]
id = "via-redirect"
kind = "proxy"
upstream = "http://{redirect_addr}/up"
allow_private = true
policy = "open"
publish = false

[[agent]]
id = "via-private"
kind = "proxy"
upstream = "https://{private_addr}/x"
policy = "open"
publish = false
"#
    ));
    let node = daemon::start(o).await.expect("the node starts");
    let (status, v) = post(
        &format!("{}/a2a/via-redirect", base(&node)),
        send_body("hi", None),
        None,
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let task = &v["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_FAILED", "{v}");
    assert!(
        v.to_string().contains("307"),
        "the redirect is the reason: {v}"
    );
    assert_eq!(
        target_hits.load(Ordering::SeqCst),
        0,
        "the redirect was followed"
    );

    let (status, v) = post(
        &format!("{}/a2a/via-private", base(&node)),
        send_body("hi", None),
        None,
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v["result"]["task"]["status"]["state"], "TASK_STATE_FAILED",
        "{v}"
    );
    assert!(v.to_string().contains("not a public address"), "{v}");
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        0,
        "a private upstream was connected to"
    );
    node.shutdown().await;
}

/// Whether process `pid` still exists (running, or a zombie nobody reaped).
/// The process runs (a zombie, killed and waiting for its parent to reap it, does not).
fn process_exists(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // `pid (comm) S …`: the state follows the last `)`.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next())
        .is_some_and(|state| state != 'Z')
}

/// CancelTask over HTTP on a `command` agent's running task: the answer is CANCELED at once,
/// the command's process is killed (its pid leaves `/proc`), and the task stays CANCELED, with
/// no artifact, after the command would have finished. What the command started in the
/// background is killed with it (the turn's process group).
///
/// The command waits for a gate file, so it never ends by itself while the test checks the
/// kill (a timed command could end on its own and pass for killed); opening the gate afterwards
/// is when it would have finished.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canceling_a_command_task_kills_its_process_and_the_task_stays_canceled() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("command.pid");
    let bg_pid_file = dir.path().join("background.pid");
    let gate = dir.path().join("gate");
    let finished = dir.path().join("finished");
    let bg_finished = dir.path().join("background-finished");
    let mut o = Options::local(dir.path().join("node"));
    o.hosted = toml_config(&format!(
        r#"
[[agent]]
id = "gated"
kind = "command"
command = ["sh", "-c", "(while [ ! -e '{gate}' ]; do sleep 0.05; done; touch '{bg_finished}') & echo $! > '{bg_pid}'; echo $$ > '{pid}'; while [ ! -e '{gate}' ]; do sleep 0.05; done; touch '{finished}'; echo finished"]
timeout_secs = 60
policy = "open"
publish = false
"#,
        pid = pid_file.display(),
        bg_pid = bg_pid_file.display(),
        gate = gate.display(),
        finished = finished.display(),
        bg_finished = bg_finished.display(),
    ));
    let node = daemon::start(o).await.expect("the node starts");
    let url = format!("{}/a2a/gated", base(&node));
    let body = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": {
            "message": {"role": "ROLE_USER", "parts": [{"text": "wait"}], "messageId": uuid()},
            "configuration": {"returnImmediately": true}}}))
    .unwrap();
    let (status, v) = post(&url, body, None).await;
    assert_eq!(status, 200, "{v}");
    let id = v["result"]["task"]["id"].as_str().unwrap().to_string();

    // The command runs: it wrote its pid.
    let mut pid = None;
    for _ in 0..200 {
        pid = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok());
        if pid.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pid = pid.expect("the command started and wrote its pid");
    assert!(
        process_exists(pid),
        "the command {pid} runs before the cancel"
    );
    let bg_pid: u32 = std::fs::read_to_string(&bg_pid_file)
        .expect("the background pid is written before the command's own")
        .trim()
        .parse()
        .unwrap();
    assert!(process_exists(bg_pid), "the background child {bg_pid} runs");

    let (status, v) = post(&url, rpc_body("CancelTask", json!({"id": id})), None).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v["result"]["status"]["state"], "TASK_STATE_CANCELED",
        "the cancel answers with the canceled task: {v}"
    );

    // The process is killed and reaped (it cannot end by itself: the gate is closed).
    for _ in 0..400 {
        if !process_exists(pid) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(
        !process_exists(pid),
        "the canceled task's command {pid} is still there: {}",
        std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default()
    );
    for _ in 0..400 {
        if !process_exists(bg_pid) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(
        !process_exists(bg_pid),
        "the command's background child {bg_pid} outlived the cancel"
    );

    // Open the gate: a command still running would now finish (in 50 ms); give it 20 times
    // that. The task is still CANCELED, over both bindings, and the command never finished.
    std::fs::write(&gate, b"").unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!finished.exists(), "the canceled command ran to its end");
    assert!(
        !bg_finished.exists(),
        "the canceled command's background child ran to its end"
    );
    let (_, v) = post(&url, rpc_body("GetTask", json!({"id": id})), None).await;
    assert_eq!(v["result"]["status"]["state"], "TASK_STATE_CANCELED", "{v}");
    assert!(
        v["result"]["artifacts"]
            .as_array()
            .is_none_or(|a| a.is_empty()),
        "a canceled command leaves no artifact: {v}"
    );
    let rest: Value = agentnet_did::http::client()
        .get(format!("{url}/tasks/{id}"))
        .header("A2A-Version", "1.0")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(rest["status"]["state"], "TASK_STATE_CANCELED", "{rest}");
    // And it takes no more messages.
    let (_, v) = post(&url, send_body("wake up", Some(&id)), None).await;
    assert_eq!(v["error"]["code"], -32004, "{v}");
    node.shutdown().await;
}

/// An HTTP server on 127.0.0.1 serving DID documents (path → body) and counting every request
/// it gets, found or not.
async fn counting_did_server(
    docs: Arc<Mutex<HashMap<String, Vec<u8>>>>,
    hits: Arc<AtomicUsize>,
) -> u16 {
    let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
        let docs = docs.clone();
        let hits = hits.clone();
        async move {
            hits.fetch_add(1, Ordering::SeqCst);
            match docs.lock().unwrap().get(uri.path()) {
                Some(b) => (
                    axum::http::StatusCode::OK,
                    [("content-type", "application/json")],
                    b.clone(),
                ),
                None => (
                    axum::http::StatusCode::NOT_FOUND,
                    [("content-type", "text/plain")],
                    b"not found".to_vec(),
                ),
            }
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    port
}

/// A did:web identity `did:web:127.0.0.1%3A<port>:users:<name>`, its document put on the
/// counting server.
fn web_identity(port: u16, name: &str, docs: &Mutex<HashMap<String, Vec<u8>>>) -> Identity {
    let key = SecretKey::generate();
    let spec = DomainSpec::Web(format!("127.0.0.1%3A{port}:users:{name}"));
    let (did, doc) = identity::create(&spec, &key, "2026-01-01T00:00:00Z").unwrap();
    let path = agentnet_did::web::document_url(&did)
        .unwrap()
        .path()
        .to_owned();
    docs.lock()
        .unwrap()
        .insert(path, serde_json::to_vec(&doc.to_json()).unwrap());
    Identity::from_document(did, &doc, key).unwrap()
}

/// A node whose resolver fetches did:web documents from loopback over plain HTTP (the counting
/// server), with `auth` as its `[auth]` section and one `did` echo agent.
async fn start_resolving_loopback(dir: &Path, auth: &str) -> Running {
    let mut o = Options::local(dir.to_path_buf());
    o.hosted = toml_config(&format!(
        "[auth]\n{auth}\n\n[[agent]]\nid = \"echo\"\nkind = \"echo\"\npublish = false\n"
    ));
    o.resolver = ResolverOptions {
        http: HttpOptions {
            allow_http_loopback: true,
            ..Default::default()
        },
        ..Default::default()
    };
    daemon::start(o).await.expect("the node starts")
}

/// The per-address budget of DID document fetches, over HTTP: each signed request from a new
/// did:web DID costs the client's address one fetch; once its budget (3 here, no refill) is
/// spent, a request from yet another did:web DID is refused with 401 and nothing is fetched,
/// while a did:key caller (no fetch needed) and a did:web caller whose document is cached are
/// still served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn did_web_fetches_stop_when_the_client_budget_is_spent() {
    let docs = Arc::new(Mutex::new(HashMap::new()));
    let hits = Arc::new(AtomicUsize::new(0));
    let port = counting_did_server(docs.clone(), hits.clone()).await;
    let webs: Vec<Identity> = (0..6)
        .map(|i| web_identity(port, &format!("u{i}"), &docs))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    // No refill: the test does not depend on how long it takes.
    let node =
        start_resolving_loopback(dir.path(), "fetch_burst = 3\nfetches_per_minute = 0").await;
    let url = format!("{}/a2a/echo", base(&node));

    // Three new did:web callers: each document is fetched once, each request served.
    for (i, id) in webs[..3].iter().enumerate() {
        let (s, v) = post(&url, send_body("hi", None), Some((&Caller::of(id), None))).await;
        assert_eq!(s, 200, "{}: {v}", id.did());
        assert_eq!(
            v["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
            "{v}"
        );
        assert_eq!(hits.load(Ordering::SeqCst), i + 1, "one fetch per new DID");
    }
    // The budget is spent: further new did:web callers are refused, and nothing is fetched.
    for id in &webs[3..] {
        let (s, v) = post(&url, send_body("hi", None), Some((&Caller::of(id), None))).await;
        assert_eq!(s, 401, "{}: {v}", id.did());
        assert!(v.to_string().contains("too many DID resolutions"), "{v}");
        assert_eq!(
            hits.load(Ordering::SeqCst),
            3,
            "a request past the budget fetched {}",
            id.did()
        );
    }
    // A did:key caller needs no fetch: still served.
    let (s, v) = post(&url, send_body("hi", None), Some((&Caller::new(), None))).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        v["result"]["task"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    // A did:web caller whose document is cached costs nothing: still served, no fetch.
    let (s, v) = post(
        &url,
        send_body("again", None),
        Some((&Caller::of(&webs[0]), None)),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(hits.load(Ordering::SeqCst), 3);
    node.shutdown().await;
}

/// No DID document is fetched for a request that fails a cheap check: a signature dated an
/// hour ago or an hour ahead, a Content-Digest that is not the body's, or a legacy DIDWba
/// header an hour old, is refused (401) before the signer's did:web document is fetched. The same DID's good request then fetches
/// it (so the server was reachable and the zero counted something).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_failing_cheap_checks_fetch_no_did_document() {
    let docs = Arc::new(Mutex::new(HashMap::new()));
    let hits = Arc::new(AtomicUsize::new(0));
    let port = counting_did_server(docs.clone(), hits.clone()).await;
    let me = Caller::of(&web_identity(port, "me", &docs));
    let dir = tempfile::tempdir().unwrap();
    let node = start_resolving_loopback(dir.path(), "").await;
    let url = format!("{}/a2a/echo", base(&node));
    let send = |headers: Vec<(String, String)>, body: Vec<u8>| {
        let url = url.clone();
        async move {
            let mut req = agentnet_did::http::client()
                .post(&url)
                .header("content-type", "application/a2a+json")
                .header("A2A-Version", "1.0");
            for (k, v) in headers {
                req = req.header(k, v);
            }
            let r = req.body(body).send().await.unwrap();
            let status = r.status().as_u16();
            (status, r.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let body = send_body("hi", None);
    let now = unix_now();
    for (what, at) in [("an hour old", now - 3600), ("an hour ahead", now + 3600)] {
        let h = me.headers_at("POST", &url, &body, &httpsig::new_nonce(), at);
        let (s, v) = send(h, body.clone()).await;
        assert_eq!(s, 401, "a signature {what} was accepted: {v}");
        assert_eq!(
            hits.load(Ordering::SeqCst),
            0,
            "a signature {what} made the node fetch the document"
        );
    }
    let h = me.headers("POST", &url, b"another body", &httpsig::new_nonce());
    let (s, v) = send(h, body.clone()).await;
    assert_eq!(s, 401, "a wrong content digest was accepted: {v}");
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "a wrong content digest made the node fetch the document"
    );
    // ANP's legacy DIDWba header dated an hour ago: refused before any fetch too.
    let fragment = me.kid.to_string();
    let fragment = fragment.rsplit_once('#').unwrap().1;
    let auth = httpsig::sign_legacy(
        &me.key,
        me.kid.did(),
        fragment,
        &httpsig::legacy_audience(&url).unwrap(),
        &httpsig::new_nonce(),
        &httpsig::format_utc_timestamp(now - 3600),
    );
    let (s, v) = send(vec![("authorization".into(), auth)], body.clone()).await;
    assert_eq!(s, 401, "an old DIDWba header was accepted: {v}");
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "an old DIDWba header made the node fetch the document"
    );
    // The same DID, signing properly: one fetch, served.
    let (s, v) = send(
        me.headers("POST", &url, &body, &httpsig::new_nonce()),
        body.clone(),
    )
    .await;
    assert_eq!(s, 200, "{} {v}", me.did());
    assert_eq!(
        v["result"]["task"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    node.shutdown().await;
}

/// POST a JSON-RPC body signed by `caller` (fresh nonce); the whole response, headers included.
async fn post_signed_raw(url: &str, body: Vec<u8>, caller: &Caller) -> reqwest::Response {
    let mut req = agentnet_did::http::client()
        .post(url)
        .header("content-type", "application/a2a+json")
        .header("A2A-Version", "1.0");
    for (k, v) in caller.headers("POST", url, &body, &httpsig::new_nonce()) {
        req = req.header(k, v);
    }
    req.body(body).send().await.unwrap()
}

/// POST a JSON-RPC body with `Authorization: Bearer <token>`; the status and the body.
async fn post_bearer(url: &str, body: Vec<u8>, token: &str) -> (u16, Value) {
    let resp = agentnet_did::http::client()
        .post(url)
        .header("content-type", "application/a2a+json")
        .header("A2A-Version", "1.0")
        .header("authorization", format!("Bearer {token}"))
        .body(body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// A caller whose signature verified gets an access token in the headers the ANP SDK reads,
/// and with it is the same owner at every hosted agent of the node, without signing; a token
/// altered in any part, one of another node, and garbage are refused with 401; a node
/// configured without tokens issues none and refuses them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verified_callers_get_access_tokens_that_stand_for_their_did() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), None).await;
    let url = format!("{}/a2a/echo", base(&node));
    let me = Caller::new();
    let resp = post_signed_raw(&url, send_body("tok", None), &me).await;
    assert_eq!(resp.status(), 200);
    let info = resp.headers()["authentication-info"]
        .to_str()
        .unwrap()
        .to_string();
    let legacy = resp.headers()["authorization"]
        .to_str()
        .unwrap()
        .to_string();
    let v: Value = resp.json().await.unwrap();
    let task_id = v["result"]["task"]["id"].as_str().unwrap().to_string();
    let token = info
        .split("access_token=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap()
        .to_string();
    assert!(info.contains("token_type=\"Bearer\""), "{info}");
    assert!(info.contains("expires_in=900"), "{info}");
    assert_eq!(legacy, format!("Bearer {token}"));

    // The token stands for the DID: the caller's own task, unsigned.
    let (s, v) = post_bearer(&url, rpc_body("GetTask", json!({"id": task_id})), &token).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["result"]["id"], json!(task_id));
    // At another agent of the node too, as the same owner: its list holds what it sent there.
    let ask = format!("{}/a2a/ask", base(&node));
    let (s, v) = post_bearer(&ask, send_body("Ada", None), &token).await;
    assert_eq!(s, 200, "{v}");
    let (s, v) = post_bearer(&ask, rpc_body("ListTasks", json!({})), &token).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        v["result"]["tasks"].as_array().map(Vec::len),
        Some(1),
        "{v}"
    );
    // Another DID's signed request sees none of it.
    let other = Caller::new();
    let (s, v) = post(
        &url,
        rpc_body("GetTask", json!({"id": task_id})),
        Some((&other, None)),
    )
    .await;
    assert_eq!((s, &v["error"]["code"]), (200, &json!(-32001)), "{v}");

    // Altered tokens: each part changed, or cut, or padded.
    let mut forged = Vec::new();
    let parts: Vec<&str> = token.split('.').collect();
    assert_eq!(parts.len(), 4, "{token}");
    let other_did = {
        use base64::Engine as _;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(other.did())
    };
    forged.push(format!(
        "{}.{}.{}.{}",
        parts[0], parts[1], other_did, parts[3]
    ));
    forged.push(format!(
        "{}.{}.{}.{}",
        parts[0], "99999999999", parts[2], parts[3]
    ));
    forged.push(format!("v2.{}.{}.{}", parts[1], parts[2], parts[3]));
    forged.push(format!(
        "{}.{}.{}.{}A",
        parts[0], parts[1], parts[2], parts[3]
    ));
    forged.push(token[..token.len() - 1].to_string());
    forged.push(format!("{token}.x"));
    forged.push("x".repeat(5000));
    forged.push("....".into());
    forged.push(String::new());
    for f in forged {
        let (s, v) = post_bearer(&url, rpc_body("GetTask", json!({"id": task_id})), &f).await;
        assert_eq!(s, 401, "forged token {f:.80} accepted: {v}");
    }
    // Another node's token (another key) is refused here.
    let dir2 = tempfile::tempdir().unwrap();
    let node2 = start(dir2.path(), None).await;
    let url2 = format!("{}/a2a/echo", base(&node2));
    let (s, _) = post_bearer(&url2, send_body("x", None), &token).await;
    assert_eq!(s, 401);

    // Tokens turned off: none given, none taken.
    let dir3 = tempfile::tempdir().unwrap();
    let mut o = Options::local(dir3.path().to_path_buf());
    o.hosted = toml_config(&CONFIG.replace("[auth]\n", "[auth]\ntoken_ttl_secs = 0\n"));
    let node3 = daemon::start(o).await.unwrap();
    let url3 = format!("{}/a2a/echo", base(&node3));
    let resp = post_signed_raw(&url3, send_body("no token", None), &me).await;
    assert_eq!(resp.status(), 200);
    assert!(resp.headers().get("authentication-info").is_none());
    assert!(resp.headers().get("authorization").is_none());
    let (s, _) = post_bearer(&url3, send_body("x", None), &token).await;
    assert_eq!(s, 401);
    for n in [node, node2, node3] {
        n.shutdown().await;
    }
}

/// Our client keeps the token the node gives and sends it instead of signing: ten sends from
/// one DID pass although the node takes only five live nonces per DID (`per_did_nonces = 5`),
/// which signing every request would exhaust; a token the node refuses is dropped and the
/// request is signed and sent again, transparently.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_client_reuses_the_token_and_signs_again_when_it_is_refused() {
    use agentnet_a2a::client::{Client, Signer};
    use agentnet_a2a::types::{Message, Part, Role, SendMessageRequest, SendMessageResponse};
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), None).await;
    let url = format!("{}/a2a/echo", base(&node));
    let card: Value = agentnet_did::http::get(format!("{url}/.well-known/agent-card.json"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let signer = Arc::new(agentnet_node::call::DidSigner::new(Identity::did_key(
        SecretKey::generate(),
    )));
    let client =
        Client::from_card(agentnet_did::http::client(), &card, Some(signer.clone())).unwrap();
    let send = |text: &str| SendMessageRequest {
        message: Message::new(Role::User, vec![Part::text(text)]),
        configuration: None,
        metadata: None,
        tenant: None,
    };
    let endpoint = client.endpoint().url.clone();
    assert!(!signer.has_token(&endpoint));
    for i in 0..10 {
        let r = client.send_message(&send(&format!("m{i}"))).await;
        assert!(
            matches!(r, Ok(SendMessageResponse::Task(_))),
            "send {i}: {r:?}"
        );
        assert!(signer.has_token(&endpoint), "no token kept after send {i}");
    }
    // A token of no use here (as after a restart of the node): refused, signed again, and the
    // fresh token from that answer is kept.
    signer.keep_token(&endpoint, "v1.1.eA.eA", Duration::from_secs(600));
    let planted = signer.token(&endpoint).unwrap();
    let r = client.send_message(&send("after")).await;
    assert!(matches!(r, Ok(SendMessageResponse::Task(_))), "{r:?}");
    let now = signer.token(&endpoint).expect("a fresh token");
    assert_ne!(now, planted);
    // Another origin gets no token.
    let other = url::Url::parse("http://127.0.0.1:1/a2a/echo").unwrap();
    assert!(!signer.has_token(&other));
    node.shutdown().await;
}
