//! Delegation chains (issue 18, part 1) against the real binary over real HTTP on loopback:
//! an agent with `require_delegation_from` serves a caller that presents a chain from its
//! principal (`agentnet delegate`, `agentnet call --delegation`), and refuses, before any work,
//! the attacker's chains: none, stolen, widened, expired, too long, from another principal,
//! outside the skills granted. A proxy agent hands the chain on to its upstream, and a call
//! outside the grant is refused at the hop that should refuse it. With an independent
//! implementation (digitalbazaar's `@digitalbazaar/vc` and eddsa-jcs-2022 suite, in
//! interop/node/delegation.mjs): a chain it issues is accepted by our agent, and the chain
//! `agentnet delegate` writes verifies there.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use agentnet_did::delegation::{self, Capability, Grant, CONTEXT, TYPE};
use agentnet_did::{httpsig, DidUrl, SecretKey};
use serde_json::{json, Value};

use crate::common;
use common::*;

/// A DID with its key, made by `agentnet init` in its own data directory.
struct Who {
    dir: PathBuf,
    key: SecretKey,
    kid: DidUrl,
}

impl Who {
    fn new(root: &Path, name: &str) -> Who {
        let dir = root.join(name);
        json_of(&["init", "--data-dir", p(&dir), "--json"]);
        let key = SecretKey::load(&dir.join("node.key")).expect("init writes node.key");
        let did = key.did_key();
        let kid = did.with_fragment(did.method_specific_id());
        Who { dir, key, kid }
    }
    fn did(&self) -> String {
        self.kid.did().to_string()
    }
}

fn node_key(dir: &Path) -> PathBuf {
    dir.join("node.key")
}

fn http() -> reqwest::Client {
    agentnet_did::http::client_builder().build().unwrap()
}

fn now() -> i64 {
    delegation::now()
}

fn cap(ops: &[&str], skills: Option<&[&str]>, depth: u32) -> Capability {
    Capability {
        ops: ops.iter().map(|s| s.to_string()).collect(),
        skills: skills.map(|s| s.iter().map(|x| x.to_string()).collect()),
        depth,
        ..Default::default()
    }
}

fn grant(who: &Who, from: &Who, c: &Capability, until: i64, chain: Option<&Value>) -> Value {
    let did = who.kid.did().clone();
    delegation::issue(
        &from.key,
        &from.kid,
        &Grant {
            audience: &did,
            capability: c,
            valid_from: now() - 60,
            valid_until: until,
        },
        chain,
    )
    .unwrap()
}

/// A signed JSON-RPC request `method` with `params` to `url`; the status and the answer.
async fn rpc(url: &str, who: &Who, method: &str, params: Value) -> (u16, Value) {
    signed_rpc(&http(), url, who, method, params).await
}

/// [`rpc`] from the loopback address `from` (any 127.0.0.0/8 address binds on Linux).
async fn rpc_from(from: &str, url: &str, who: &Who, method: &str, params: Value) -> (u16, Value) {
    signed_rpc(&client_from(from), url, who, method, params).await
}

/// [`rpc`] sent with `client`.
async fn signed_rpc(
    client: &reqwest::Client,
    url: &str,
    who: &Who,
    method: &str,
    params: Value,
) -> (u16, Value) {
    let body = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 1, "method": method,
        "params": params}))
    .unwrap();
    let h = httpsig::sign(
        &who.key,
        &who.kid,
        "POST",
        url,
        &body,
        now() as u64,
        &httpsig::new_nonce(),
    )
    .unwrap();
    let mut headers = reqwest::header::HeaderMap::new();
    h.apply(&mut headers);
    let resp = client
        .post(url)
        .header("content-type", "application/a2a+json")
        .header("A2A-Version", "1.0")
        .headers(headers)
        .body(body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// A signed `SendMessage` of `text` with `chain` in the message's metadata.
async fn send(url: &str, who: &Who, text: &str, chain: Option<&Value>) -> (u16, Value) {
    let mut message = json!({"role": "ROLE_USER", "parts": [{"text": text}],
        "messageId": httpsig::new_nonce()});
    if let Some(c) = chain {
        message["metadata"] = json!({"actorChain": c});
    }
    rpc(url, who, "SendMessage", json!({"message": message})).await
}

/// The refusal's message, asserting it is PERMISSION_DENIED.
fn denied(answer: &(u16, Value)) -> String {
    let (status, body) = answer;
    assert_eq!(*status, 200, "JSON-RPC errors travel in a 200: {body}");
    let e = &body["error"];
    assert_eq!(e["code"], -32000, "{body}");
    assert_eq!(e["data"][0]["reason"], "PERMISSION_DENIED", "{body}");
    e["message"].as_str().unwrap_or_default().to_owned()
}

fn completed_text(answer: &(u16, Value)) -> String {
    let (status, body) = answer;
    assert_eq!(*status, 200, "{body}");
    let task = &body["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{body}");
    task["artifacts"][0]["parts"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The DID of the hosted agent at `url` (its card's signer).
async fn agent_did(url: &str) -> String {
    let card: Value = get_json(&http(), format!("{url}/.well-known/agent-card.json")).await;
    let protected = card["signatures"][0]["protected"].as_str().unwrap();
    use base64::Engine as _;
    let header: Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(protected)
            .unwrap(),
    )
    .unwrap();
    let kid = header["kid"].as_str().unwrap();
    kid.split('#').next().unwrap().to_owned()
}

/// A node on loopback hosting the agents of `config`.
fn start(dir: &Path, config: &str) -> UpNode {
    UpNode::with_config_args(dir, config, &LOOPBACK)
}

/// Where the node's hosted agents are: `http://<addr>/a2a`.
fn base(node: &UpNode) -> String {
    format!("{}/a2a", node.http_url())
}

#[tokio::test]
async fn an_agent_serves_its_principal_s_delegates_and_refuses_every_other_chain() {
    let tmp = tempfile::tempdir().unwrap();
    let principal = Who::new(tmp.path(), "principal");
    let other_principal = Who::new(tmp.path(), "other");
    let caller = Who::new(tmp.path(), "caller");
    let middle = Who::new(tmp.path(), "middle");
    let thief = Who::new(tmp.path(), "thief");
    let node = start(
        &tmp.path().join("node"),
        &format!(
            r#"
[node]
local = true

[[agent]]
id = "books"
kind = "echo"
tags = ["books"]
publish = false
require_delegation_from = ["{}"]
"#,
            principal.did()
        ),
    );
    let url = format!("{}/books", base(&node));
    let books = agent_did(&url).await;
    let hour = now() + 3600;

    // The card says what the agent requires.
    let card: Value = get_json(&http(), format!("{url}/.well-known/agent-card.json")).await;
    let ext = card["capabilities"]["extensions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["uri"] == delegation::EXTENSION)
        .cloned()
        .expect("the delegation extension on the card");
    assert_eq!(ext["required"], true);
    assert_eq!(ext["params"]["principals"][0], principal.did());

    // No chain: refused before any work.
    let msg = denied(&send(&url, &caller, "hello", None).await);
    assert!(msg.contains("no delegation"), "{msg}");

    // The principal's grant to the caller: served, and the task keeps the chain it ran under.
    let ok = grant(
        &caller,
        &principal,
        &cap(&["send", "get"], Some(&["books"]), 0),
        hour,
        None,
    );
    let answer = send(&url, &caller, "hello", Some(&ok)).await;
    assert_eq!(completed_text(&answer), "hello");
    assert_eq!(answer.1["result"]["task"]["metadata"]["actorChain"], ok);
    // Kept once: on the task, and its history holds the message without it.
    let history = answer.1["result"]["task"]["history"].as_array().unwrap();
    let sent = history.iter().find(|m| m["role"] == "ROLE_USER").unwrap();
    assert_eq!(sent["parts"][0]["text"], "hello");
    assert!(sent.get("metadata").is_none(), "{history:?}");
    // Read back from the node's store (which keeps a chain once, apart from its tasks), the
    // task still holds it, and GetTask is checked against it.
    let id = answer.1["result"]["task"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let again = send(&url, &caller, "again", Some(&ok)).await;
    assert_eq!(completed_text(&again), "again");
    let got = rpc(&url, &caller, "GetTask", json!({"id": id})).await;
    assert_eq!(got.0, 200, "{:?}", got.1);
    assert_eq!(got.1["result"]["metadata"]["actorChain"], ok, "{:?}", got.1);
    assert_eq!(got.1["result"]["artifacts"][0]["parts"][0]["text"], "hello");

    // A two-link chain through a middle agent: served.
    let root = grant(
        &middle,
        &principal,
        &cap(&["send"], Some(&["books"]), 1),
        hour,
        None,
    );
    let two = grant(
        &caller,
        &middle,
        &cap(&["send"], Some(&["books"]), 0),
        hour,
        Some(&root),
    );
    assert_eq!(
        completed_text(&send(&url, &caller, "two", Some(&two)).await),
        "two"
    );

    // Stolen: the thief signs its own request with the caller's chain.
    let msg = denied(&send(&url, &thief, "hello", Some(&ok)).await);
    assert!(
        msg.contains("delegation link 0") && msg.contains("copied"),
        "{msg}"
    );

    // Widened: the middle agent passes on more than it got (cancel), signed all the same.
    let parent = agentnet_did::delegation::Chain::parse(&root)
        .unwrap()
        .links()[0]
        .digest
        .clone();
    let wide = json!({"@context": [CONTEXT], "type": ["VerifiableCredential", TYPE],
        "issuer": middle.did(), "validFrom": delegation::rfc3339(now() - 60),
        "validUntil": delegation::rfc3339(hour),
        "credentialSubject": {"id": caller.did(), "parent": parent,
            "capability": {"ops": ["send", "cancel"], "skills": ["books"], "depth": 0}}});
    let wide = agentnet_did::di::sign(&wide, &middle.key, &middle.kid, &delegation::rfc3339(now()))
        .unwrap();
    let mut widened = root.as_array().unwrap().clone();
    widened.push(wide);
    let msg = denied(&send(&url, &caller, "hello", Some(&Value::Array(widened))).await);
    assert!(
        msg.contains("delegation link 1") && msg.contains("widens"),
        "{msg}"
    );

    // Expired.
    let g = Grant {
        audience: caller.kid.did(),
        capability: &cap(&["send"], None, 0),
        valid_from: now() - 7200,
        valid_until: now() - 3600,
    };
    let old = delegation::issue(&principal.key, &principal.kid, &g, None).unwrap();
    let msg = denied(&send(&url, &caller, "hello", Some(&old)).await);
    assert!(msg.contains("expired"), "{msg}");

    // Too long: nine links, refused before any link is read.
    let long = Value::Array(vec![ok[0].clone(); delegation::MAX_LINKS + 1]);
    let msg = denied(&send(&url, &caller, "hello", Some(&long)).await);
    assert!(msg.contains("at most 8"), "{msg}");

    // From a principal this agent does not accept.
    let foreign = grant(
        &caller,
        &other_principal,
        &cap(&["send"], None, 0),
        hour,
        None,
    );
    let msg = denied(&send(&url, &caller, "hello", Some(&foreign)).await);
    assert!(msg.contains("not one this agent accepts"), "{msg}");

    // Outside the grant: another skill; an operation not granted (get, on a send-only chain).
    let music = grant(
        &caller,
        &principal,
        &cap(&["send"], Some(&["music"]), 0),
        hour,
        None,
    );
    let msg = denied(&send(&url, &caller, "hello", Some(&music)).await);
    assert!(msg.contains("skills"), "{msg}");
    let send_only = grant(
        &caller,
        &principal,
        &cap(&["send"], Some(&["books"]), 0),
        hour,
        None,
    );
    let answer = send(&url, &caller, "mine", Some(&send_only)).await;
    let task_id = answer.1["result"]["task"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let got = rpc(&url, &caller, "GetTask", json!({"id": task_id})).await;
    let msg = denied(&got);
    assert!(msg.contains("operation get"), "{msg}");

    // A tampered link: one byte of the root's grant changed after signing.
    let mut tampered = ok.clone();
    tampered[0]["credentialSubject"]["capability"]["ops"] = json!(["send", "get", "cancel"]);
    let msg = denied(&send(&url, &caller, "hello", Some(&tampered)).await);
    assert!(msg.contains("does not verify"), "{msg}");
    let _ = books;
}

#[tokio::test]
async fn delegate_and_call_present_a_chain_and_a_proxy_hands_it_on() {
    let tmp = tempfile::tempdir().unwrap();
    let principal = Who::new(tmp.path(), "principal");
    let dir = tmp.path().join("node");
    let node = start(
        &dir,
        &format!(
            r#"
[node]
local = true

[[agent]]
id = "books"
kind = "echo"
tags = ["books"]
require_delegation_from = ["{p}"]
"#,
            p = principal.did()
        ),
    );
    let books_url = format!("{}/books", base(&node));
    let books = agent_did(&books_url).await;
    // A second node whose proxy forwards to books; the proxy also requires the principal.
    let front_dir = tmp.path().join("front");
    let front = start(
        &front_dir,
        &format!(
            r#"
[node]
local = true

[[agent]]
id = "front"
kind = "proxy"
tags = ["books"]
upstream = "{books_url}"
allow_private = true
require_delegation_from = ["{p}"]
"#,
            p = principal.did()
        ),
    );
    let front_url = format!("{}/front", base(&front));
    let front_did = agent_did(&front_url).await;
    // The caller is the first node's own did:key.
    let caller = SecretKey::load(&node_key(&dir))
        .unwrap()
        .did_key()
        .to_string();
    // Wait until the caller's node indexes both agents (front's advert arrives over libp2p
    // only if the nodes are connected; front is called by DID through the node's index).
    let chain = tmp.path().join("chain.json");
    let o = agentnet(&[
        "delegate",
        "--data-dir",
        p(&principal.dir),
        "--to",
        &caller,
        "--skill",
        "books",
        "--ops",
        "send,get",
        "--for",
        "10m",
        "--depth",
        "1",
        "--out",
        p(&chain),
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let made: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(made["principal"], principal.did());
    assert_eq!(made["links"], 1);

    // Without --delegation the agent refuses, and says what to do.
    let o = agentnet(&["call", "--data-dir", p(&dir), "--did", &books, "hi"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--delegation"), "{}", stderr(&o));
    // With it: served.
    let o = agentnet(&[
        "call",
        "--data-dir",
        p(&dir),
        "--did",
        &books,
        "--delegation",
        p(&chain),
        "--json",
        "hi",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(
        out["result"]["task"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    // The chain presented was handed off to books (depth 1 allows it): two links.
    let presented = &out["result"]["task"]["metadata"]["actorChain"];
    assert_eq!(presented.as_array().map(Vec::len), Some(2), "{presented}");
    assert_eq!(presented[1]["credentialSubject"]["id"], books);

    // A chain issued to someone else is refused by the CLI before anything is sent.
    let stranger = Who::new(tmp.path(), "stranger");
    let o = agentnet(&[
        "call",
        "--data-dir",
        p(&stranger.dir),
        "--local",
        "--did",
        &books,
        "--delegation",
        p(&chain),
        "hi",
    ]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("is to"), "{}", stderr(&o));

    // Through the proxy on the second node: the caller hands the chain to front, front hands it
    // on to books; books checks the whole chain, three links, acting link caller → front.
    let front_card: Value =
        get_json(&http(), format!("{front_url}/.well-known/agent-card.json")).await;
    let _ = front_card;
    let held = std::fs::read(&chain).unwrap();
    let held: Value = serde_json::from_slice(&held).unwrap();
    let caller_id =
        agentnet_did::DidUrl::parse(&format!("{caller}#{}", &caller["did:key:".len()..])).unwrap();
    let caller_key = SecretKey::load(&node_key(&dir)).unwrap();
    let caller_who = Who {
        dir: dir.clone(),
        key: caller_key,
        kid: caller_id,
    };
    let to_front = delegation::hand_off(
        &caller_who.key,
        &caller_who.kid,
        &held,
        &agentnet_did::Did::parse(&front_did).unwrap(),
    )
    .unwrap()
    .unwrap();
    let answer = send(&front_url, &caller_who, "via front", Some(&to_front)).await;
    assert_eq!(completed_text(&answer), "via front");

    // Outside the grant at the second hop: the principal lets the caller call front only
    // (agents = [front]); front may pass that on, but books is not among the agents granted,
    // so books refuses, and front's task fails with books' reason.
    let only_front = Capability {
        agents: Some(vec![front_did.clone()]),
        ..cap(&["send"], None, 1)
    };
    let root = delegation::issue(
        &principal.key,
        &principal.kid,
        &Grant {
            audience: caller_who.kid.did(),
            capability: &only_front,
            valid_from: now() - 60,
            valid_until: now() + 600,
        },
        None,
    )
    .unwrap();
    let to_front = delegation::hand_off(
        &caller_who.key,
        &caller_who.kid,
        &root,
        &agentnet_did::Did::parse(&front_did).unwrap(),
    )
    .unwrap()
    .unwrap();
    let (status, body) = send(&front_url, &caller_who, "too far", Some(&to_front)).await;
    assert_eq!(status, 200, "{body}");
    let task = &body["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_FAILED", "{body}");
    let why = task["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        why.contains("permission denied") && why.contains("not among the agents granted"),
        "{why}"
    );
    drop(front);
}

/// The interop tools, or `None` (skipped) where they are not installed and not required.
fn js_dir() -> Option<PathBuf> {
    interop_node_dir("@digitalbazaar/vc")
}

fn node_js(dir: &Path, args: &[&str]) -> std::process::Output {
    let deadline = Instant::now() + Duration::from_secs(60);
    let o = Command::new("node")
        .arg(dir.join("delegation.mjs"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(Instant::now() < deadline, "delegation.mjs took over 60 s");
    o
}

#[tokio::test]
async fn chains_interoperate_with_digitalbazaar_s_vc_and_eddsa_jcs_2022() {
    let Some(js) = js_dir() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let caller = Who::new(tmp.path(), "caller");
    // They issue (principal → intermediate → caller), we verify: the agent serves the caller.
    let o = node_js(
        &js,
        &[
            "issue",
            "--to",
            &caller.did(),
            "--links",
            "2",
            "--ops",
            "send,get",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let issued: Value = serde_json::from_slice(&o.stdout).unwrap();
    let their_principal = issued["principal"].as_str().unwrap().to_owned();
    let o = node_js(&js, &["issue", "--to", &caller.did(), "--expired"]);
    assert!(o.status.success());
    let expired: Value = serde_json::from_slice(&o.stdout).unwrap();
    let node = start(
        &tmp.path().join("node"),
        &format!(
            r#"
[node]
local = true

[[agent]]
id = "echo"
kind = "echo"
publish = false
require_delegation_from = ["{their_principal}", "{}"]
"#,
            expired["principal"].as_str().unwrap()
        ),
    );
    let url = format!("{}/echo", base(&node));
    let answer = send(&url, &caller, "from js", Some(&issued["chain"])).await;
    assert_eq!(completed_text(&answer), "from js");
    // Their expired chain is refused as expired (their times, our check).
    let msg = denied(&send(&url, &caller, "old", Some(&expired["chain"])).await);
    assert!(msg.contains("expired"), "{msg}");
    // Their chain with one byte changed is refused by our proof check.
    let mut bad = issued["chain"].clone();
    bad[1]["credentialSubject"]["capability"]["ops"] = json!(["send", "get", "cancel"]);
    let msg = denied(&send(&url, &caller, "bad", Some(&bad)).await);
    assert!(msg.contains("delegation link 1"), "{msg}");

    // We issue (agentnet delegate, two links), they verify.
    let principal = Who::new(tmp.path(), "principal");
    let middle = Who::new(tmp.path(), "middle");
    let first = tmp.path().join("first.json");
    let o = agentnet(&[
        "delegate",
        "--data-dir",
        p(&principal.dir),
        "--to",
        &middle.did(),
        "--ops",
        "send",
        "--skill",
        "books",
        "--depth",
        "2",
        "--for",
        "2h",
        "--out",
        p(&first),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let second = tmp.path().join("second.json");
    let o = agentnet(&[
        "delegate",
        "--data-dir",
        p(&middle.dir),
        "--from",
        p(&first),
        "--to",
        &caller.did(),
        "--ops",
        "send",
        "--skill",
        "books",
        "--depth",
        "1",
        "--out",
        p(&second),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = node_js(
        &js,
        &[
            "verify",
            p(&second),
            "--principal",
            &principal.did(),
            "--holder",
            &caller.did(),
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["verified"], true);
    assert_eq!(v["links"], 2);
    // And they refuse ours with one byte changed.
    let mut ours: Value = serde_json::from_slice(&std::fs::read(&second).unwrap()).unwrap();
    ours[0]["validUntil"] = json!(delegation::rfc3339(now() + 999_999));
    let changed = tmp.path().join("changed.json");
    std::fs::write(&changed, serde_json::to_vec(&ours).unwrap()).unwrap();
    let o = node_js(&js, &["verify", p(&changed)]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    // A wider --from link is refused by delegate itself, with the reason.
    let o = agentnet(&[
        "delegate",
        "--data-dir",
        p(&middle.dir),
        "--from",
        p(&first),
        "--to",
        &caller.did(),
        "--ops",
        "send,cancel",
        "--skill",
        "books",
    ]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("widens"), "{}", stderr(&o));
}

#[tokio::test]
async fn mcp_tool_calls_need_the_tool_granted_in_meta() {
    let tmp = tempfile::tempdir().unwrap();
    let principal = Who::new(tmp.path(), "principal");
    let dir = tmp.path().join("node");
    let node = start(
        &dir,
        &format!(
            r#"
[node]
local = true

[[agent]]
id = "tools"
kind = "echo"
tags = ["books"]
mcp = true
require_delegation_from = ["{}"]
"#,
            principal.did()
        ),
    );
    let agent = agent_did(&format!("{}/tools", base(&node))).await;
    let caller = SecretKey::load(&node_key(&dir))
        .unwrap()
        .did_key()
        .to_string();
    let write = |name: &str, ops: &str| {
        let f = tmp.path().join(name);
        let o = agentnet(&[
            "delegate",
            "--data-dir",
            p(&principal.dir),
            "--to",
            &caller,
            "--ops",
            ops,
            "--out",
            p(&f),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        f
    };
    let tool = |extra: &[&str]| {
        let mut args = vec![
            "tool",
            "echo",
            "--data-dir",
            p(&dir),
            "--did",
            &agent,
            "--args",
            r#"{"text":"hi"}"#,
        ];
        args.extend_from_slice(extra);
        agentnet(&args)
    };
    // None presented: refused, naming where a chain goes.
    let o = tool(&[]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("_meta.actorChain"), "{}", stderr(&o));
    // A chain for A2A sends only: the tool is not granted.
    let send_only = write("send.json", "send");
    let o = tool(&["--delegation", p(&send_only)]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("operation tool:echo is not granted"),
        "{}",
        stderr(&o)
    );
    // tool:echo granted: served.
    let echo = write("echo.json", "tool:echo");
    let o = tool(&["--delegation", p(&echo)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("hi"), "{}", stdout(&o));
    drop(node);
}

/// `/mcp` on the admin listener: its `send_message` presents `[mcp] delegation` (a chain to the
/// node's DID, which signs `/mcp`'s calls), so an MCP host acts on the principal's behalf; an
/// agent that requires another principal still refuses it. A chain the node does not hold
/// stops `agentnet up` with the reason.
#[tokio::test]
async fn the_node_s_mcp_presents_the_delegation_its_config_names() {
    use rmcp::model::CallToolRequestParams;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::ServiceExt as _;

    let tmp = tempfile::tempdir().unwrap();
    let principal = Who::new(tmp.path(), "principal");
    let other_principal = Who::new(tmp.path(), "other-principal");
    let node = Who::new(tmp.path(), "node");
    let delegate_to = |to: &str, out: &Path| {
        let o = agentnet(&[
            "delegate",
            "--data-dir",
            p(&principal.dir),
            "--to",
            to,
            "--skill",
            "books",
            "--ops",
            "send,get",
            "--for",
            "10m",
            "--depth",
            "1",
            "--out",
            p(out),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
    };
    let config = |chain: &Path| {
        format!(
            r#"
[node]
local = true

[mcp]
delegation = "{chain}"

[[agent]]
id = "books"
kind = "echo"
tags = ["books"]
require_delegation_from = ["{p}"]

[[agent]]
id = "vault"
kind = "echo"
tags = ["books"]
require_delegation_from = ["{q}"]
"#,
            chain = chain.display(),
            p = principal.did(),
            q = other_principal.did(),
        )
    };
    // A chain to someone else: the node does not start, and says why.
    let theirs = tmp.path().join("theirs.json");
    delegate_to(&other_principal.did(), &theirs);
    let cfg = tmp.path().join("bad.toml");
    std::fs::write(&cfg, config(&theirs)).unwrap();
    let mut args = vec!["up", "--config", p(&cfg), "--data-dir", p(&node.dir)];
    args.extend(LOOPBACK);
    let o = agentnet(&args);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("[mcp] delegation") && err.contains("is to"),
        "{err}"
    );

    let chain = tmp.path().join("chain.json");
    delegate_to(&node.did(), &chain);
    let up = start(&node.dir, &config(&chain));
    let books = agent_did(&format!("{}/books", base(&up))).await;
    let vault = agent_did(&format!("{}/vault", base(&up))).await;
    let token = std::fs::read_to_string(node.dir.join("admin.token")).unwrap();
    let url = format!("http://{}/mcp", up.info["admin"].as_str().unwrap());
    let http = agentnet_did::http::client_builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let transport = StreamableHttpClientTransport::with_client(
        http,
        StreamableHttpClientTransportConfig::with_uri(url).auth_header(token.trim().to_owned()),
    );
    let host = ().serve(transport).await.expect("the MCP client starts");
    let send = |did: String| {
        let host = &host;
        async move {
            let args = json!({"did": did, "text": "hi"});
            let Value::Object(args) = args else {
                unreachable!()
            };
            host.call_tool(CallToolRequestParams::new("send_message").with_arguments(args))
                .await
                .unwrap()
        }
    };
    let r = send(books).await;
    assert_ne!(r.is_error, Some(true), "{r:?}");
    let content = r.structured_content.clone().unwrap_or_default();
    assert_eq!(content["state"], "completed", "{r:?}");
    // The vault requires another principal: the chain is checked there, and refused.
    let r = send(vault).await;
    assert_eq!(r.is_error, Some(true), "{r:?}");
    let text = format!("{r:?}");
    assert!(
        text.contains("PERMISSION_DENIED") || text.contains("principal"),
        "{text}"
    );
}

/// The issuer of a delegation link is a DID the caller chooses; a fresh `did:web` path of a
/// host the attacker picks made the node fetch from that host once per link: 79 GETs in 10 s
/// at one target from four addresses, more with more addresses. Every fetch of a host now
/// spends one budget of that host (the resolver's, shared by every path that resolves DIDs):
/// six addresses get no more out of it than one.
#[tokio::test]
async fn fresh_did_web_issuers_cost_their_host_one_budget_whatever_the_addresses() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let tmp = tempfile::tempdir().unwrap();
    let caller = Who::new(tmp.path(), "caller");
    // The target: a web server that counts the GETs it is sent, and has no documents.
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    let app = axum::Router::new().fallback(move || {
        counted.fetch_add(1, Ordering::SeqCst);
        async { axum::http::StatusCode::NOT_FOUND }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let node = start(
        &tmp.path().join("node"),
        "[node]\nlocal = true\n\n[[agent]]\nid = \"books\"\nkind = \"echo\"\n\
         tags = [\"books\"]\npublish = false\n",
    );
    let url = format!("{}/books", base(&node));
    let started = Instant::now();
    let mut sent = 0;
    for a in 1..=6 {
        for n in 0..16 {
            let issuer =
                DidUrl::parse(&format!("did:web:127.0.0.1%3A{port}:a{a}:n{n}#key")).unwrap();
            let chain = delegation::issue(
                &caller.key,
                &issuer,
                &Grant {
                    audience: caller.kid.did(),
                    capability: &cap(&["send"], None, 0),
                    valid_from: now() - 60,
                    valid_until: now() + 3600,
                },
                None,
            )
            .unwrap();
            let mut message = json!({"role": "ROLE_USER", "parts": [{"text": "hi"}],
                "messageId": httpsig::new_nonce()});
            message["metadata"] = json!({"actorChain": chain});
            let answer = rpc_from(
                &format!("127.0.3.{a}"),
                &url,
                &caller,
                "SendMessage",
                json!({"message": message}),
            )
            .await;
            assert!(answer.1["error"].is_object(), "refused: {answer:?}");
            sent += 1;
        }
    }
    // The default budget of a host: 32, then two a second.
    let allowed = 32 + 2 * started.elapsed().as_secs() as usize + 2;
    let got = hits.load(Ordering::SeqCst);
    assert!(
        got <= allowed,
        "{got} GETs at one host for {sent} links from six addresses (at most {allowed})"
    );
}

/// `delegate` refuses what would make a useless or misread link: a duration without its unit,
/// and an audience no agent could verify. Nothing is written.
#[test]
fn delegate_refuses_a_bare_duration_and_an_audience_that_does_not_resolve() {
    let tmp = tempfile::tempdir().unwrap();
    let principal = Who::new(tmp.path(), "principal");
    let to = Who::new(tmp.path(), "to").did();
    let out = tmp.path().join("chain.json");
    let delegate = |to: &str, valid_for: &str| {
        agentnet(&[
            "delegate",
            "--data-dir",
            p(&principal.dir),
            "--to",
            to,
            "--for",
            valid_for,
            "--out",
            p(&out),
        ])
    };
    let o = delegate(&to, "2");
    assert!(!o.status.success());
    assert!(stderr(&o).contains("2s, 2m, 2h or 2d"), "{}", stderr(&o));
    let o = delegate("did:key:zbad", "2h");
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("not a did:key of an Ed25519 key"),
        "{}",
        stderr(&o)
    );
    assert!(!out.exists(), "a refused delegation wrote a file");
    let o = delegate(&to, "2h");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(out.exists());
}
