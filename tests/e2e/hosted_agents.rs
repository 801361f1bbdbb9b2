//! `command` agents of the real binary, attacked over real HTTP on loopback: what a stranger's
//! message can reach (the node's environment and working directory) and how many processes
//! strangers can start at once.

use std::time::Duration;

use agentnet_did::{httpsig, DidUrl, SecretKey};
use serde_json::{json, Value};

use crate::common;
use common::{start_up, up_command};

const CONFIG: &str = r#"
[[agent]]
id = "env"
kind = "command"
policy = "open"
publish = false
command = ["/bin/sh", "-c", "env; pwd"]
env = { GREETING = "hi" }

[[agent]]
id = "slow"
kind = "command"
publish = false
command = ["/bin/sleep", "8"]

[[agent]]
id = "shout"
kind = "command"
publish = false
command = ["tr", "a-z", "A-Z"]
"#;

/// A variable of the node's environment that must not reach a command.
const MARKER: &str = "AGENTNET_TEST_NODE_SECRET";

/// `agentnet up` with [`CONFIG`], [`MARKER`] in its environment and a working directory of
/// the test's; killed when dropped.
struct Node {
    _child: tokio::process::Child,
    dir: tempfile::TempDir,
    info: Value,
}

impl Node {
    async fn start() -> Node {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = up_command(dir.path(), Some(CONFIG));
        let cwd = dir.path().join("cwd");
        std::fs::create_dir(&cwd).unwrap();
        cmd.env(MARKER, "leaked").current_dir(&cwd);
        let (child, info) = start_up(cmd).await;
        Node {
            _child: child,
            dir,
            info,
        }
    }

    fn url(&self, agent: &str) -> String {
        format!("http://{}/a2a/{agent}", self.info["http"].as_str().unwrap())
    }
}

/// A fresh did:key caller.
struct Caller {
    key: SecretKey,
    kid: DidUrl,
}

impl Caller {
    fn new() -> Self {
        let key = SecretKey::generate();
        let did = key.did_key();
        let kid = did.with_fragment(did.method_specific_id());
        Caller { key, kid }
    }
}

fn send_body(text: &str, return_immediately: bool) -> Vec<u8> {
    let id = httpsig::new_nonce();
    let mut params = json!({"message": {"role": "ROLE_USER", "parts": [{"text": text}],
        "messageId": id}});
    if return_immediately {
        params["configuration"] = json!({"returnImmediately": true});
    }
    serde_json::to_vec(
        &json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}),
    )
    .unwrap()
}

/// POST a JSON-RPC body, signed by `caller` if given; the status and the JSON answer.
async fn post(
    http: &reqwest::Client,
    url: &str,
    body: Vec<u8>,
    caller: Option<&Caller>,
) -> (u16, Value) {
    let mut req = http
        .post(url)
        .header("content-type", "application/a2a+json")
        .header("A2A-Version", "1.0");
    if let Some(c) = caller {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let h = httpsig::sign(
            &c.key,
            &c.kid,
            "POST",
            url,
            &body,
            now,
            &httpsig::new_nonce(),
        )
        .unwrap();
        let mut headers = reqwest::header::HeaderMap::new();
        h.apply(&mut headers);
        req = req.headers(headers);
    }
    let resp = req.body(body).send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

fn texts(task: &Value) -> String {
    task["artifacts"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|a| a["parts"].as_array().cloned().unwrap_or_default())
        .filter_map(|p| p["text"].as_str().map(str::to_owned))
        .collect()
}

/// The attacker: a stranger sends a message to an `open` agent that runs `env; pwd`. Before,
/// the answer held the node's whole environment (its secrets, its AGENTNET_* settings) and its
/// working directory; now only what the configuration names (`GREETING`, the default `PATH`)
/// and what `sh` sets itself, and the agent's own directory, mode 0700.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_sees_only_its_configured_environment_in_its_own_directory() {
    let node = Node::start().await;
    let http = agentnet_did::http::client_builder()
        .no_proxy()
        .build()
        .unwrap();
    let (s, v) = post(&http, &node.url("env"), send_body("x", false), None).await;
    assert_eq!(s, 200, "{v}");
    let task = &v["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{v}");
    let out = texts(task);
    assert!(
        !out.contains(MARKER),
        "the node's environment leaked: {out}"
    );
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines.contains(&"GREETING=hi"), "{out}");
    assert!(lines.contains(&"PATH=/usr/bin:/bin"), "{out}");
    // Names only sh itself sets, besides the configured ones.
    for l in &lines[..lines.len() - 1] {
        let name = l.split('=').next().unwrap();
        assert!(
            ["GREETING", "PATH", "PWD", "OLDPWD", "SHLVL", "_"].contains(&name),
            "{name} reached the command: {out}"
        );
    }
    let work = node.dir.path().join("data/hosted/env/work");
    let work = work.canonicalize().unwrap();
    assert_eq!(lines.last().copied(), work.to_str(), "{out}");
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&work).unwrap().permissions().mode();
    assert_eq!(
        mode & 0o777,
        0o700,
        "the working directory is the node user's only"
    );
}

/// The attacker: 24 fresh DIDs start two `returnImmediately` tasks each (no connection held)
/// on a `command` agent whose command sleeps; one DID tries six. Before, every one started a
/// process (64 DIDs started 1 024 and the node ran out of file descriptors: "Too many open
/// files"). Now at most 16 run on the agent and 4 per DID: the rest are refused at once with
/// `RESOURCE_EXHAUSTED` (JSON-RPC -32000) and nothing starts for them; an honest caller of
/// another command agent is served meanwhile; every accepted task completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_processes_are_capped_per_caller_and_per_agent() {
    let node = Node::start().await;
    let http = agentnet_did::http::client_builder()
        .no_proxy()
        .build()
        .unwrap();
    let slow = node.url("slow");

    // One DID: four accepted, the fifth and sixth refused.
    let greedy = Caller::new();
    let mut accepted = Vec::new();
    let mut refused = 0;
    for _ in 0..6 {
        let (s, v) = post(&http, &slow, send_body("x", true), Some(&greedy)).await;
        assert_eq!(s, 200, "{v}");
        if let Some(id) = v["result"]["task"]["id"].as_str() {
            accepted.push((id.to_owned(), 0));
        } else {
            assert_eq!(v["error"]["code"], -32000, "{v}");
            assert_eq!(v["error"]["data"][0]["reason"], "RESOURCE_EXHAUSTED", "{v}");
            refused += 1;
        }
    }
    assert_eq!((accepted.len(), refused), (4, 2), "per caller");

    // Fresh DIDs from one address: that source's 8 (and no more) run, whatever DIDs it signs
    // with. One request each, one after the other (the processes sleep long enough for all of
    // them to be running together).
    let from = common::client_from;
    let callers: Vec<Caller> = (0..36).map(|_| Caller::new()).collect();
    let one_address = from("127.0.0.2");
    let mut busy = 0;
    for (i, c) in callers.iter().enumerate().take(12) {
        let (s, v) = post(&one_address, &slow, send_body("x", true), Some(c)).await;
        assert_eq!(s, 200, "{v}");
        if let Some(id) = v["result"]["task"]["id"].as_str() {
            accepted.push((id.to_owned(), i + 1));
        } else {
            assert_eq!(v["error"]["code"], -32000, "{v}");
            busy += 1;
        }
    }
    assert_eq!((accepted.len(), busy), (4 + 8, 4), "per source");

    // Fresh DIDs from more addresses: the agent's 16 fill up, the rest are refused.
    busy = 0;
    for (i, c) in callers.iter().enumerate().skip(12) {
        let http = from(&format!("127.0.0.{}", 3 + i % 4));
        let (s, v) = post(&http, &slow, send_body("x", true), Some(c)).await;
        assert_eq!(s, 200, "{v}");
        if let Some(id) = v["result"]["task"]["id"].as_str() {
            accepted.push((id.to_owned(), i + 1));
        } else {
            assert_eq!(v["error"]["code"], -32000, "{v}");
            assert!(
                v["error"]["message"].as_str().unwrap().contains("running"),
                "{v}"
            );
            busy += 1;
        }
    }
    assert_eq!(accepted.len(), 16, "per agent: {busy} refused");
    assert_eq!(busy, 24 - 4);

    // An honest caller of another command agent is served meanwhile.
    let honest = Caller::new();
    let (s, v) = post(
        &http,
        &node.url("shout"),
        send_body("hello", false),
        Some(&honest),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        v["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{v}"
    );
    assert_eq!(texts(&v["result"]["task"]), "HELLO", "{v}");

    // Every accepted task completes (none failed starting its process), each for its owner.
    let all = std::iter::once(&greedy)
        .chain(callers.iter())
        .collect::<Vec<_>>();
    for (id, who) in &accepted {
        let mut state = Value::Null;
        for _ in 0..150 {
            let body = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 2,
                "method": "GetTask", "params": {"id": id}}))
            .unwrap();
            let (_, v) = post(&http, &slow, body, Some(all[*who])).await;
            state = v["result"]["status"].clone();
            if state["state"] != "TASK_STATE_WORKING" && state["state"] != "TASK_STATE_SUBMITTED" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert_eq!(state["state"], "TASK_STATE_COMPLETED", "{id}: {state}");
    }
    // The slots are free again.
    let (_, v) = post(&http, &slow, send_body("x", true), Some(&greedy)).await;
    assert!(v["result"]["task"]["id"].is_string(), "{v}");
}
