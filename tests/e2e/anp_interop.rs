//! ANP's agent descriptions, end to end with the real binary and the official ANP SDK (PyPI
//! `anp` 1.0.7): `anp.openanp.RemoteAgent` and `anp.anp_crawler.ANPCrawler` discover a hosted
//! agent through its `ad.json` (listed at `/.well-known/agent-descriptions`) and call it over its
//! JSON-RPC endpoint, signed as a did:wba identity whose document is served on loopback; an
//! unsigned call, a call changed after signing, and one signed by another key in that DID's name
//! are refused (`interop/python/anp_sdk_client.py`).
//!
//! Needs the interop venv (`bash interop/setup.sh`); fails (never skips) without it.

use crate::common;

use std::path::Path;
use std::process::Command;

use common::UpNode as Node;
use serde_json::{json, Value};

const CONFIG: &str = r#"
[node]
mdns = false
listen = ["/ip4/127.0.0.1/tcp/0"]

[[agent]]
id = "echo"
kind = "echo"
tags = ["anp-echo"]

[[agent]]
id = "open-echo"
kind = "echo"
policy = "open"
publish = false

[[agent]]
id = "ask"
kind = "ask"
work_ms = 100
publish = false
"#;

/// A node hosting [`CONFIG`]'s agents.
fn start(dir: &Path) -> Node {
    // The caller's did:wba document is on loopback: resolving it there needs the testnet flag.
    Node::with_config_args(
        dir,
        CONFIG,
        &["--http", "127.0.0.1:0", "--allow-http-loopback"],
    )
}

/// The node's public HTTP base URL.
fn base(node: &Node) -> String {
    node.http_url()
}

fn sdk_client(args: &[&str]) -> Value {
    let py = common::venv_python();
    assert!(
        py.is_file(),
        "no interop venv at {}; run bash interop/setup.sh",
        py.display()
    );
    let script = std::path::PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("interop/python/anp_sdk_client.py");
    let out = Command::new(py).arg(script).args(args).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "anp_sdk_client.py failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

#[test]
fn the_anp_sdk_discovers_and_calls_a_hosted_agent_as_a_did_wba_caller() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(&dir.path().join("node"));
    let ad = format!("{}/a2a/echo/ad.json", base(&node));
    let out = sdk_client(&[&ad]);
    let checks = out["checks"].as_array().unwrap();
    assert_eq!(checks.len(), 10, "{out}");
    assert!(out["did"]
        .as_str()
        .unwrap()
        .starts_with("did:wba:localhost%3A"));
    // The node fetched the caller's document (the signature was verified against it, not
    // against a key the request carried).
    assert!(out["document_fetches"].as_u64().unwrap() >= 1, "{out}");
}

#[test]
fn the_anp_sdk_calls_an_open_agent_and_an_unsigned_call_is_anonymous_there() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(&dir.path().join("node"));
    let ad = format!("{}/a2a/open-echo/ad.json", base(&node));
    let out = sdk_client(&[&ad, "--open"]);
    assert_eq!(out["checks"].as_array().unwrap().len(), 7, "{out}");
}

async fn rpc(client: &reqwest::Client, url: &str, body: Vec<u8>, ct: &str) -> (u16, Value) {
    let r = client
        .post(url)
        .header("content-type", ct)
        .body(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// The description and interface a client reads, and the endpoint's refusals: what the SDK
/// does not show. A body over the engine's limit is refused before it is read in full, a
/// non-JSON content type before authentication, an unsigned call to a `did` agent with 401;
/// on an open agent, an anonymous `getTask` of a signed caller's task finds nothing.
#[tokio::test]
async fn the_anp_endpoint_is_bounded_and_refuses_what_the_a2a_routes_refuse() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(&dir.path().join("node"));
    let base = base(&node);
    let client = agentnet_did::http::client();

    let list: Value =
        common::get_json(&client, format!("{base}/.well-known/agent-descriptions")).await;
    assert_eq!(list["@type"], "CollectionPage");
    let ids: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["@id"].as_str())
        .collect();
    assert_eq!(ids.len(), 3, "{list}");
    for id in &ids {
        assert!(id.starts_with(&format!("{base}/a2a/")), "{id}");
    }
    let ad: Value = common::get_json(&client, format!("{base}/a2a/echo/ad.json")).await;
    assert_eq!(ad["@type"], "ad:AgentDescription");
    assert!(ad["did"].as_str().unwrap().starts_with("did:key:"));
    assert_eq!(ad["keywords"], json!(["anp-echo"]));
    let interface: Value =
        common::get_json(&client, ad["interfaces"][0]["url"].as_str().unwrap()).await;
    assert_eq!(interface, ad["interfaces"][0]["content"]);
    let rpc_url = interface["servers"][0]["url"].as_str().unwrap().to_string();
    assert_eq!(rpc_url, format!("{base}/a2a/echo/anp/rpc"));

    let send = |text: &str| {
        serde_json::to_vec(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "send", "params": {"text": text}}),
        )
        .unwrap()
    };
    // Unsigned, at a `did` agent: 401, nothing run.
    let (status, v) = rpc(&client, &rpc_url, send("hi"), "application/json").await;
    assert_eq!(status, 401, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("RFC 9421"),
        "{v}"
    );
    // Over the body limit (1 MiB): 413, answered before the body is read in full, so the
    // server may close the connection while the client is still sending (then the client sees
    // the connection end, not the answer); the node answers the next request either way.
    let big = send(&"x".repeat(2 << 20));
    match client
        .post(&rpc_url)
        .header("content-type", "application/json")
        .body(big)
        .send()
        .await
    {
        Ok(r) => assert_eq!(r.status().as_u16(), 413),
        Err(e) => assert!(e.is_request() || e.is_body(), "{e}"),
    }
    // A new client: the old one's pooled connection may be the one the server is closing.
    let client = agentnet_did::http::client();
    // Not JSON: 415.
    let (status, _) = rpc(&client, &rpc_url, send("hi"), "text/plain").await;
    assert_eq!(status, 415);

    // An open agent runs anonymous calls, owned by their source.
    let open = format!("{base}/a2a/open-echo/anp/rpc");
    let (status, v) = rpc(&client, &open, send("anon"), "application/json").await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["result"]["text"], "anon", "{v}");
    assert_eq!(v["result"]["state"], "TASK_STATE_COMPLETED", "{v}");
    let task = v["result"]["taskId"].as_str().unwrap().to_string();
    let get = serde_json::to_vec(
        &json!({"jsonrpc": "2.0", "id": "g", "method": "getTask", "params": {"taskId": task}}),
    )
    .unwrap();
    let (_, v) = rpc(&client, &open, get, "application/json").await;
    assert_eq!(v["result"]["taskId"], json!(task), "{v}");
    // Bad requests are JSON-RPC errors, not panics.
    for (body, code) in [
        (b"[]".to_vec(), -32600),
        (b"{".to_vec(), -32700),
        (
            br#"{"jsonrpc":"2.0","id":1,"method":"nope"}"#.to_vec(),
            -32601,
        ),
        (
            br#"{"jsonrpc":"2.0","id":1,"method":"send","params":{"text":5}}"#.to_vec(),
            -32602,
        ),
        (
            br#"{"jsonrpc":"2.0","id":1,"method":"send","params":[]}"#.to_vec(),
            -32602,
        ),
    ] {
        let (status, v) = rpc(&client, &open, body, "application/json").await;
        assert_eq!(
            (status, v["error"]["code"].as_i64()),
            (200, Some(code)),
            "{v}"
        );
    }
}

/// GET `url` as JSON (blocking, for the tests that are not async).
fn client_get(url: &str) -> Value {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async { common::get_json(&agentnet_did::http::client(), url).await })
}

/// `agentnet call --ad URL` as the given flags, from `data_dir`: its output.
fn call_ad(data_dir: &Path, ad: &str, text: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "call",
        text,
        "--ad",
        ad,
        "--allow-private",
        "--json",
        "--timeout-secs",
        "30",
        "--data-dir",
        common::p(data_dir),
    ];
    args.extend_from_slice(extra);
    common::agentnet(&args)
}

/// An agent served by the ANP SDK's own server (`anp.fastanp.FastANP`) on 127.0.0.1, its
/// DID-WBA middleware on; killed on drop.
struct SdkServer {
    child: std::process::Child,
    ad: String,
    did: String,
}

impl SdkServer {
    fn start(caller_doc: &Path) -> SdkServer {
        use std::io::BufRead;
        let py = common::venv_python();
        assert!(py.is_file(), "no interop venv; run bash interop/setup.sh");
        let script = std::path::PathBuf::from(
            std::env::var_os("CARGO_MANIFEST_DIR")
                .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
        )
        .join("interop/python/anp_sdk_server.py");
        let mut child = Command::new(py)
            .arg(script)
            .args(["--caller-doc", common::p(caller_doc)])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let v: Value = serde_json::from_str(line.trim())
            .unwrap_or_else(|e| panic!("anp_sdk_server.py printed {line:?}: {e}"));
        let ad = v["ad"].as_str().unwrap().to_string();
        let did = v["did"].as_str().unwrap().to_string();
        let server = SdkServer { child, ad, did };
        // Listening once the description answers (bounded: 30 s).
        for _ in 0..300 {
            let up = std::net::TcpStream::connect(
                server
                    .ad
                    .trim_start_matches("http://localhost:")
                    .split('/')
                    .next()
                    .map(|port| format!("127.0.0.1:{port}"))
                    .unwrap(),
            )
            .is_ok();
            if up {
                return server;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!("the ANP SDK server did not start");
    }
}

impl Drop for SdkServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `agentnet call --ad` reaches an agent the ANP SDK serves: it reads the description, fetches
/// the OpenRPC document it links, picks its one method and calls it signed as our did:wba
/// identity, which the SDK's verifier authenticates (the answer names that DID); given the
/// agent's DID instead, the description its DID document names. Unsigned,
/// the SDK refuses the call, and so does our client a description whose DID is not its
/// origin's.
#[test]
fn agentnet_call_reaches_an_agent_served_by_the_anp_sdk() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(&dir.path().join("node"));
    let id = common::json_of(&[
        "identity",
        "new",
        "--wba",
        "localhost%3A9:agents:bob",
        "--data-dir",
        common::p(&node.dir),
        "--json",
    ]);
    let did = id["did"].as_str().unwrap().to_string();
    let doc = Path::new(id["documentFile"].as_str().unwrap()).to_owned();
    let server = SdkServer::start(&doc);

    let out = call_ad(&node.dir, &server.ad, "hello sdk", &["--as", &did]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let v: Value = serde_json::from_str(common::stdout(&out).trim()).unwrap();
    assert_eq!(v["result"]["echo"], "hello sdk", "{v}");
    assert_eq!(v["result"]["caller"], json!(did), "{v}");
    assert_eq!(v["interface"]["method"], "echo", "{v}");
    assert!(v["did"]
        .as_str()
        .unwrap()
        .starts_with("did:wba:localhost%3A"));

    // By the agent's DID: its document (served by the SDK server, fetched over plain http on
    // loopback, so with the testnet flag) names the description.
    let out = call_ad(
        &node.dir,
        &server.did,
        "by did",
        &["--as", &did, "--allow-http-loopback"],
    );
    assert!(out.status.success(), "{}", common::stderr(&out));
    let v: Value = serde_json::from_str(common::stdout(&out).trim()).unwrap();
    assert_eq!(v["result"]["echo"], "by did", "{v}");
    assert_eq!(v["did"], json!(server.did), "{v}");

    // Unsigned: the SDK's middleware answers 401.
    let out = call_ad(&node.dir, &server.ad, "hello", &["--anonymous"]);
    assert!(!out.status.success());
    assert!(
        common::stderr(&out).contains("401"),
        "{}",
        common::stderr(&out)
    );

    // The same description at 127.0.0.1 names a DID of localhost: another origin, refused
    // before anything is called.
    let by_ip = server.ad.replace("localhost", "127.0.0.1");
    let out = call_ad(&node.dir, &by_ip, "hello", &["--as", &did]);
    assert!(!out.status.success());
    assert!(
        common::stderr(&out).contains("does not vouch for it"),
        "{}",
        common::stderr(&out)
    );
}

/// `agentnet call --ad` reaches our own hosted agents too: a did:key description is verified
/// through the A2A card it links (signed by that key, on the same origin); by its DID, the card
/// in the node's index links the description; `--did` another DID is refused.
#[test]
fn agentnet_call_reaches_a_hosted_agent_by_its_description() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(&dir.path().join("node"));
    let ad = format!("{}/a2a/echo/ad.json", base(&node));
    let out = call_ad(&node.dir, &ad, "hello ad", &[]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let v: Value = serde_json::from_str(common::stdout(&out).trim()).unwrap();
    assert_eq!(v["result"]["text"], "hello ad", "{v}");
    assert_eq!(v["result"]["state"], "TASK_STATE_COMPLETED", "{v}");
    assert_eq!(v["interface"]["method"], "send");
    // The task is the node's DID's (the call was signed).
    assert_eq!(
        v["result"]["task"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );

    // By its DID: its card in the node's index (published, gossiped) links the description.
    let echo_did = v["did"].as_str().unwrap().to_string();
    let out = call_ad(&node.dir, &echo_did, "by card", &[]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let v: Value = serde_json::from_str(common::stdout(&out).trim()).unwrap();
    assert_eq!(v["result"]["text"], "by card", "{v}");
    // The ask agent is not published: its DID is known nowhere.
    let ask: Value = client_get(&format!("{}/a2a/ask/ad.json", base(&node)));
    let out = call_ad(&node.dir, ask["did"].as_str().unwrap(), "hello", &[]);
    assert!(!out.status.success());
    assert!(
        common::stderr(&out).contains("give the description's URL"),
        "{}",
        common::stderr(&out)
    );

    let other = format!("{}/a2a/ask/ad.json", base(&node));
    let out = call_ad(&node.dir, &other, "hello", &["--did", &echo_did]);
    assert!(!out.status.success());
    assert!(
        common::stderr(&out).contains(&format!("not {echo_did}'s")),
        "{}",
        common::stderr(&out)
    );
}

/// An impostor copies a hosted agent's signed card and description onto its own origin, its
/// endpoint pointing at itself: the card verifies as the agent's DID (it is the agent's card),
/// but its interfaces are on the node's origin, not the impostor's, so `call --ad` refuses the
/// description before calling anything, and the impostor's endpoint gets no call.
#[test]
fn a_copied_card_does_not_vouch_for_another_origin() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let node = start(&dir.path().join("node"));
    let real = format!("{}/a2a/echo", base(&node));
    let card = client_get(&format!("{real}/.well-known/agent-card.json"));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let fake = format!("http://{}/a2a/echo", listener.local_addr().unwrap());
    let mut ad = client_get(&format!("{real}/ad.json"));
    let text = ad.to_string().replace(&real, &fake);
    ad = serde_json::from_str(&text).unwrap();
    let posts = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let p2 = posts.clone();
    let (ad_body, card_body) = (ad.to_string(), card.to_string());
    std::thread::spawn(move || {
        for conn in listener.incoming().take(16) {
            let Ok(mut conn) = conn else { continue };
            let mut req = vec![0u8; 16 * 1024];
            let n = conn.read(&mut req).unwrap_or(0);
            let head = String::from_utf8_lossy(&req[..n]).to_string();
            let body = if head.starts_with("GET /a2a/echo/ad.json ") {
                ad_body.clone()
            } else if head.starts_with("GET /a2a/echo/.well-known/agent-card.json ") {
                card_body.clone()
            } else {
                if head.starts_with("POST ") {
                    p2.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
                r#"{"jsonrpc":"2.0","id":1,"result":{"text":"impostor"}}"#.to_string()
            };
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    let out = call_ad(&node.dir, &format!("{fake}/ad.json"), "hello", &[]);
    assert!(
        !out.status.success(),
        "the impostor was called: {}",
        common::stdout(&out)
    );
    assert!(
        common::stderr(&out).contains("the card's interfaces"),
        "{}",
        common::stderr(&out)
    );
    assert_eq!(posts.load(std::sync::atomic::Ordering::SeqCst), 0);
}

async fn signed_post(
    client: &reqwest::Client,
    url: &str,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let mut req = client
        .post(url)
        .header("content-type", "application/json")
        .body(body);
    for (k, v) in headers {
        req = req.header(k, v);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    (status, headers, r.json().await.unwrap_or(Value::Null))
}

fn rfc9421(key: &agentnet_did::SecretKey, url: &str, body: &[u8]) -> Vec<(String, String)> {
    use agentnet_did::httpsig;
    let did = key.did_key();
    let kid = did.with_fragment(did.method_specific_id());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let h = httpsig::sign(key, &kid, "POST", url, body, now, &httpsig::new_nonce()).unwrap();
    vec![
        ("content-digest".into(), h.content_digest),
        ("signature-input".into(), h.signature_input),
        ("signature".into(), h.signature),
    ]
}

fn legacy(key: &agentnet_did::SecretKey, aud: &str) -> Vec<(String, String)> {
    use agentnet_did::httpsig;
    let did = key.did_key();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let auth = httpsig::sign_legacy(
        key,
        &did,
        did.method_specific_id(),
        aud,
        &httpsig::new_nonce(),
        &httpsig::format_utc_timestamp(now),
    );
    vec![("authorization".into(), auth)]
}

/// The legacy `Authorization: DIDWba` header signs no method, path or body: whoever captured
/// one made for this node could read or continue the signer's tasks with it. The ANP endpoint
/// never takes it, not even to start a task; an RFC 9421 signature is taken (and earns the
/// access token ANP hands out), and the task it started is the signer's alone.
#[tokio::test]
async fn the_anp_endpoint_takes_no_legacy_didwba_header() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(&dir.path().join("node"));
    let rpc_url = format!("{}/a2a/ask/anp/rpc", base(&node));
    let c = agentnet_did::http::client();
    let victim = agentnet_did::SecretKey::generate();
    let body = |method: &str, params: Value| {
        serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
            .unwrap()
    };
    let send = body("send", json!({"text": "hi"}));
    let (s, h, v) = signed_post(&c, &rpc_url, rfc9421(&victim, &rpc_url, &send), send).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["result"]["state"], "TASK_STATE_INPUT_REQUIRED", "{v}");
    assert!(
        h.contains_key("authentication-info"),
        "a verified signer gets a token"
    );
    let task = v["result"]["taskId"].as_str().unwrap().to_string();

    let aud = agentnet_did::httpsig::legacy_audience(&rpc_url).unwrap();
    for (method, params) in [
        ("getTask", json!({"taskId": task})),
        ("send", json!({"text": "Mallory", "taskId": task})),
        ("send", json!({"text": "new"})),
    ] {
        let (s, h, v) =
            signed_post(&c, &rpc_url, legacy(&victim, &aud), body(method, params)).await;
        assert_eq!(s, 401, "a legacy header was taken for {method}: {v}");
        assert!(!h.contains_key("authentication-info"));
    }
    // Another signer does not see the victim's task.
    let other = agentnet_did::SecretKey::generate();
    let get = body("getTask", json!({"taskId": task}));
    let (s, _, v) = signed_post(&c, &rpc_url, rfc9421(&other, &rpc_url, &get), get).await;
    assert_eq!(s, 200);
    assert!(v["error"].is_object(), "another DID read the task: {v}");
    // The victim does.
    let get = body("getTask", json!({"taskId": task}));
    let (_, _, v) = signed_post(&c, &rpc_url, rfc9421(&victim, &rpc_url, &get), get).await;
    assert_eq!(v["result"]["taskId"], json!(task), "{v}");
}
