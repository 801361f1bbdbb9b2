//! The real binary's hosted agents against what the official A2A TCK checks and only the node
//! serves (issue 17): the `tck` kind (the TCK's data-model scenarios), JSON-RPC at the
//! interface URL with a trailing slash, and the card's caching headers, over real HTTP on
//! loopback. `docs/A2A.md` ("TCK") says how the TCK itself was run.

use crate::common;

use std::path::Path;

use common::UpNode;
use serde_json::{json, Value};

const CONFIG: &str = r#"
[node]
mdns = false
listen = ["/ip4/127.0.0.1/tcp/0"]

[[agent]]
id = "tck"
kind = "tck"
policy = "open"
publish = false
"#;

/// A node hosting [`CONFIG`]'s agent.
fn start(dir: &Path) -> UpNode {
    UpNode::with_config(dir, CONFIG)
}

/// The `tck` agent's A2A endpoint.
fn agent(node: &UpNode) -> String {
    format!("{}/a2a/tck", node.http_url())
}

fn client() -> reqwest::Client {
    agentnet_did::http::client()
}

/// A request as the TCK's clients send it (unsigned, `application/json`, version 1.0).
async fn send(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    body: Option<Value>,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let mut rb = http.request(method, url).header("A2A-Version", "1.0");
    if let Some(b) = body {
        rb = rb
            .header("content-type", "application/json")
            .body(b.to_string());
    }
    let r = rb.send().await.unwrap();
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    (status, headers, r.json().await.unwrap_or(Value::Null))
}

fn message(id: &str) -> Value {
    json!({"message": {"role": "ROLE_USER", "parts": [{"text": "TCK"}], "messageId": id}})
}

fn rpc(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
}

/// The `tck` kind over both bindings of the binary, JSON-RPC at `<interface url>/` as the
/// TCK's client posts it: artifacts of each kind, a message reply, input required then the
/// follow-up's own scenario, a rejection; HTTP+JSON answers `application/json`.
#[tokio::test]
async fn the_tck_kind_serves_the_tck_scenarios_on_both_bindings() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path());
    let base = agent(&node);
    let http = client();
    let post = reqwest::Method::POST;

    // The card names both interfaces at the agent's URL.
    let (status, _, card) = send(
        &http,
        reqwest::Method::GET,
        &format!("{base}/.well-known/agent-card.json"),
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(card["supportedInterfaces"][0]["url"], base.as_str());

    // JSON-RPC, at the URL with a trailing slash.
    let jsonrpc = format!("{base}/");
    let rest = format!("{base}/message:send");
    let call = |prefix: &'static str, n: usize| {
        let http = http.clone();
        let (jsonrpc, rest) = (jsonrpc.clone(), rest.clone());
        let post = post.clone();
        async move {
            let id = format!("{prefix}-{n}");
            let (a, ah, ra) = send(
                &http,
                post.clone(),
                &jsonrpc,
                Some(rpc("SendMessage", message(&id))),
            )
            .await;
            assert_eq!(a, 200, "{ra}");
            assert_eq!(ah["content-type"], "application/json");
            let (b, bh, rb) = send(&http, post, &rest, Some(message(&format!("{id}-rest")))).await;
            assert_eq!(b, 200, "{rb}");
            assert_eq!(bh["content-type"], "application/json");
            [ra["result"].clone(), rb]
        }
    };

    for r in call("tck-artifact-text", 1).await {
        assert_eq!(r["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{r}");
        assert_eq!(
            r["task"]["artifacts"][0]["parts"][0]["text"],
            "Generated text content"
        );
    }
    for r in call("tck-artifact-file", 2).await {
        let part = &r["task"]["artifacts"][0]["parts"][0];
        assert!(part["raw"].is_string(), "{r}");
        assert_eq!(part["filename"], "output.txt");
        assert_eq!(part["mediaType"], "text/plain");
    }
    for r in call("tck-artifact-file-url", 3).await {
        let part = &r["task"]["artifacts"][0]["parts"][0];
        assert_eq!(part["url"], "https://example.com/output.txt", "{r}");
        assert_eq!(part["filename"], "output.txt");
    }
    for r in call("tck-artifact-data", 4).await {
        assert_eq!(
            r["task"]["artifacts"][0]["parts"][0]["data"],
            json!({"key": "value", "count": 42}),
            "{r}"
        );
    }
    for r in call("tck-message-response", 5).await {
        assert!(r.get("task").is_none(), "{r}");
        assert_eq!(r["message"]["role"], "ROLE_AGENT");
        assert_eq!(r["message"]["parts"][0]["text"], "Direct message response");
    }
    for r in call("tck-reject-task", 6).await {
        assert_eq!(r["task"]["status"]["state"], "TASK_STATE_REJECTED", "{r}");
    }
    for r in call("tck-input-required", 7).await {
        assert_eq!(
            r["task"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
            "{r}"
        );
        // The follow-up, with proto field names as the TCK's JSON-RPC client writes them.
        let task_id = r["task"]["id"].as_str().unwrap();
        let (status, _, done) = send(
            &http,
            post.clone(),
            &jsonrpc,
            Some(rpc(
                "SendMessage",
                json!({"message": {"role": "ROLE_USER", "parts": [{"text": "go on"}],
                    "messageId": format!("tck-complete-task-{task_id}"), "task_id": task_id},
                    "configuration": {"history_length": 0}}),
            )),
        )
        .await;
        assert_eq!(status, 200);
        let t = &done["result"]["task"];
        assert_eq!(t["status"]["state"], "TASK_STATE_COMPLETED", "{done}");
        assert_eq!(t["status"]["message"]["parts"][0]["text"], "Hello from TCK");
        assert!(t.get("history").is_none(), "{done}");
    }
}

/// The hosted card as the node serves it: `Cache-Control` with a `max-age`, an `ETag`,
/// `Last-Modified`; a conditional GET that matches is 304 with no body, one that does not gets
/// the same bytes again.
#[tokio::test]
async fn the_hosted_card_is_cacheable_and_revalidates_with_304() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path());
    let url = format!("{}/.well-known/agent-card.json", agent(&node));
    let http = client();
    let r = http.get(&url).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let h = r.headers().clone();
    let body = r.bytes().await.unwrap();
    assert!(
        h["cache-control"].to_str().unwrap().contains("max-age="),
        "{h:?}"
    );
    assert!(h.contains_key("last-modified"), "{h:?}");
    let etag = h["etag"].to_str().unwrap().to_string();
    assert!(etag.starts_with('"') && etag.len() > 10, "{etag}");

    let r = http
        .get(&url)
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 304);
    assert_eq!(r.headers()["etag"], etag.as_str());
    assert!(r.bytes().await.unwrap().is_empty());

    let r = http
        .get(&url)
        .header("if-none-match", "\"stale\"")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.bytes().await.unwrap(), body);
}

/// The node's own card carries the same caching headers and answers a matching
/// `If-None-Match` with 304.
#[tokio::test]
async fn the_node_card_is_cacheable_too() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path());
    let url = format!(
        "http://{}/.well-known/agent-card.json",
        node.info["http"].as_str().unwrap()
    );
    let http = client();
    let r = http.get(&url).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.headers()["content-type"], "application/json");
    assert!(r.headers()["cache-control"]
        .to_str()
        .unwrap()
        .contains("max-age="));
    assert!(r.headers().contains_key("last-modified"));
    let etag = r.headers()["etag"].to_str().unwrap().to_string();
    let card: Value = r.json().await.unwrap();
    assert!(card["signatures"].is_array(), "{card}");
    let r = http
        .get(&url)
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 304);
}
